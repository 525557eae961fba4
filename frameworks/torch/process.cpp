// The MPI world of a PyTorch program: made once by init(), ended by shutdown().
#include "frameworks/torch/process.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <optional>

#include "base/error.h"
#include "base/mpi/world.h"
#include "collectives/tensor_collectives.h"
#include "runtime/observe/timeline.h"

namespace tower::torch_adapter {

namespace {

struct Process {
	std::unique_ptr<World> world; // empty when the program started MPI itself
	std::unique_ptr<timeline::Recording> timeline;
	std::optional<Topology> topology;
	std::unique_ptr<TensorCollectives> collectives; // on the program's CPU tensors
	MPI_Comm bookkeeping = MPI_COMM_NULL;
};

std::unique_ptr<Process> process;
bool ended = false;
std::map<uint64_t, std::function<void()>> closers; // by key: the order they were added
uint64_t next_closer = 0;

Process& current()
{
	if (!process)
		throw Error(ended ? "tower.torch was shut down: MPI cannot start again in this process"
				  : "tower.torch.init() has not been called: call it before any other tower.torch function");
	return *process;
}

} // namespace

void init()
{
	if (process)
		return;
	if (ended)
		throw Error("tower.torch.init() after shutdown(): MPI cannot start again in this process");
	auto p = std::make_unique<Process>();
	int started = 0;
	MPI_Initialized(&started);
	if (started) {
		int level = MPI_THREAD_SINGLE;
		MPI_Query_thread(&level);
		if (level != MPI_THREAD_MULTIPLE)
			throw Error("MPI was started without MPI_THREAD_MULTIPLE, which tower's communication thread "
				    "needs: import tower.torch and call init() before anything else starts MPI");
		MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	} else {
		p->world = std::make_unique<World>(nullptr, nullptr);
	}
	p->topology.emplace(MPI_COMM_WORLD, ranks_per_node_setting(std::nullopt));
	p->collectives = std::make_unique<TensorCollectives>(MPI_COMM_WORLD, Device{});
	MPI_Comm_dup(MPI_COMM_WORLD, &p->bookkeeping);
	process = std::move(p);
}

void shutdown()
{
	// Closing one may remove it (and only it) from the map.
	while (!closers.empty()) {
		auto first = closers.begin();
		const std::function<void()> close = first->second;
		closers.erase(first);
		close();
	}
	if (!process)
		return;
	if (process->timeline)
		process->timeline->finish();
	MPI_Comm_free(&process->bookkeeping);
	process.reset(); // the world last: it finalizes MPI if init() started it
	ended = true;
}

void record_timeline(const std::string& path)
{
	Process& p = current();
	p.timeline = std::make_unique<timeline::Recording>(MPI_COMM_WORLD, path);
}

uint64_t add_closer(std::function<void()> close)
{
	closers.emplace(next_closer, std::move(close));
	return next_closer++;
}

void remove_closer(uint64_t key)
{
	closers.erase(key);
}

void abort_job(int code)
{
	int started = 0, finalized = 0;
	MPI_Initialized(&started);
	MPI_Finalized(&finalized);
	if (started && !finalized)
		MPI_Abort(MPI_COMM_WORLD, code);
	std::_Exit(code);
}

bool is_initialized()
{
	return process != nullptr;
}

const Topology& topology()
{
	return *current().topology;
}

TensorCollectives& tensor_collectives()
{
	return *current().collectives;
}

MPI_Comm private_comm()
{
	return current().bookkeeping;
}

} // namespace tower::torch_adapter
