// tower bench fusion: a model-like list of 200 gradients all-reduced one by one, then in fused buckets.
#include <algorithm>
#include <cstdio>
#include <functional>

#include <fmt/format.h>

#include "runtime/options/names.h"
#include "cli/bench/bench.h"
#include "cli/bench/bench_data.h"
#include "collectives/all_reduce.h"
#include "collectives/fusion/bucket_plan.h"
#include "collectives/fusion/pack.h"
#include "base/device/device.h"
#include "base/error.h"
#include "base/tensor/memory.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"
#include "base/mpi/scalars.h"

namespace tower::cli {

namespace {

// 200 f32 tensors from 4 B to 16 MiB, shaped like a deep network: per block a large weight, a
// smaller one, and a handful of tiny biases and norm scales; one 16 MiB embedding.
std::vector<TensorSpec> model_like_specs()
{
	std::vector<TensorSpec> specs;
	specs.push_back({"embedding", {int64_t{4} << 20}, DType::f32}); // 16 MiB
	for (int block = 0; specs.size() < 200; ++block) {
		const std::string p = fmt::format("block{}.", block);
		const int64_t width = int64_t{64} << (block % 5); // 64 .. 1024
		specs.push_back({p + "attn.weight", {width, width}, DType::f32});
		specs.push_back({p + "attn.bias", {width}, DType::f32});
		specs.push_back({p + "norm.scale", {width}, DType::f32});
		specs.push_back({p + "norm.bias", {width}, DType::f32});
		specs.push_back({p + "mlp.weight", {width, 64}, DType::f32});
		specs.push_back({p + "mlp.bias", {64}, DType::f32});
		specs.push_back({p + "gate", {1}, DType::f32}); // 4 B
	}
	specs.resize(200);
	return specs;
}

// One checked fused run from fresh data: the wrong elements over every rank.
size_t checked_fused_run(World& world, const Device& device, const BucketPlan& plan, std::vector<Tensor>& storage,
			 const std::function<void()>& fused)
{
	size_t wrong = 0;
	for (size_t k = 0; k < plan.buckets.size(); ++k) {
		std::vector<float> host(plan.buckets[k].count());
		bench_fill(host.data(), host.size(), DType::f32, world.rank(), 0);
		copy_bytes(storage[k].data(), device, host.data(), Device{}, host.size() * 4);
	}
	fused();
	for (size_t k = 0; k < plan.buckets.size(); ++k) {
		std::vector<float> host(plan.buckets[k].count());
		copy_bytes(host.data(), Device{}, storage[k].data(), device, host.size() * 4);
		wrong += bench_wrong(host.data(), host.size(), DType::f32, ReduceOp::sum, 0,
				     [&](size_t i) { return bench_expected(world.size(), i, ReduceOp::sum, DType::f32); });
	}
	return all_reduce_scalar(world.comm(), wrong, MPI_SUM, "bench totals");
}

void print_fusion(World& world, const BenchOptions& o, const std::vector<TensorSpec>& specs, AllReduceMode mode,
		  size_t padded_bytes, size_t buckets, double per_us, double fused_us, size_t wrong)
{
	size_t smallest = specs.front().bytes(), largest = 0, raw = 0;
	for (const TensorSpec& t : specs) {
		smallest = std::min(smallest, t.bytes());
		largest = std::max(largest, t.bytes());
		raw += t.bytes();
	}
	fmt::print("# fusion: {} tensors, {} bytes ({:.1f} MiB) of f32 gradients, smallest {} B, largest {} B; "
		   "mode {}, {} ranks\n", specs.size(), raw, static_cast<double>(raw) / (1 << 20), smallest, largest,
		   all_reduce_mode_name(mode), world.size());
	fmt::print("# view mode: gradients live in bucket storage from AllReduce::allocate ({:.1f} MiB padded), so "
		   "neither run packs or unpacks\n", static_cast<double>(padded_bytes) / (1 << 20));
	fmt::print("  per tensor   {:>10.1f} us  ({} all-reduces)\n", per_us, specs.size());
	fmt::print("  fused        {:>10.1f} us  ({} bucket(s) of at most {} MiB)\n", fused_us, buckets, o.fusion_mb);
	fmt::print("  ratio        {:>10.2f}x   #wrong {}\n", fused_us > 0 ? per_us / fused_us : 0.0, wrong);
	std::fflush(stdout);
}

} // namespace

int run_bench_fusion(World& world, const BenchOptions& o)
{
	const Topology topology(world.comm(), ranks_per_node_setting(o.ranks_per_node));
	const Device device = assign_device(topology, probe_gpu_runtime(), parse_device_preference(o.device));
	const AllReduceMode mode = parse_all_reduce_mode(o.mode == "all" ? "hierarchical" : o.mode);
	auto all_reduce = make_all_reduce(topology, device, mode);
	const auto specs = model_like_specs();
	const BucketPlan plan = plan_buckets(specs, static_cast<size_t>(o.fusion_mb * (1 << 20)), 256);

	// View mode: every gradient lives inside its bucket, so the per-tensor run uses the same memory.
	std::vector<Tensor> storage;
	std::vector<std::vector<Tensor>> views;
	size_t total = 0;
	for (const Bucket& b : plan.buckets) {
		storage.push_back(make_bucket_storage(b, device, *all_reduce));
		views.push_back(bucket_views(b, storage.back(), specs));
		total += b.bytes;
	}
	auto per_tensor = [&] {
		for (const auto& bucket_views : views)
			for (const Tensor& t : bucket_views)
				all_reduce->run_in_place(t.data(), static_cast<size_t>(t.numel()), t.dtype(), ReduceOp::sum);
	};
	const std::function<void()> fused = [&] {
		for (size_t k = 0; k < plan.buckets.size(); ++k)
			all_reduce->run_in_place(storage[k].data(), plan.buckets[k].count(), plan.buckets[k].dtype, ReduceOp::sum);
	};
	for (int i = 0; i < o.warmup; ++i) {
		per_tensor();
		fused();
	}
	const double per_us = per_call_us(world.comm(), o.iters, per_tensor);
	const double fused_us = per_call_us(world.comm(), o.iters, fused);

	const size_t wrong = checked_fused_run(world, device, plan, storage, fused);
	if (world.rank() == 0)
		print_fusion(world, o, specs, mode, total, plan.buckets.size(), per_us, fused_us, wrong);
	return wrong ? 1 : 0;
}

} // namespace tower::cli
