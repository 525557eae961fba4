// tower bench: nccl-tests-style tables for all-reduce modes and the communicator's collectives.
#include "cli/bench.h"

#include <algorithm>
#include <optional>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/bench_data.h"
#include "collectives/all_reduce.h"
#include "collectives/communicator.h"
#include "base/device/device.h"
#include "base/error.h"
#include "base/tensor/memory.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"
#include "base/mpi/scalars.h"

namespace tower::cli {

namespace {

// What one collective moves and how it is checked: one small description per collective.
struct Collective {
	std::string name;
	double bus_factor;   // busbw = algbw * factor
	size_t send_divisor; // send count = count / send_divisor (all-gather sends a block)
	size_t recv_divisor; // recv count = count / recv_divisor (reduce-scatter receives a block)
};

Collective describe(const std::string& name, int n)
{
	const double ring = static_cast<double>(n - 1) / n;
	const size_t un = static_cast<size_t>(n);
	if (name == "allreduce")
		return {name, 2 * ring, 1, 1};
	if (name == "reduce_scatter")
		return {name, ring, 1, un};
	if (name == "all_gather")
		return {name, ring, un, 1};
	if (name == "broadcast")
		return {name, 1.0, 1, 1};
	throw AgreedError(fmt::format("unknown collective '{}': use allreduce, reduce_scatter, all_gather, broadcast, "
				      "fusion or wait",
				      name));
}

// A buffer on the device, or from the all-reduce's allocate() when that memory is shared: the
// registered buffers its direct path needs (allocated and freed collectively).
struct Buffer {
	Device device;
	AllReduce* owner = nullptr;
	void* data = nullptr;
	size_t bytes = 0;
	Buffer(const Device& d, size_t b, AllReduce* registered = nullptr)
	    : device(d), owner(registered), data(owner ? owner->allocate(b) : device_alloc(d, b)), bytes(b)
	{
	}
	~Buffer()
	{
		if (owner)
			owner->deallocate(data);
		else
			device_free(device, data);
	}
	Buffer(const Buffer&) = delete;
	Buffer& operator=(const Buffer&) = delete;
};

struct Row {
	std::string mode;
	size_t bytes = 0, count = 0;
	double time_us = 0, algbw = 0, busbw = 0;
	size_t wrong = 0;
	bool in_place = false;
};

// One benchmark case: `run` performs the collective from `send` into `recv` once.
struct Case {
	std::function<void(const void* send, void* recv)> run;
	std::function<size_t(const void* recv_host)> check; // wrong elements in the host copy of recv
};

void fill(Buffer& buffer, size_t count, DType dtype, int rank)
{
	std::vector<char> host(buffer.bytes);
	bench_fill(host.data(), count, dtype, rank, 0);
	copy_bytes(buffer.data, buffer.device, host.data(), Device{}, buffer.bytes);
}

size_t check(const Buffer& buffer, const Case& c)
{
	std::vector<char> host(buffer.bytes);
	copy_bytes(host.data(), Device{}, buffer.data, buffer.device, buffer.bytes);
	return c.check(host.data());
}

// Times `c` out of place and in place; in place re-fills before the one checked run.
std::vector<Row> measure(const BenchOptions& o, MPI_Comm comm, int rank, const Device& device, const Collective& coll,
			 size_t count, DType dtype, const Case& c, AllReduce* registered)
{
	const size_t esize = dtype_size(dtype);
	const size_t send_count = count / coll.send_divisor, recv_count = count / coll.recv_divisor;
	std::vector<Row> rows;
	for (bool in_place : {false, true}) {
		Buffer send(device, std::max(send_count, recv_count) * esize, registered);
		Buffer recv(device, recv_count * esize, registered);
		// In place: nccl-tests' layout, the send block inside the receive buffer (all-gather).
		Buffer& out = in_place ? send : recv;
		auto once = [&] { c.run(send.data, out.data); };
		fill(send, send_count, dtype, rank);
		for (int i = 0; i < o.warmup; ++i)
			once();
		const double us = per_call_us(comm, o.iters, once);
		fill(send, send_count, dtype, rank);
		once();
		size_t wrong = check(out, c);
		wrong = all_reduce_scalar(comm, wrong, MPI_SUM, "bench totals");
		Row row;
		row.bytes = count * esize;
		row.count = count;
		row.time_us = us;
		row.algbw = us > 0 ? static_cast<double>(row.bytes) / us / 1e3 : 0;
		row.busbw = row.algbw * coll.bus_factor;
		row.wrong = wrong;
		row.in_place = in_place;
		rows.push_back(row);
	}
	return rows;
}

std::vector<std::string> modes_of(const std::string& mode)
{
	if (mode == "all")
		return {"ring", "hierarchical", "naive"};
	parse_all_reduce_mode(mode);
	return {mode};
}

void print_header(const std::string& collective, const std::string& mode, int ranks, bool registered)
{
	fmt::print("# {} mode {} on {} ranks, {}\n", collective, mode, ranks,
		   registered ? "registered shared buffers (AllReduce::allocate)" : "ordinary buffers");
	fmt::print("#{:>11} {:>12} {:>6} {:>6}   {:>10} {:>8} {:>8} {:>6}   {:>10} {:>8} {:>8} {:>6}\n", "size",
		   "count", "type", "redop", "oop us", "algbw", "busbw", "#wrong", "ip us", "algbw", "busbw", "#wrong");
}

void print_rows(const std::vector<Row>& rows, const std::string& dtype, const std::string& op)
{
	const Row &a = rows[0], &b = rows[1];
	fmt::print("{:>12} {:>12} {:>6} {:>6}   {:>10.1f} {:>8.2f} {:>8.2f} {:>6}   {:>10.1f} {:>8.2f} {:>8.2f} {:>6}\n",
		   a.bytes, a.count, dtype, op, a.time_us, a.algbw, a.busbw, a.wrong, b.time_us, b.algbw, b.busbw, b.wrong);
}

Case make_case(const Collective& coll, AllReduce* all_reduce, Communicator& comm, size_t count, DType dtype,
	       ReduceOp op)
{
	const int n = comm.size(), me = comm.rank();
	const size_t block = count / static_cast<size_t>(n);
	if (coll.name == "allreduce")
		return {[=](const void* s, void* r) { all_reduce->run(s, r, count, dtype, op); },
			[=](const void* h) {
				return bench_wrong(h, count, dtype, op, 0, [&](size_t i) { return bench_expected(n, i, op, dtype); });
			}};
	if (coll.name == "reduce_scatter")
		return {[=, &comm](const void* s, void* r) {
				// In place: reduce into a separate block, then put it where the caller looks.
				if (s == r) {
					Buffer own(comm.device(), block * dtype_size(dtype));
					comm.reduce_scatter(s, own.data, block, dtype, op);
					copy_bytes(r, comm.device(), own.data, comm.device(), own.bytes);
				} else {
					comm.reduce_scatter(s, r, block, dtype, op);
				}
			},
			[=](const void* h) {
				return bench_wrong(h, block, dtype, op, static_cast<size_t>(me) * block,
						   [&](size_t i) { return bench_expected(n, i, op, dtype); });
			}};
	if (coll.name == "all_gather")
		return {[=, &comm](const void* s, void* r) {
				// In place the block already sits at its place; copy it out of the way first.
				if (s == r) {
					Buffer own(comm.device(), block * dtype_size(dtype));
					copy_bytes(own.data, comm.device(), s, comm.device(), own.bytes);
					comm.all_gather(own.data, r, block, dtype);
				} else {
					comm.all_gather(s, r, block, dtype);
				}
			},
			[=](const void* h) {
				size_t wrong = 0;
				for (int r = 0; r < n; ++r)
					wrong += bench_wrong(static_cast<const char*>(h) + static_cast<size_t>(r) * block * dtype_size(dtype),
							     block, dtype, op, 0, [&](size_t i) { return bench_value(r, i); });
				return wrong;
			}};
	return {[=, &comm](const void* s, void* r) {
			if (s != r)
				copy_bytes(r, comm.device(), s, comm.device(), count * dtype_size(dtype));
			comm.broadcast(r, count, dtype, 0);
		},
		[=](const void* h) { return bench_wrong(h, count, dtype, op, 0, [&](size_t i) { return bench_value(0, i); }); }};
}

} // namespace

double per_call_us(MPI_Comm comm, int iters, const std::function<void()>& once)
{
	MPI_Request barrier = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Ibarrier(comm, &barrier));
	wait_request(barrier, {"bench barrier", comm});
	const double start = MPI_Wtime();
	for (int i = 0; i < iters; ++i)
		once();
	return all_reduce_scalar(comm, (MPI_Wtime() - start) / std::max(iters, 1) * 1e6, MPI_MAX, "bench totals");
}

size_t parse_bytes(const std::string& text)
{
	size_t used = 0;
	unsigned long long value = 0;
	// std::stoull also takes leading blanks and signs ("-1" is 2^64 - 1): digits come first here.
	if (!text.empty() && text[0] >= '0' && text[0] <= '9') {
		try {
			value = std::stoull(text, &used);
		} catch (const std::exception&) {
			used = 0;
		}
	}
	const std::string suffix = used ? text.substr(used) : "";
	const int shift = suffix == "" ? 0 : suffix == "K" ? 10 : suffix == "M" ? 20 : suffix == "G" ? 30 : -1;
	if (!used || shift < 0 || value > (SIZE_MAX >> shift))
		throw AgreedError(fmt::format("size '{}' is not a byte count like 8, 4K, 256M or 1G (at most 2^64 - 1)", text));
	return static_cast<size_t>(value) << shift;
}

int run_bench(World& world, const BenchOptions& o)
{
	if (o.collective == "fusion")
		return run_bench_fusion(world, o);
	if (o.collective == "wait")
		return run_bench_wait(world, o);
	const Topology topology(world.comm(), ranks_per_node_setting(o.ranks_per_node));
	const Device device = assign_device(topology, probe_gpu_runtime(), parse_device_preference(o.device));
	const DType dtype = parse_dtype(o.dtype);
	const ReduceOp op = parse_reduce_op(o.op);
	const Collective coll = describe(o.collective, world.size());
	const size_t lo = parse_bytes(o.min_bytes), hi = parse_bytes(o.max_bytes);
	if (o.factor < 2 || lo == 0 || lo > hi)
		throw AgreedError("sizes must satisfy 0 < -b <= -e and the factor -f must be at least 2");
	auto comm = make_communicator(world.comm(), device);
	// Only all-reduce has algorithms of its own; the others run on the device's communicator.
	const std::vector<std::string> modes =
		o.collective == "allreduce" ? modes_of(o.mode) : std::vector<std::string>{device.is_cuda() ? "nccl" : "mpi"};
	nlohmann::json out = nlohmann::json::array();
	size_t total_wrong = 0;
	// On one host, the shared-memory mode's figures are shown against the memory-copy rate, measured
	// now (at the largest size, capped at 256 MiB so two buffers fit anywhere the bench runs).
	std::optional<MemoryBound> bound;
	const size_t bound_bytes = std::min<size_t>(hi, size_t{256} << 20);
	if (o.collective == "allreduce" && !device.is_cuda() && topology.node_count() == 1 && !topology.simulated() &&
	    world.size() > 1) {
		bound = measure_memory_bound(world.comm(), bound_bytes, o.iters);
		if (world.rank() == 0)
			fmt::print("{}\n", describe_memory_bound(*bound, bound_bytes));
		out.push_back({{"collective", "memcpy"}, {"ranks", world.size()}, {"bytes", bound_bytes},
			       {"copy_gbps", bound->copy_gbps}, {"bound_busbw_gbps", bound->busbw_gbps}});
	}
	for (const std::string& mode : modes) {
		// --mode all measures what can run here and says why it leaves a mode out; a mode asked
		// for by name that cannot run is an error (make_all_reduce's).
		if (o.collective == "allreduce" && o.mode == "all") {
			const std::string why = why_all_reduce_cannot_run(topology, device, parse_all_reduce_mode(mode), {});
			if (!why.empty()) {
				if (world.rank() == 0)
					fmt::print("# {} mode {} on {} ranks: skipped: {}\n", o.collective, mode, world.size(), why);
				out.push_back({{"collective", o.collective}, {"mode", mode}, {"skipped", why}});
				continue;
			}
		}
		std::unique_ptr<AllReduce> all_reduce;
		AllReduceOptions options;
		options.deterministic = o.deterministic;
		if (o.collective == "allreduce")
			all_reduce = make_all_reduce(topology, device, parse_all_reduce_mode(mode), {}, options);
		// Modes whose allocate() gives shared memory get their buffers from it; the others (naive:
		// plain MPI_Allreduce) run on ordinary memory.
		AllReduce* registered = all_reduce && all_reduce->shares_buffers() && !device.is_cuda() ? all_reduce.get()
													  : nullptr;
		if (world.rank() == 0)
			print_header(o.collective, o.deterministic ? mode + " --deterministic" : mode, world.size(),
				     registered != nullptr);
		for (size_t bytes = lo; bytes <= hi; bytes *= static_cast<size_t>(o.factor)) {
			// Whole elements, and whole blocks for the collectives that split the buffer.
			const size_t unit = dtype_size(dtype) * std::max(coll.send_divisor, coll.recv_divisor);
			const size_t count = std::max(bytes / unit, size_t{1}) * unit / dtype_size(dtype);
			const Case c = make_case(coll, all_reduce.get(), *comm, count, dtype, op);
			const auto rows = measure(o, world.comm(), world.rank(), device, coll, count, dtype, c, registered);
			if (world.rank() == 0)
				print_rows(rows, o.dtype, o.op);
			if (world.rank() == 0 && bound && registered != nullptr && bytes * static_cast<size_t>(o.factor) > hi)
				// In place writes land on lines the rank has just read (no fetch for ownership, which
				// the copy and the out-of-place run pay): the comparison is the out-of-place run's.
				fmt::print("# {} at {} bytes out of place: busbw {:.2f} GB/s, {:.0f}% of the copy-rate figure "
					   "{:.2f}\n",
					   mode, rows[0].bytes, rows[0].busbw, 100 * rows[0].busbw / bound->busbw_gbps,
					   bound->busbw_gbps);
			for (const Row& r : rows) {
				total_wrong += r.wrong;
				out.push_back({{"collective", o.collective}, {"mode", mode}, {"deterministic", o.deterministic}, {"dtype", o.dtype}, {"op", o.op},
					       {"ranks", world.size()}, {"bytes", r.bytes}, {"time_us", r.time_us},
					       {"algbw_gbps", r.algbw}, {"busbw_gbps", r.busbw}, {"wrong", r.wrong},
					       {"in_place", r.in_place}});
			}
		}
		if (world.rank() == 0)
			std::fflush(stdout);
	}
	if (world.rank() == 0 && !o.json.empty()) {
		std::ofstream file(o.json);
		for (const auto& row : out)
			file << row.dump() << "\n";
		if (!file)
			throw Error(fmt::format("could not write {}", o.json));
	}
	if (world.rank() == 0)
		fmt::print("# {} wrong element(s) in total: {}\n", total_wrong, total_wrong ? "FAILED" : "ok");
	return total_wrong ? 1 : 0;
}

} // namespace tower::cli
