// `tower sample`: text from a GPT checkpoint of `tower train --model gpt`, one byte at a time.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>

#include "cli/command.h"
#include "cli/train/train_identity.h"
#include "models/gpt.h"
#include "models/model_factory.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_file.h"
#include "runtime/checkpoint/checkpoint_files.h"
#include "runtime/checkpoint/variable_pieces.h"
#include "runtime/options/run_fields.h"

namespace tower::cli {

namespace fs = std::filesystem;

namespace {

// Bad input is the user's to fix: a plain message, without the source location TOWER_CHECK adds.
template <typename... Args> void expect(bool ok, fmt::format_string<Args...> format, Args&&... args)
{
	if (!ok)
		throw Error(fmt::format(format, std::forward<Args>(args)...));
}

struct SampleOptions {
	std::string checkpoint;
	std::string prompt = "\n";
	int64_t tokens = 200;
	double temperature = 0.8;
	uint64_t seed = 1;
};

// The step directory to read: PATH itself when it holds a manifest, else the newest step directory
// under it that verifies (as --resume picks).
std::string step_dir_of(const std::string& path)
{
	if (fs::exists(fs::path(path) / manifest_name))
		return path;
	std::error_code ec;
	expect(fs::is_directory(path, ec), "cannot read checkpoint directory {}", path);
	for (const auto& [step, step_path] : step_dirs(path)) {
		const std::string dir = step_path.string();
		try {
			verify_checkpoint(dir);
			return dir;
		} catch (const Error& e) {
			std::fprintf(stderr, "tower sample: skipping %s: %s\n", dir.c_str(), e.what());
		}
	}
	throw Error(fmt::format("no valid checkpoint in {}; give a directory of tower train --checkpoint-dir or one of "
				"its step-* directories",
				path));
}

// The model's table read back from the checkpoint's identity (manifests keyed by flag too).
GptOptions gpt_options_of(const nlohmann::json& saved, const std::string& dir)
{
	const nlohmann::json identity = identity_by_id(saved);
	ModelConfig m;
	m.name = "?";
	for (const Field<ModelConfig>& row : model_fields())
		if (identity.contains(row.id))
			row.set(m, identity.at(row.id).get<std::string>());
	expect(m.name == "gpt", "{} is a checkpoint of model '{}'; tower sample reads those of tower train --model gpt",
	       dir, m.name);
	return gpt_options(m);
}

// Loads every parameter from the checkpoint's pieces, whatever the strategy that wrote them: whole
// on rank 0 (replicated; local-sgd's synced values) or sliced over owners (parameter-server, async,
// sync-replicas).
void load_parameters(GptModel& model, const std::string& dir, const nlohmann::json& manifest)
{
	std::vector<VariablePiece> saved;
	for (const auto& j : manifest.at("index"))
		saved.push_back(VariablePiece::from_json(j));
	PieceFiles read(dir);
	for (Parameter* p : model.parameters()) {
		const auto shape_of = [p](const std::string&) { return p->value.shape(); };
		fill_from_pieces(piece_of({p->name, p->value}, shape_of), p->value, saved, std::ref(read));
	}
}

// The next byte: the arg-max at temperature 0, else a draw from softmax(logits / temperature).
int32_t next_byte(const std::vector<float>& logits, double temperature, std::mt19937_64& gen)
{
	if (temperature <= 0)
		return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
	const float top = *std::max_element(logits.begin(), logits.end());
	std::vector<double> weights(logits.size());
	for (size_t i = 0; i < logits.size(); ++i)
		weights[i] = std::exp((logits[i] - top) / temperature);
	return std::discrete_distribution<int32_t>(weights.begin(), weights.end())(gen);
}

int run_sample(const SampleOptions& o)
{
	const std::string dir = step_dir_of(o.checkpoint);
	const nlohmann::json manifest = verify_checkpoint(dir);
	GptModel model(gpt_options_of(manifest.at("identity"), dir), Device{});
	load_parameters(model, dir, manifest);
	std::vector<int32_t> tokens;
	for (unsigned char c : o.prompt)
		tokens.push_back(c);
	std::fwrite(o.prompt.data(), 1, o.prompt.size(), stdout);
	std::mt19937_64 gen(o.seed);
	for (int64_t i = 0; i < o.tokens; ++i) {
		const int32_t b = next_byte(model.next_token_logits(tokens), o.temperature, gen);
		tokens.push_back(b);
		std::fputc(b, stdout);
		std::fflush(stdout);
	}
	std::fputc('\n', stdout);
	return 0;
}

} // namespace

LocalCommand add_sample_command(CLI::App& parent)
{
	auto o = std::make_shared<SampleOptions>();
	CLI::App* app = parent.add_subcommand("sample", "Generate text from a checkpoint of tower train --model gpt (on "
							"this CPU, without mpirun)");
	app->add_option("--checkpoint", o->checkpoint, "A --checkpoint-dir of tower train, or one of its step-* directories")
		->required();
	app->add_option("--prompt", o->prompt, "The text to continue");
	app->add_option("--tokens", o->tokens, "Bytes to generate")->check(CLI::NonNegativeNumber);
	app->add_option("--temperature", o->temperature, "Softmax temperature (0: always the likeliest byte)")
		->check(CLI::NonNegativeNumber);
	app->add_option("--seed", o->seed, "Seed of the draws");
	return {app, [o] {
		try {
			return run_sample(*o);
		} catch (const std::exception& e) {
			std::fprintf(stderr, "tower sample: error: %s\n", e.what());
			return 1;
		}
	}};
}

} // namespace tower::cli
