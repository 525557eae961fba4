// The strategy's option table: how gradients are reduced (every strategy), the replicated
// strategy's all-reduce, the owners' placement, async and sync-replicas, local-sgd's outer sync,
// and the test hooks.
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <optional>
#include <sstream>

#include <fmt/ranges.h>

#include "base/error.h"
#include "runtime/strategies/fault_injection.h"
#include "runtime/options/field_codecs.h"
#include "runtime/options/names.h"
#include "runtime/options/run_fields.h"

namespace tower {

namespace {

using Row = Field<StrategyOptions>;
const std::vector<std::string> replicated = {"replicated"};
// The all-reduce's own settings: local-sgd's outer all-reduce takes them too.
const std::vector<std::string> all_reducing = {"replicated", "local-sgd"};
const std::vector<std::string> local_sgd = {"local-sgd"};
const std::vector<std::string> placed = {"parameter-server", "async", "sync-replicas"};
const std::vector<std::string> async = {"async"};

// A row over several members, in a text form of its own.
Row text_row(std::string id, std::string help, std::function<std::string(const StrategyOptions&)> get,
	     std::function<void(StrategyOptions&, const std::string&)> set,
	     std::function<std::string(const StrategyOptions&)> other)
{
	Row f;
	f.id = std::move(id);
	f.help = std::move(help);
	f.get = std::move(get);
	f.set = std::move(set);
	f.other = std::move(other);
	return f;
}

Row with(Row f, std::vector<std::string> strategies, bool may_change_on_resume)
{
	f.strategies = std::move(strategies);
	f.may_change_on_resume = may_change_on_resume;
	return f;
}

ReduceOp parse_reduce(const std::string& t)
{
	if (t == "mean" || t == "avg")
		return ReduceOp::mean;
	if (t == "sum")
		return ReduceOp::sum;
	throw AgreedError(fmt::format("`reduce` {}: gradients are reduced by mean or sum", t));
}

DType parse_compress(const std::string& t)
{
	return t == "none" ? DType::f32 : parse_compute_type("compress", t);
}

std::string compress_text(const DType& d)
{
	return d == DType::f32 ? "none" : precision_text(d);
}

std::string loss_scale_text(const LossScaleOptions& o)
{
	switch (o.mode) {
	case LossScaleMode::none: return "none";
	case LossScaleMode::fixed: return fmt::format("static:{}", o.fixed_scale);
	case LossScaleMode::dynamic: return o.policy == LossScalePolicy::growth ? "dynamic:growth" : "dynamic";
	}
	return "none";
}

// Its policies' tuning is in rows of its own: the form keeps them.
Row loss_scale_row()
{
	return text_row(
		"loss_scale", "none, static:VALUE, dynamic (log2 policy), dynamic:log2 or dynamic:growth",
		[](const StrategyOptions& s) { return loss_scale_text(s.gradients.loss_scale); },
		[](StrategyOptions& s, const std::string& t) { s.gradients.loss_scale = parse_loss_scale(t, s.gradients.loss_scale); },
		[](const StrategyOptions& s) {
			return std::string(s.gradients.loss_scale.mode == LossScaleMode::none ? "dynamic" : "none");
		});
}

std::vector<Row> gradient_rows()
{
	using G = GradientOptions;
	auto grad = [](auto member) { return [member](StrategyOptions& s) -> auto& { return s.gradients.*member; }; };
	auto scale = [](auto member) {
		return [member](StrategyOptions& s) -> auto& { return s.gradients.loss_scale.*member; };
	};
	return {
		custom_field<StrategyOptions, ReduceOp>("reduce", "Gradient reduction: mean or sum", grad(&G::reduce), parse_reduce,
			[](const ReduceOp& r) { return std::string(reduce_op_name(r)); },
			[](const ReduceOp& r) { return r == ReduceOp::mean ? ReduceOp::sum : ReduceOp::mean; }),
		custom_field<StrategyOptions, DType>("compress", "All-reduce the gradients as none (f32), fp16 or bf16",
			grad(&G::compress), parse_compress, compress_text,
			[](const DType& d) { return d == DType::f32 ? DType::bf16 : DType::f32; }),
		loss_scale_row(),
		number_field<StrategyOptions, double>("loss_scale_init", "log2 policy: initial log2 of the scale",
						      scale(&LossScaleOptions::log2_init)),
		number_field<StrategyOptions, double>("loss_scale_inc", "log2 policy: log2 added per clean step",
						      scale(&LossScaleOptions::log2_inc)),
		number_field<StrategyOptions, double>("loss_scale_dec", "log2 policy: log2 removed per overflow",
						      scale(&LossScaleOptions::log2_dec)),
		number_field<StrategyOptions, double>("loss_scale_growth_init", "growth policy: initial log2 of the scale",
						      scale(&LossScaleOptions::growth_log2_init)),
		number_field<StrategyOptions, int64_t>("loss_scale_growth_interval",
						       "growth policy: clean steps in a row before the scale doubles",
						       scale(&LossScaleOptions::growth_interval), FieldRange::positive),
	};
}

AllReduceMode parse_mode(const std::string& t)
{
	try {
		return parse_all_reduce_mode(t);
	} catch (const AgreedError& e) {
		throw AgreedError(fmt::format("`allreduce` {}", e.what()));
	}
}

Row mode_row()
{
	Row f = custom_field<StrategyOptions, AllReduceMode>(
		"allreduce", "All-reduce mode: ring, hierarchical, naive, or auto (ring with NCCL on GPUs; on CPUs "
			     "hierarchical, or ring where every node holds one rank or hierarchical cannot run)",
		[](StrategyOptions& s) -> AllReduceMode& { return s.replicated.mode; }, parse_mode,
		[](const AllReduceMode& m) { return std::string(all_reduce_mode_name(m)); },
		[](const AllReduceMode& m) { return m == AllReduceMode::ring ? AllReduceMode::naive : AllReduceMode::ring; });
	f.front_end_default = "auto";
	return f;
}

std::vector<Row> replicated_rows()
{
	auto rep = [](auto member) { return [member](StrategyOptions& s) -> auto& { return s.replicated.*member; }; };
	using R = ReplicatedOptions;
	return {
		with(mode_row(), all_reducing, true),
		with(number_field<StrategyOptions, double>("fusion_mb", "Fused bucket size in MiB (0: no fusion)",
							   rep(&R::fusion_mb), FieldRange::non_negative), replicated, true),
		with(bool_field<StrategyOptions>("overlap", "All-reduce buckets during backward (true/false)", rep(&R::overlap)),
		     replicated, true),
		with(custom_field<StrategyOptions, GroupAssignment>("groups",
			"Replica groups reducing separately, e.g. '0,1;2,3'", rep(&R::groups), parse_groups, groups_text,
			[](const GroupAssignment& g) { return g.empty() ? GroupAssignment{{0}, {1}} : GroupAssignment{}; }),
		     replicated, false),
		with(bool_field<StrategyOptions>("shard_update", "Split the optimizer update across ranks sharing a node's "
				"memory (CPU, hierarchical; true/false)", rep(&R::shard_update)), replicated, true),
		with(bool_field<StrategyOptions>("deterministic", "Sum the all-reduce in rank order: every mode and rank "
				"layout gives the same bits", [](StrategyOptions& s) -> bool& {
					return s.replicated.all_reduce.deterministic; }, true), all_reducing, true),
		with(number_field<StrategyOptions, size_t>("chunk_bytes", "Bytes the CPU all-reduces stream through at a time",
				[](StrategyOptions& s) -> size_t& { return s.replicated.all_reduce.chunk_bytes; },
				FieldRange::positive), all_reducing, true),
	};
}

int parse_aggregate(const std::string& t)
{
	if (t == "auto")
		return 0;
	const int64_t n = parse_integer_field("replicas_to_aggregate", t, FieldRange::any);
	if (n < 1 || n > std::numeric_limits<int>::max())
		throw AgreedError(fmt::format("`replicas_to_aggregate` {}: an update averages at least 1 gradient; give N >= 1, "
					      "or auto for one per worker", t));
	return static_cast<int>(n);
}

int64_t parse_staleness_bound(const std::string& t)
{
	if (t == "none")
		return -1;
	char* end = nullptr;
	errno = 0;
	const long long s = t.empty() ? -1 : std::strtoll(t.c_str(), &end, 10);
	if (t.empty() || end != t.c_str() + t.size() || errno == ERANGE || s < 0)
		throw AgreedError(fmt::format("`max_staleness` {}: give S >= 0 updates (0 is lock-step) or none for no bound", t));
	return s;
}

std::optional<double> parse_decay(const std::string& t)
{
	if (t == "none")
		return std::nullopt;
	return parse_number_field("ema_decay", t, FieldRange::any);
}

// The rows of one strategy say how the ranks share the work, as the strategy does: like it, a
// resumed run may change them (a checkpoint of sync-replicas resumes under replicated).
std::vector<Row> detached_rows()
{
	return {
		with(number_field<StrategyOptions, int>("ps_ranks", "parameter-server: 0 places the variables on every rank; "
				"K > 0 makes ranks 0..K-1 servers only", [](StrategyOptions& s) -> int& { return s.ps_ranks; },
				FieldRange::non_negative), placed, true),
		custom_field<StrategyOptions, std::optional<double>>("ema_decay",
			"Keep moving averages of the variables with this decay in [0, 1) and evaluate them too",
			[](StrategyOptions& s) -> std::optional<double>& { return s.ema_decay; }, parse_decay,
			[](const std::optional<double>& d) { return d ? fmt::format("{}", *d) : std::string("none"); },
			[](const std::optional<double>& d) { return d ? std::optional<double>() : std::optional<double>(0.5); }),
		with(custom_field<StrategyOptions, int>("replicas_to_aggregate", "sync-replicas: gradients averaged per "
				"update (default: auto, one per worker; fewer leaves backup workers)",
				[](StrategyOptions& s) -> int& { return s.replicas_to_aggregate; }, parse_aggregate,
				[](const int& n) { return n == 0 ? std::string("auto") : std::to_string(n); },
				[](const int& n) { return n == 0 ? 1 : 0; }), {"sync-replicas"}, true),
		with(bool_field<StrategyOptions>("async_scale", "async: scale each gradient by 1/workers (true) or apply it "
				"as it is (false)", [](StrategyOptions& s) -> bool& { return s.async_scale; }), async, true),
		with(custom_field<StrategyOptions, bool>("async_staleness", "async: none or scale: a gradient s updates late "
				"takes at most 1/(s+1) of the rate", [](StrategyOptions& s) -> bool& { return s.async_staleness_scale; },
				[](const std::string& t) {
					if (t != "none" && t != "scale")
						throw AgreedError(fmt::format("`async_staleness` {}: write none (every gradient at the same "
									      "rate) or scale (a gradient s updates late at most 1/(s+1) of it)", t));
					return t == "scale";
				},
				[](const bool& b) { return std::string(b ? "scale" : "none"); }, [](const bool& b) { return !b; }),
		     async, true),
		with(custom_field<StrategyOptions, int64_t>("max_staleness", "async: none (workers never wait) or S >= 0: a "
				"worker waits for its token while a gradient could arrive more than S updates late",
				[](StrategyOptions& s) -> int64_t& { return s.max_staleness; }, parse_staleness_bound,
				[](const int64_t& b) { return b < 0 ? std::string("none") : std::to_string(b); },
				[](const int64_t& b) { return b < 0 ? int64_t{1} : int64_t{-1}; }), async, true),
	};
}

OuterCompression parse_outer_compress(const std::string& t)
{
	if (t == "none")
		return OuterCompression::none;
	if (t == "bf16")
		return OuterCompression::bf16;
	if (t == "int8")
		return OuterCompression::int8;
	throw AgreedError(fmt::format("`outer_compress` {}: write none (f32), bf16, or int8 (blocks of 256 with a scale "
				      "each)", t));
}

std::string outer_compress_text(const OuterCompression& c)
{
	return c == OuterCompression::bf16 ? "bf16" : c == OuterCompression::int8 ? "int8" : "none";
}

// local-sgd's rows; like the other strategies' they may change on resume.
std::vector<Row> local_sgd_rows()
{
	auto own = [](auto member) { return [member](StrategyOptions& s) -> auto& { return s.local_sgd.*member; }; };
	using L = LocalSgdOptions;
	return {
		with(number_field<StrategyOptions, int64_t>("sync_every", "local-sgd: H, each worker's inner steps between "
				"syncs", own(&L::sync_every), FieldRange::positive), local_sgd, true),
		with(number_field<StrategyOptions, int64_t>("local_start", "local-sgd: the first steps average the "
				"gradients (replicated steps), then every `sync_every` sync (post-local SGD; 0: local from the first step)",
				own(&L::local_start), FieldRange::non_negative), local_sgd, true),
		with(choice_field<StrategyOptions>("outer_optimizer", "local-sgd: the outer optimizer, nesterov (DiLoCo) or "
				"sgd (at `outer_lr` 1: plain averaging)", own(&L::outer_optimizer), {"nesterov", "sgd"}),
		     local_sgd, true),
		with(number_field<StrategyOptions, float>("outer_lr", "local-sgd: the outer learning rate",
				own(&L::outer_lr), FieldRange::positive), local_sgd, true),
		with(custom_field<StrategyOptions, float>("outer_momentum", "local-sgd: the outer Nesterov momentum, in [0, 1)",
				own(&L::outer_momentum),
				[](const std::string& t) {
					// Checked as the float it is kept in: 0.99999999999 rounds to 1.
					const float m = static_cast<float>(
						parse_number_field("outer_momentum", t, FieldRange::non_negative));
					if (!(m < 1))
						throw AgreedError(fmt::format("`outer_momentum` {}: give a value in [0, 1) (as a "
									      "float: at most 0.99999994)", t));
					return m;
				},
				[](const float& m) { return fmt::format("{}", m); },
				[](const float& m) { return m == 0.5f ? 0.9f : 0.5f; }), local_sgd, true),
		with(custom_field<StrategyOptions, OuterCompression>("outer_compress", "local-sgd: the outer all-reduce in "
				"none (f32), bf16 or int8 (blocks of 256 values with a scale each)", own(&L::compress),
				parse_outer_compress, outer_compress_text,
				[](const OuterCompression& c) {
					return c == OuterCompression::none ? OuterCompression::int8 : OuterCompression::none;
				}), local_sgd, true),
		with(bool_field<StrategyOptions>("outer_overlap", "local-sgd: run each sync's outer all-reduce during the "
				"next H inner steps and apply it at the next sync (true/false)", own(&L::overlap)),
		     local_sgd, true),
		with(number_field<StrategyOptions, int64_t>("outer_delay", "local-sgd with `outer_overlap`: apply each "
				"sync's mean this many inner steps after it, waiting for it there (0: at the next sync)",
				own(&L::outer_delay), FieldRange::non_negative), local_sgd, true),
	};
}

// "STEP[:RANK]", STEP counted from 1 as the logs count it; RANK 0 unless given.
void set_nonfinite(StrategyOptions& s, const std::string& t)
{
	if (t.empty() || t == "none") {
		edit_faults(s, [](FaultInjection& f) { f.nonfinite_step = -1, f.nonfinite_rank = 0; });
		return;
	}
	const auto colon = t.find(':');
	const std::string s_text = t.substr(0, colon); // strtoll's end points into it
	char* end = nullptr;
	errno = 0;
	const long long step = std::strtoll(s_text.c_str(), &end, 10);
	bool ok = colon != 0 && end == s_text.c_str() + s_text.size();
	long long rank = 0;
	if (ok && colon != std::string::npos) {
		const std::string r = t.substr(colon + 1);
		rank = r.empty() ? -1 : std::strtoll(r.c_str(), &end, 10);
		ok = !r.empty() && end == r.c_str() + r.size();
	}
	if (!ok || errno == ERANGE || step < 1 || rank < 0 || rank > std::numeric_limits<int>::max())
		throw AgreedError(fmt::format("`inject_nonfinite` '{}': write STEP[:RANK] with STEP >= 1 and RANK one of "
					      "this job's ranks", t));
	edit_faults(s, [&](FaultInjection& f) { f.nonfinite_step = step - 1, f.nonfinite_rank = static_cast<int>(rank); });
}

// "RANK:MS": a straggler for tests, demos and benchmarks.
void set_delay(StrategyOptions& s, const std::string& t)
{
	if (t.empty() || t == "none") {
		edit_faults(s, [](FaultInjection& f) { f.delay_rank = -1, f.delay_ms = 0; });
		return;
	}
	const auto colon = t.find(':');
	const std::string r_text = t.substr(0, colon); // strtoll's end points into it
	char* end = nullptr;
	const long long rank = colon == std::string::npos ? -1 : std::strtoll(r_text.c_str(), &end, 10);
	bool ok = colon != std::string::npos && colon > 0 && end == r_text.c_str() + r_text.size() && rank >= 0 &&
		  rank <= std::numeric_limits<int>::max();
	const std::string m = ok ? t.substr(colon + 1) : std::string();
	const double ms = ok && !m.empty() ? std::strtod(m.c_str(), &end) : -1;
	ok = ok && !m.empty() && end == m.c_str() + m.size() && ms >= 0 && ms <= 3.6e6;
	if (!ok)
		throw AgreedError(fmt::format("`inject_delay` '{}': write RANK:MS, e.g. 2:40 for rank 2 sleeping 40 ms per "
					      "step, with MS from 0 to 3600000", t));
	edit_faults(s, [&](FaultInjection& f) { f.delay_rank = static_cast<int>(rank), f.delay_ms = ms; });
}

std::vector<Row> hook_rows()
{
	Row nonfinite = text_row(
		"inject_nonfinite", "STEP[:RANK]: put a NaN into RANK's gradient at STEP (under async and sync-replicas: RANK's STEP-th gradient) (tests, demos)",
		[](const StrategyOptions& s) {
			const FaultInjection& f = faults_of(s);
			return f.nonfinite_step < 0 ? std::string("none") : fmt::format("{}:{}", f.nonfinite_step + 1, f.nonfinite_rank);
		},
		set_nonfinite,
		[](const StrategyOptions& s) { return std::string(faults_of(s).nonfinite_step < 0 ? "3:0" : "none"); });
	Row delay = text_row(
		"inject_delay", "RANK:MS: that rank sleeps MS milliseconds in every step before it sends its gradient (tests, demos)",
		[](const StrategyOptions& s) {
			const FaultInjection& f = faults_of(s);
			return f.delay_rank < 0 ? std::string("none") : fmt::format("{}:{}", f.delay_rank, f.delay_ms);
		},
		set_delay, [](const StrategyOptions& s) { return std::string(faults_of(s).delay_rank < 0 ? "1:5" : "none"); });
	delay.may_change_on_resume = true;
	return {nonfinite, delay};
}

} // namespace

std::string groups_text(const GroupAssignment& groups)
{
	std::vector<std::string> parts;
	for (const auto& g : groups)
		parts.push_back(fmt::format("{}", fmt::join(g, ",")));
	return fmt::format("{}", fmt::join(parts, ";"));
}

// "0,1;2,3" -> {{0, 1}, {2, 3}}; the assignment itself is validated by the all-reduce.
GroupAssignment parse_groups(const std::string& text)
{
	GroupAssignment groups;
	std::stringstream all(text);
	for (std::string group; !text.empty() && std::getline(all, group, ';');) {
		if (group.empty())
			throw AgreedError(fmt::format("`groups` '{}': a group with no ranks; write groups as comma-separated "
						      "ranks separated by ';', e.g. '0,1;2,3'", text));
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
				throw AgreedError(fmt::format("`groups` '{}': '{}' is not a rank number; write groups as "
							      "comma-separated ranks separated by ';', e.g. '0,1;2,3'", text, member));
			groups.back().push_back(rank);
		}
	}
	return groups;
}

const std::vector<Row>& strategy_fields()
{
	static const std::vector<Row> table = [] {
		std::vector<Row> t = {with(choice_field<StrategyOptions>("strategy",
			"How the ranks train together: replicated, parameter-server, async, sync-replicas or local-sgd",
			[](StrategyOptions& s) -> std::string& { return s.name; }, strategy_names()), {}, true)};
		for (auto* part : {&gradient_rows, &replicated_rows, &detached_rows, &local_sgd_rows, &hook_rows})
			for (Row& r : (*part)())
				t.push_back(std::move(r));
		return t;
	}();
	return table;
}

} // namespace tower
