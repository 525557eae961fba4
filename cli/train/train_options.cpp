// Turns `tower train`'s parsed options into the library's model and trainer configurations.
#include "cli/train/train_options.h"

#include <cstdlib>
#include <string>

#include "base/error.h"
#include "cli/train/train_identity.h"
#include "collectives/all_reduce.h"
#include "runtime/options/field_rules.h"
#include "runtime/options/run_fields.h"

namespace tower::cli {

namespace {

// --allreduce auto (tower train's default) never picks a mode that cannot run here (hierarchical
// needs ranks that share memory on the CPU, even nodes on GPUs; ring where every node holds one
// rank); any other text is the row's.
void set_all_reduce_mode(const TrainConfig& c, const Topology& topology, const Device& device, TrainerConfig* t)
{
	const auto given = c.given.find("allreduce");
	const std::string text = given == c.given.end() ? std::string("auto") : given->second;
	if (text == "auto")
		t->strategy.replicated.mode = automatic_all_reduce_mode(topology, device, t->strategy.replicated.groups);
	else
		find_field(trainer_fields(), "allreduce")->set(*t, text);
}

nlohmann::json labels(const ModelConfig& model, const TrainerConfig& t)
{
	const auto text = [&](const std::string& id) { return find_field(trainer_fields(), id)->get(t); };
	nlohmann::json j = {{"model", model.name},
			    {"precision", find_field(model_fields(), "precision")->get(model)},
			    {"compress", text("compress")},
			    {"allreduce", t.strategy.name == "replicated" || t.strategy.name == "local-sgd" ? text("allreduce")
													       : std::string("none")}};
	if (t.strategy.ema_decay)
		j["ema_decay"] = *t.strategy.ema_decay;
	// Under an elastic launcher (cli/elastic/elastic.cpp), the summary carries its history of the
	// earlier generations.
	if (const char* generation = std::getenv("TOWER_ELASTIC_GENERATION")) {
		const char* history = std::getenv("TOWER_ELASTIC_HISTORY");
		j["elastic"] = {{"generation", std::atoi(generation)},
				{"earlier", nlohmann::json::parse(history ? history : "[]", nullptr, false)}};
	}
	return j;
}

} // namespace

ModelConfig model_config(const TrainConfig& c)
{
	ModelConfig m;
	apply_fields(model_fields(), c.given, m);
	return m;
}

TrainerConfig trainer_config(const TrainConfig& c, const ModelConfig& model, const Topology& topology,
			     const Device& device)
{
	TrainerConfig t;
	apply_fields(trainer_fields(), c.given, t, {"allreduce"});
	// The library's "none" leaves the update to a framework (the PyTorch front end): not a trainer's.
	if (t.optimizer.name == "none")
		throw AgreedError("`optimizer` 'none' leaves the update to another framework (tower.torch); tower train "
				  "needs sgd, momentum, adam or adamw");
	check_fields_read(trainer_fields(), given_ids(c.given), t.strategy.name);
	set_all_reduce_mode(c, topology, device, &t);
	t.data_seed = model.seed; // one --seed orders the data and draws the initial parameters
	t.checkpoint.resume = c.resume;
	t.checkpoint.resume_path = c.resume_path;
	t.checkpoint.identity = run_identity(model, t);
	t.checkpoint.read_identity = read_identity;
	t.labels = labels(model, t);
	return t;
}

} // namespace tower::cli
