// Turns `tower train`'s parsed flags into the library's trainer configuration.
#include "cli/train_options.h"

#include <cstdlib>

#include <sstream>
#include <stdexcept>
#include <string>

#include <fmt/ranges.h>

#include "cli/train_identity.h"
#include "base/error.h"

namespace tower::cli {

// "0,1;2,3" -> {{0, 1}, {2, 3}}; the assignment itself is validated by the all-reduce.
GroupAssignment parse_groups(const std::string& text)
{
	GroupAssignment groups;
	if (text.empty())
		return groups;
	std::stringstream all(text);
	for (std::string group; std::getline(all, group, ';');) {
		groups.emplace_back();
		std::stringstream members(group);
		for (std::string member; std::getline(members, member, ',');) {
			size_t used = 0;
			int rank = -1;
			try {
				rank = std::stoi(member, &used);
			} catch (const std::exception&) {
				used = 0;
			}
			if (used == 0 || used != member.size())
				throw AgreedError(fmt::format("--groups '{}': '{}' is not a rank number; write groups "
							      "as comma-separated ranks separated by ';', e.g. '0,1;2,3'",
							      text, member));
			groups.back().push_back(rank);
		}
	}
	return groups;
}

// "STEP[:RANK]", STEP counted from 1 as the logs count it; RANK defaults to 0.
void parse_injection(const std::string& text, int world_size, GradientOptions* o)
{
	const auto colon = text.find(':');
	long long step = 0, rank = 0;
	size_t used = 0;
	try {
		step = std::stoll(text.substr(0, colon), &used);
		if (used != (colon == std::string::npos ? text.size() : colon))
			used = 0;
		if (used && colon != std::string::npos) {
			const std::string r = text.substr(colon + 1);
			rank = std::stoll(r, &used);
			if (used != r.size())
				used = 0;
		}
	} catch (const std::exception&) {
		used = 0;
	}
	if (!used || step < 1 || rank < 0 || rank >= world_size)
		throw AgreedError(fmt::format("--inject-nonfinite '{}': write STEP[:RANK] with STEP >= 1 and RANK below "
					      "the {} ranks of this job", text, world_size));
	o->inject_nonfinite_step = step - 1;
	o->inject_nonfinite_rank = static_cast<int>(rank);
}

// "RANK:MS": a straggler for tests, demos and benchmarks.
void parse_delay(const std::string& text, int world_size, StrategyOptions* o)
{
	const auto colon = text.find(':');
	long long rank = -1;
	double ms = -1;
	bool ok = colon != std::string::npos;
	try {
		size_t used = 0;
		if (ok) {
			rank = std::stoll(text.substr(0, colon), &used);
			ok = used == colon;
		}
		if (ok) {
			const std::string m = text.substr(colon + 1);
			ms = std::stod(m, &used);
			ok = used == m.size();
		}
	} catch (const std::exception&) {
		ok = false;
	}
	if (!ok || !(ms >= 0) || ms > 3.6e6)
		throw AgreedError(fmt::format("--inject-delay '{}': write RANK:MS, e.g. 2:40 for rank 2 sleeping 40 ms per "
					      "step, with MS from 0 to 3600000", text));
	if (rank < 0 || rank >= world_size)
		throw AgreedError(fmt::format("--inject-delay '{}': rank {} is outside this job's ranks 0..{}", text, rank,
					      world_size - 1));
	o->inject_delay_rank = static_cast<int>(rank);
	o->inject_delay_ms = ms;
}

namespace {

int64_t parse_max_staleness(const std::string& text)
{
	if (text == "none")
		return -1;
	size_t used = 0;
	int64_t s = -1;
	try {
		s = std::stoll(text, &used);
	} catch (const std::exception&) {
		used = 0;
	}
	if (used == 0 || used != text.size() || s < 0)
		throw AgreedError(fmt::format("--max-staleness {}: give S >= 0 updates (0 is lock-step) or none for no "
					      "bound", text));
	return s;
}

void detached_options(const TrainConfig& c, int world_size, StrategyOptions* o)
{
	if (c.replicas_to_aggregate) {
		if (c.strategy != "sync-replicas")
			throw AgreedError(fmt::format("--replicas-to-aggregate belongs to --strategy sync-replicas, not {}; "
						      "drop it", c.strategy));
		if (*c.replicas_to_aggregate < 1)
			throw AgreedError(fmt::format("--replicas-to-aggregate {}: an update averages at least 1 gradient; "
						      "give N >= 1 (default: one per worker)", *c.replicas_to_aggregate));
		o->replicas_to_aggregate = *c.replicas_to_aggregate;
	}
	if (c.async_scale) {
		if (c.strategy != "async")
			throw AgreedError(fmt::format("--async-scale belongs to --strategy async, not {}; drop it", c.strategy));
		o->async_scale = *c.async_scale;
	}
	if (c.async_staleness) {
		if (c.strategy != "async")
			throw AgreedError(fmt::format("--async-staleness belongs to --strategy async, not {}; drop it", c.strategy));
		if (*c.async_staleness != "none" && *c.async_staleness != "scale")
			throw AgreedError(fmt::format("--async-staleness {}: write none (every gradient at the same rate) or "
						      "scale (a gradient s updates late at most 1/(s+1) of it)", *c.async_staleness));
		o->async_staleness_scale = *c.async_staleness == "scale";
	}
	if (c.max_staleness) {
		if (c.strategy != "async")
			throw AgreedError(fmt::format("--max-staleness belongs to --strategy async, not {}; drop it", c.strategy));
		o->max_staleness = parse_max_staleness(*c.max_staleness);
	}
	if (!c.inject_delay.empty())
		parse_delay(c.inject_delay, world_size, o);
}

ReplicatedOptions replicated_options(const TrainConfig& c, const Topology& topology, const Device& device)
{
	ReplicatedOptions o;
	o.groups = parse_groups(c.groups);
	// auto never picks a mode that cannot run here (hierarchical needs even nodes).
	o.mode = c.allreduce == "auto" ? automatic_all_reduce_mode(topology, device, o.groups)
				       : parse_all_reduce_mode(c.allreduce);
	o.fusion_mb = c.fusion_mb;
	o.overlap = c.overlap;
	o.shard_update = c.shard_update;
	o.all_reduce.deterministic = c.deterministic;
	return o;
}

GradientOptions gradient_options(const TrainConfig& c, int world_size)
{
	GradientOptions o;
	o.reduce = parse_reduce_op(c.reduce);
	if (o.reduce != ReduceOp::mean && o.reduce != ReduceOp::sum)
		throw AgreedError(fmt::format("--reduce {}: gradients are reduced by mean or sum", c.reduce));
	o.compress = c.compress == "none" ? DType::f32 : parse_precision(c.compress);
	LossScaleOptions tuning;
	tuning.log2_init = c.loss_scale_init;
	tuning.log2_inc = c.loss_scale_inc;
	tuning.log2_dec = c.loss_scale_dec;
	o.loss_scale = parse_loss_scale(c.loss_scale, tuning);
	if (!c.inject_nonfinite.empty())
		parse_injection(c.inject_nonfinite, world_size, &o);
	return o;
}

} // namespace

TrainerConfig trainer_config(const TrainConfig& c, const Topology& topology, const Device& device)
{
	if (c.strategy != "replicated" && !c.replicated_only_given.empty())
		throw AgreedError(fmt::format("{}: only the replicated strategy all-reduces gradients, so {} does not "
					      "apply to --strategy {}; drop it",
					      fmt::join(c.replicated_only_given, ", "),
					      c.replicated_only_given.size() == 1 ? "it" : "they", c.strategy));
	TrainerConfig t;
	t.optimizer = c.optimizer;
	t.schedule = c.schedule;
	t.strategy.name = c.strategy;
	t.strategy.replicated = replicated_options(c, topology, device);
	t.strategy.gradients = gradient_options(c, topology.size());
	t.strategy.ps_ranks = c.ps_ranks;
	t.strategy.ema_decay = c.ema_decay;
	detached_options(c, topology.size(), &t.strategy);
	t.epochs = c.epochs;
	t.batch = c.batch;
	t.accumulate = c.accumulate;
	t.max_steps = c.max_steps;
	t.data_seed = c.model.seed;
	t.log_every = c.log_every;
	t.eval_every = c.eval_every;
	t.check_every = c.check_every;
	t.timeline_path = c.timeline_path;
	t.checkpoint.dir = c.checkpoint_dir;
	t.checkpoint.every = c.checkpoint_every;
	t.checkpoint.keep = c.keep_checkpoints;
	t.checkpoint.resume = c.resume;
	t.checkpoint.resume_path = c.resume_path;
	t.checkpoint.identity = run_identity(c);
	t.labels = {{"model", c.model.name},
		    {"precision", c.precision},
		    {"compress", c.compress},
		    {"allreduce", c.strategy == "replicated" ? std::string(all_reduce_mode_name(t.strategy.replicated.mode)) : std::string("none")}};
	if (c.ema_decay)
		t.labels["ema_decay"] = *c.ema_decay;
	// Under an elastic launcher (cli/elastic.cpp), the summary carries its history of the
	// earlier generations.
	if (const char* generation = std::getenv("TOWER_ELASTIC_GENERATION")) {
		const char* history = std::getenv("TOWER_ELASTIC_HISTORY");
		t.labels["elastic"] = {{"generation", std::atoi(generation)},
				       {"earlier", nlohmann::json::parse(history ? history : "[]", nullptr, false)}};
	}
	return t;
}

bool under_elastic_launcher()
{
	return std::getenv("TOWER_ELASTIC_GENERATION") != nullptr;
}

} // namespace tower::cli
