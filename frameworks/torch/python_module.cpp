// The Python extension behind tower.torch (python/tower/torch/): the process, the tensor
// collectives and the gradient reducer, bound with pybind11. The Horovod-named API is in Python.
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <torch/extension.h>

#include "runtime/options/field_rules.h"
#include "runtime/options/names.h"
#include "base/error.h"
#include "base/field_spelling.h"
#include "runtime/options/run_fields.h"
#include "base/watchdog/watched_wait.h"
#include "collectives/all_reduce.h"
#include "frameworks/torch/checkpoints.h"
#include "frameworks/torch/gradient_reducer.h"
#include "frameworks/torch/process.h"
#include "frameworks/torch/tensor_collectives.h"
#include "runtime/observe/launcher_lines.h"
#include "runtime/observe/timeline.h"
#include "tower_config.h"

namespace py = pybind11;
using namespace tower;
using namespace tower::torch_adapter;

namespace {

// tower.torch's keyword arguments in tower's own table (StrategyOptions and friends).
struct ReducerArguments {
	std::string name;
	std::string op = "mean";          // mean | sum
	std::string compression = "none"; // none | fp16 | bf16
	std::string allreduce = "auto";   // auto | ring | hierarchical | naive
	double fusion_mb = ReducerOptions().strategy.replicated.fusion_mb;
	bool overlap = true;
	GroupAssignment groups;
	int backward_passes_per_step = 1;
	std::string strategy = "replicated";
	int ps_ranks = 0;
	bool deterministic = false;
	int64_t steps = 0;
	// The owner strategies' and local-sgd's own options by their rows' ids (replicas_to_aggregate,
	// async_scale, max_staleness, ema_decay; sync_every, local_start, outer_*), as the program gave
	// them.
	std::vector<std::pair<std::string, std::string>> strategy_rows;
	// The owners' update rule as rows of tower's optimizer table (id, text); empty: the torch
	// optimizer applies the update.
	std::vector<std::pair<std::string, std::string>> rule;
	std::vector<std::pair<std::string, std::string>> agreed;
	std::string problem; // what the Python side found wrong on this rank
};

// A keyword's value through its row of the strategy's table (runtime/options/run_fields.h): the
// keyword is the field's id, and the row's error names it.
void set_field(StrategyOptions& s, const std::string& id, const std::string& text)
{
	const Field<StrategyOptions>* row = find_field(strategy_fields(), id);
	if (row == nullptr)
		throw Error(fmt::format("the strategy has no option `{}`", id));
	row->set(s, text);
}

ReducerOptions reducer_options(const ReducerArguments& a)
{
	ReducerOptions o;
	o.name = a.name;
	set_field(o.strategy, "strategy", a.strategy);
	set_field(o.strategy, "reduce", a.op);
	set_field(o.strategy, "compress", a.compression); // Horovod's compression=
	ReplicatedOptions& r = o.strategy.replicated;
	r.groups = a.groups;
	if (a.allreduce == "auto")
		r.mode = automatic_all_reduce_mode(topology(), Device{}, a.groups);
	else
		set_field(o.strategy, "allreduce", a.allreduce);
	set_field(o.strategy, "fusion_mb", fmt::format("{}", a.fusion_mb));
	r.overlap = a.overlap;
	set_field(o.strategy, "deterministic", a.deterministic ? "true" : "false");
	set_field(o.strategy, "ps_ranks", std::to_string(a.ps_ranks));
	std::set<std::string> given;
	for (const auto& [id, text] : a.strategy_rows) {
		set_field(o.strategy, id, text);
		given.insert(id);
	}
	check_fields_read(strategy_fields(), given, o.strategy.name);
	o.steps = a.steps;
	for (const auto& [id, text] : a.rule) {
		const Field<OptimizerConfig>* row = find_field(optimizer_fields(), id);
		if (row == nullptr)
			throw Error(fmt::format("the update rule has no setting `{}`", id));
		row->set(o.optimizer, text);
	}
	o.backward_passes_per_step = a.backward_passes_per_step;
	o.agreed = a.agreed;
	o.agreed.emplace_back("allreduce", a.allreduce);
	o.problem = a.problem;
	return o;
}

// This rank's reading of the arguments; what it cannot read becomes its problem, which the
// reducer's agreement turns into an error on every rank.
ReducerOptions options_or_problem(const ReducerArguments& a)
{
	try {
		return reducer_options(a);
	} catch (const Error& e) {
		ReducerOptions o;
		o.name = a.name;
		o.problem = e.what();
		return o;
	}
}

// Reducers whose Python object went away: closing one is collective, and Python's collector need
// not reach it at the same point on every rank, so shutdown() closes them with the others, in the
// order they were made. Never destroyed (at exit, torch's allocator may already be gone).
std::vector<std::unique_ptr<GradientReducer>>& unreferenced()
{
	static auto* reducers = new std::vector<std::unique_ptr<GradientReducer>>();
	return *reducers;
}

// One reducer for Python; tower.torch.shutdown() closes every open one before MPI ends.
class PyReducer {
public:
	PyReducer(std::vector<std::pair<std::string, at::Tensor>> parameters, const ReducerArguments& arguments)
		: reducer_(std::make_unique<GradientReducer>(std::move(parameters), options_or_problem(arguments)))
	{
	}
	~PyReducer()
	{
		if (reducer_ && !reducer_->closed())
			unreferenced().push_back(std::move(reducer_));
	}
	PyReducer(const PyReducer&) = delete;
	PyReducer& operator=(const PyReducer&) = delete;

	py::dict synchronize(float lr)
	{
		ReduceResult r;
		{
			py::gil_scoped_release unlocked;
			r = open().synchronize(lr);
		}
		py::dict d;
		d["skipped"] = r.skipped;
		d["grad_norm"] = r.grad_norm;
		d["allreduce_s"] = r.allreduce_s;
		d["hidden_fraction"] = r.hidden_fraction;
		d["buckets"] = r.buckets;
		return d;
	}
	bool gradients_pending() { return open().gradients_pending(); }
	bool applies_update() { return open().applies_update(); }
	// (what the workers announced: 0 end, 1 a step, 2 a checkpoint; the checkpoint's step)
	std::pair<int, int64_t> serve_step()
	{
		py::gil_scoped_release unlocked;
		int64_t at = 0;
		const Announced said = open().serve_step(&at);
		return {static_cast<int>(said), at};
	}
	void announce_checkpoint(int64_t step)
	{
		py::gil_scoped_release unlocked;
		open().announce_checkpoint(step);
	}
	bool more()
	{
		py::gil_scoped_release unlocked;
		return open().more();
	}
	bool running() { return open().running(); }
	bool detached() { return open().detached(); }
	std::string finish_run()
	{
		py::gil_scoped_release unlocked;
		return open().finish_run();
	}
	void use_averages(bool averaged)
	{
		py::gil_scoped_release unlocked;
		open().use_averages(averaged);
	}
	void settle_replicas()
	{
		py::gil_scoped_release unlocked;
		open().settle_replicas();
	}
	void use_synced_values(bool synced) { open().use_synced_values(synced); }
	bool is_worker() { return open().is_worker(); }
	int worker_index() { return open().worker_index(); }
	int workers() { return open().workers(); }
	uint64_t check_replicas()
	{
		py::gil_scoped_release unlocked;
		return open().check_replicas();
	}
	size_t bucket_count() { return open().bucket_count(); }
	void close()
	{
		py::gil_scoped_release unlocked;
		reducer_->close();
	}
	bool closed() const { return reducer_->closed(); }
	Checkpointed* checkpointed() { return &open().checkpointed(); }

private:
	GradientReducer& open() { return *reducer_; }
	std::unique_ptr<GradientReducer> reducer_;
};

// What tower elastic reads of a PyTorch program, through the observer tower train's report uses.
LauncherLines& launcher_lines()
{
	static LauncherLines lines;
	return lines;
}

// Checkpoints whose Python object went away: closing is collective, so shutdown() closes them.
std::vector<std::unique_ptr<Checkpoints>>& unreferenced_checkpoints()
{
	static auto* all = new std::vector<std::unique_ptr<Checkpoints>>();
	return *all;
}

// A program's checkpoints for Python: over its group optimizers (an owner strategy) or the
// TorchState of its groups (replicated).
class PyCheckpoints {
public:
	PyCheckpoints(const std::string& dir, int keep, bool resume, const std::string& resume_path,
		      const std::string& identity, const std::string& strategy, const std::vector<PyReducer*>& reducers,
		      const std::vector<TorchState*>& states)
	{
		CheckpointConfig config;
		config.dir = dir;
		config.keep = keep;
		config.resume = resume;
		config.resume_path = resume_path;
		config.identity = nlohmann::json::parse(identity);
		std::vector<Checkpointed*> parts;
		for (PyReducer* r : reducers)
			parts.push_back(r->checkpointed());
		for (TorchState* s : states)
			parts.push_back(s);
		checkpoints_ = std::make_unique<Checkpoints>(config, std::move(parts), strategy);
	}
	~PyCheckpoints()
	{
		if (checkpoints_ && !checkpoints_->closed())
			unreferenced_checkpoints().push_back(std::move(checkpoints_));
	}
	PyCheckpoints(const PyCheckpoints&) = delete;
	PyCheckpoints& operator=(const PyCheckpoints&) = delete;

	double save(int64_t step, const std::map<std::string, double>& totals)
	{
		py::gil_scoped_release unlocked;
		return checkpoints_->save(step, totals);
	}
	void poll() { checkpoints_->poll(); }
	void wait()
	{
		py::gil_scoped_release unlocked;
		checkpoints_->wait();
	}
	// None when not resuming, else (step, totals).
	py::object restore()
	{
		std::optional<TrainingPosition> p;
		{
			py::gil_scoped_release unlocked;
			p = checkpoints_->restore();
		}
		if (!p)
			return py::none();
		return py::make_tuple(p->step, p->totals);
	}
	void close()
	{
		py::gil_scoped_release unlocked;
		checkpoints_->close();
	}

private:
	std::unique_ptr<Checkpoints> checkpoints_;
};

} // namespace

PYBIND11_MODULE(_core, m)
{
	m.doc() = "tower's runtime for PyTorch programs (use tower.torch)";
	// Every rank raises AgreedError alike; Error is one rank's own failure.
	static py::exception<Error> error(m, "TowerError", PyExc_RuntimeError);
	static py::exception<AgreedError> agreed(m, "AgreedError", error.ptr());
	py::register_exception_translator([](std::exception_ptr p) {
		try {
			if (p)
				std::rethrow_exception(p);
		} catch (const AgreedError& e) {
			PyErr_SetString(agreed.ptr(), spelled(e.what()).c_str());
		} catch (const Error& e) {
			PyErr_SetString(error.ptr(), spelled(e.what()).c_str());
		}
	});
	// The library names fields by id; a Python program passes them as keywords: fusion_mb=. The
	// watchdog's limits are init()'s stall_warn_s= and stall_abort_s=.
	set_field_spelling([](const std::string& id) {
		return id == "stall_warn" || id == "stall_abort" ? id + "_s=" : id + "=";
	});

	m.def("init", &init);
	m.def("shutdown", [] {
		py::gil_scoped_release unlocked;
		shutdown();
	});
	m.def("is_initialized", &is_initialized);
	m.def("abort", [](int code) { abort_job(code); });
	m.def("record_timeline", [](const std::string& path) {
		py::gil_scoped_release unlocked;
		record_timeline(path);
	});
	// A span of the timeline around Python code: `with _core.Span(name, category): ...`.
	struct PySpan {
		std::string name, category;
		std::unique_ptr<timeline::Span> span;
	};
	py::class_<PySpan>(m, "Span")
		.def(py::init([](std::string name, std::string category) {
			return PySpan{std::move(name), std::move(category), nullptr};
		}))
		.def("__enter__", [](PySpan& s) { s.span = std::make_unique<timeline::Span>(s.name.c_str(), s.category.c_str()); })
		.def("__exit__", [](PySpan& s, py::args) { s.span.reset(); });
	// One rank (the Python side picks the first worker) tells an elastic launcher where the run
	// starts and each step it completes.
	m.def("launcher_started", [](int64_t step, bool resumed) { launcher_lines().started(step, resumed); });
	m.def("launcher_stepped", [](int64_t step) { launcher_lines().stepped(step); });
	m.def("set_stall_limits", [](double warn_s, double abort_s) { set_stall_limits({warn_s, abort_s}); });
	m.def("size", [] { return topology().size(); });
	m.def("rank", [] { return topology().rank(); });
	m.def("local_rank", [] { return topology().local_rank(); });
	m.def("local_size", [] { return topology().local_size(); });
	m.def("cross_rank", [] { return topology().node(); });
	m.def("cross_size", [] { return topology().node_count(); });
	m.def("cuda_built", [] { return TOWER_HAVE_CUDA == 1; });

	auto op = [](const std::string& name) { return parse_reduce_op(name); };
	m.def("allreduce", [op](const at::Tensor& t, const std::string& o, const std::string& name) {
		py::gil_scoped_release unlocked;
		return allreduce(t, op(o), name);
	});
	m.def("allreduce_", [op](const at::Tensor& t, const std::string& o, const std::string& name) {
		py::gil_scoped_release unlocked;
		allreduce_(t, op(o), name);
	});
	m.def("broadcast_", [](const at::Tensor& t, int root, const std::string& name) {
		py::gil_scoped_release unlocked;
		broadcast_(t, root, name);
	});
	m.def("allgather", [](const at::Tensor& t, const std::string& name) {
		py::gil_scoped_release unlocked;
		return allgather(t, name);
	});
	m.def("barrier", [] {
		py::gil_scoped_release unlocked;
		barrier();
	});

	py::class_<ReducerArguments>(m, "ReducerArguments")
		.def(py::init<>())
		.def_readwrite("name", &ReducerArguments::name)
		.def_readwrite("op", &ReducerArguments::op)
		.def_readwrite("compression", &ReducerArguments::compression)
		.def_readwrite("allreduce", &ReducerArguments::allreduce)
		.def_readwrite("fusion_mb", &ReducerArguments::fusion_mb)
		.def_readwrite("overlap", &ReducerArguments::overlap)
		.def_readwrite("groups", &ReducerArguments::groups)
		.def_readwrite("backward_passes_per_step", &ReducerArguments::backward_passes_per_step)
		.def_readwrite("strategy", &ReducerArguments::strategy)
		.def_readwrite("ps_ranks", &ReducerArguments::ps_ranks)
		.def_readwrite("deterministic", &ReducerArguments::deterministic)
		.def_readwrite("steps", &ReducerArguments::steps)
		.def_readwrite("strategy_rows", &ReducerArguments::strategy_rows)
		.def_readwrite("rule", &ReducerArguments::rule)
		.def_readwrite("agreed", &ReducerArguments::agreed)
		.def_readwrite("problem", &ReducerArguments::problem);
	py::class_<PyReducer>(m, "GradientReducer")
		.def(py::init<std::vector<std::pair<std::string, at::Tensor>>, const ReducerArguments&>(),
		     py::call_guard<py::gil_scoped_release>())
		.def("synchronize", &PyReducer::synchronize, py::arg("lr") = 0.0f)
		.def("applies_update", [](PyReducer& r) { return r.applies_update(); })
		.def("serve_step", &PyReducer::serve_step)
		.def("announce_checkpoint", &PyReducer::announce_checkpoint)
		.def("more", &PyReducer::more)
		.def("running", &PyReducer::running)
		.def("detached", &PyReducer::detached)
		.def("finish_run", &PyReducer::finish_run)
		.def("use_averages", &PyReducer::use_averages)
		.def("settle_replicas", &PyReducer::settle_replicas)
		.def("use_synced_values", &PyReducer::use_synced_values)
		.def("is_worker", &PyReducer::is_worker)
		.def("worker_index", &PyReducer::worker_index)
		.def("workers", &PyReducer::workers)
		.def("gradients_pending", &PyReducer::gradients_pending)
		.def("check_replicas", &PyReducer::check_replicas)
		.def("bucket_count", &PyReducer::bucket_count)
		.def("close", &PyReducer::close)
		.def("closed", &PyReducer::closed);
	py::class_<TorchState>(m, "TorchState")
		.def(py::init<std::string, std::vector<std::pair<std::string, at::Tensor>>, const std::vector<std::string>&>())
		.def("update", &TorchState::update);
	py::class_<PyCheckpoints>(m, "Checkpoints")
		.def(py::init<const std::string&, int, bool, const std::string&, const std::string&, const std::string&,
			      const std::vector<PyReducer*>&, const std::vector<TorchState*>&>(),
		     py::call_guard<py::gil_scoped_release>())
		.def("save", &PyCheckpoints::save)
		.def("poll", &PyCheckpoints::poll)
		.def("wait", &PyCheckpoints::wait)
		.def("restore", &PyCheckpoints::restore)
		.def("close", &PyCheckpoints::close);
}
