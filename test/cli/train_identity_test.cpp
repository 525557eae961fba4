// tower train's checkpoint identity: built from the option tables, and a manifest written before
// them (keyed by flag, values as typed) read into the same form.
#include <doctest/doctest.h>

#include "cli/train/train_identity.h"

using namespace tower;

namespace {

// What tower train stored for its default options before the option tables.
nlohmann::json identity_by_flag()
{
	return nlohmann::json::parse(R"({
		"--model": "mlp", "--hidden": 0, "--depth": 2, "--seed": 42, "--optimizer": "momentum",
		"--momentum": 0.9, "--nesterov": false, "--weight-decay": 0, "--lr": 0.05, "--schedule": "constant",
		"--warmup-steps": 0, "--step-size": 1000, "--gamma": 0.1, "--batch": 128, "--reduce": "mean",
		"--groups": "", "--precision": "fp32", "--compress": "none", "--loss-scale": "dynamic:log2",
		"--loss-scale-init": 64.0, "--loss-scale-inc": 0.0005, "--loss-scale-dec": 1.0, "--accumulate": 1,
		"--inject-nonfinite": "", "--ema-decay": null})");
}

ModelConfig seeded()
{
	ModelConfig m;
	m.seed = 42;
	return m;
}

TrainerConfig dynamic_scaling()
{
	TrainerConfig t;
	t.strategy.gradients.loss_scale.mode = LossScaleMode::dynamic;
	return t;
}

} // namespace

TEST_CASE("a manifest keyed by flag reads as today's identity of the same options")
{
	const nlohmann::json now = cli::run_identity(seeded(), dynamic_scaling());
	CHECK(now.at("lr") == "0.05");
	CHECK(now.at("loss_scale") == "dynamic");
	CHECK(cli::read_identity(identity_by_flag(), now) == now);
}

TEST_CASE("a manifest keyed by flag with another value differs in that field alone")
{
	nlohmann::json old = identity_by_flag();
	old["--lr"] = 0.1;
	const nlohmann::json now = cli::run_identity(seeded(), dynamic_scaling());
	const nlohmann::json read = cli::read_identity(old, now);
	CHECK(read.at("lr") == "0.1");
	nlohmann::json same = read;
	same["lr"] = "0.05";
	CHECK(same == now);
}

TEST_CASE("today's manifests are read as they are, less the fields today's identity does not hold")
{
	const nlohmann::json now = cli::run_identity(seeded(), TrainerConfig{});
	CHECK(cli::read_identity(now, now) == now);
	nlohmann::json saved = now;
	saved["max_staleness"] = "2"; // held by an earlier identity, may change now
	saved["lr"] = "0.1";
	nlohmann::json expected = now;
	expected["lr"] = "0.1";
	CHECK(cli::read_identity(saved, now) == expected);
}
