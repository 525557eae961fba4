// tower bench: nccl-tests-style tables for all-reduce modes and the communicator's collectives.
#include "runtime/options/names.h"
#include "cli/bench/bench.h"

#include <algorithm>
#include <optional>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/bench/bench_data.h"
#include "collectives/all_reduce.h"
#include "collectives/transports/communicator.h"
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

namespace {

// One `tower bench` of a collective: what every mode's sweep shares.
struct Sweep {
	const BenchOptions& o;
	World& world;
	const Topology& topology;
	const Device& device;
	DType dtype;
	ReduceOp op;
	Collective coll;
	size_t lo, hi;
	Communicator& comm;
	std::optional<MemoryBound> bound;
	std::optional<LinkRate> link; // across hosts
	nlohmann::json out = nlohmann::json::array();
	size_t total_wrong = 0;
};

// On one host, the shared-memory mode's figures are shown against the memory-copy rate, measured
// now (at the largest size, capped at 256 MiB so two buffers fit anywhere the bench runs).
void measure_copy_rate(Sweep& w)
{
	const size_t bound_bytes = std::min<size_t>(w.hi, size_t{256} << 20);
	if (w.o.collective != "allreduce" || w.device.is_cuda() || w.topology.node_count() != 1 || w.topology.simulated() ||
	    w.world.size() == 1)
		return;
	w.bound = measure_memory_bound(w.world.comm(), bound_bytes, w.o.iters);
	if (w.world.rank() == 0)
		fmt::print("{}\n", describe_memory_bound(*w.bound, bound_bytes));
	w.out.push_back({{"collective", "memcpy"}, {"ranks", w.world.size()}, {"bytes", bound_bytes},
			 {"copy_gbps", w.bound->copy_gbps}, {"bound_busbw_gbps", w.bound->busbw_gbps}});
}

// Across hosts, every mode's figures are shown against the link's TCP rate, measured now.
void measure_link(Sweep& w)
{
	const size_t bytes = std::min<size_t>(w.hi, size_t{64} << 20);
	if (w.o.collective != "allreduce" || w.device.is_cuda())
		return;
	w.link = measure_link_rate(w.topology, bytes, std::min(w.o.iters, 5));
	if (!w.link)
		return;
	if (w.world.rank() == 0)
		fmt::print("{}\n", describe_link_rate(*w.link, bytes));
	w.out.push_back({{"collective", "tcp_link"}, {"bytes", bytes}, {"one_way_gbps", w.link->one_way_gbps},
			 {"both_ways_gbps", w.link->both_ways_gbps}, {"problem", w.link->problem}});
}

// --mode all measures what can run here and says why it leaves a mode out; a mode asked for by
// name that cannot run is an error (make_all_reduce's).
bool skipped(Sweep& w, const std::string& mode)
{
	if (w.o.collective != "allreduce" || w.o.mode != "all")
		return false;
	const std::string why = why_all_reduce_cannot_run(w.topology, w.device, parse_all_reduce_mode(mode), {});
	if (why.empty())
		return false;
	if (w.world.rank() == 0)
		fmt::print("# {} mode {} on {} ranks: skipped: {}\n", w.o.collective, mode, w.world.size(), why);
	w.out.push_back({{"collective", w.o.collective}, {"mode", mode}, {"skipped", why}});
	return true;
}

void keep_rows(Sweep& w, const std::string& mode, const std::vector<Row>& rows)
{
	for (const Row& r : rows) {
		w.total_wrong += r.wrong;
		w.out.push_back({{"collective", w.o.collective}, {"mode", mode}, {"deterministic", w.o.deterministic},
				 {"dtype", w.o.dtype}, {"op", w.o.op}, {"ranks", w.world.size()}, {"bytes", r.bytes},
				 {"time_us", r.time_us}, {"algbw_gbps", r.algbw}, {"busbw_gbps", r.busbw}, {"wrong", r.wrong},
				 {"in_place", r.in_place}});
	}
}

// Every size from -b to -e of one mode.
void sweep_mode(Sweep& w, const std::string& mode)
{
	const BenchOptions& o = w.o;
	std::unique_ptr<AllReduce> all_reduce;
	AllReduceOptions options;
	options.deterministic = o.deterministic;
	if (o.collective == "allreduce")
		all_reduce = make_all_reduce(w.topology, w.device, parse_all_reduce_mode(mode), {}, options);
	// Modes whose allocate() gives shared memory get their buffers from it; the others (naive:
	// plain MPI_Allreduce) run on ordinary memory.
	AllReduce* registered = all_reduce && all_reduce->shares_buffers() && !w.device.is_cuda() ? all_reduce.get() : nullptr;
	const bool root = w.world.rank() == 0;
	if (root)
		print_header(o.collective, o.deterministic ? mode + " --deterministic" : mode, w.world.size(), registered != nullptr);
	for (size_t bytes = w.lo; bytes <= w.hi; bytes *= static_cast<size_t>(o.factor)) {
		// Whole elements, and whole blocks for the collectives that split the buffer.
		const size_t unit = dtype_size(w.dtype) * std::max(w.coll.send_divisor, w.coll.recv_divisor);
		const size_t count = std::max(bytes / unit, size_t{1}) * unit / dtype_size(w.dtype);
		const Case c = make_case(w.coll, all_reduce.get(), w.comm, count, w.dtype, w.op);
		const auto rows = measure(o, w.world.comm(), w.world.rank(), w.device, w.coll, count, w.dtype, c, registered);
		if (root)
			print_rows(rows, o.dtype, o.op);
		if (root && w.bound && registered != nullptr && bytes * static_cast<size_t>(o.factor) > w.hi)
			// In place writes land on lines the rank has just read (no fetch for ownership, which
			// the copy and the out-of-place run pay): the comparison is the out-of-place run's.
			fmt::print("# {} at {} bytes out of place: busbw {:.2f} GB/s, {:.0f}% of the copy-rate figure {:.2f}\n",
				   mode, rows[0].bytes, rows[0].busbw, 100 * rows[0].busbw / w.bound->busbw_gbps, w.bound->busbw_gbps);
		if (root && w.link && w.link->problem.empty() && bytes * static_cast<size_t>(o.factor) > w.hi)
			fmt::print("# {} at {} bytes in place: busbw {:.3f} GB/s, {:.0f}% of the link's both-ways rate {:.3f}\n",
				   mode, rows[1].bytes, rows[1].busbw, 100 * rows[1].busbw / w.link->both_ways_gbps,
				   w.link->both_ways_gbps);
		keep_rows(w, mode, rows);
	}
	if (root)
		std::fflush(stdout);
}

void write_rows(const std::string& path, const nlohmann::json& rows)
{
	std::ofstream file(path);
	for (const auto& row : rows)
		file << row.dump() << "\n";
	if (!file)
		throw Error(fmt::format("could not write {}", path));
}

} // namespace

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
	Sweep w{o, world, topology, device, dtype, op, coll, lo, hi, *comm, std::nullopt, std::nullopt};
	measure_copy_rate(w);
	measure_link(w);
	// Only all-reduce has algorithms of its own; the others run on the device's communicator.
	const std::vector<std::string> modes =
		o.collective == "allreduce" ? modes_of(o.mode) : std::vector<std::string>{device.is_cuda() ? "nccl" : "mpi"};
	for (const std::string& mode : modes)
		if (!skipped(w, mode))
			sweep_mode(w, mode);
	if (world.rank() == 0 && !o.json.empty())
		write_rows(o.json, w.out);
	if (world.rank() == 0)
		fmt::print("# {} wrong element(s) in total: {}\n", w.total_wrong, w.total_wrong ? "FAILED" : "ok");
	return w.total_wrong ? 1 : 0;
}

} // namespace tower::cli
