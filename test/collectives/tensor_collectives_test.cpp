// Collectives on a program's own tensors: values against a sum computed here, rows gathered in
// rank order, and a different call on one rank an AgreedError on every rank naming the calls.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "collectives/tensor_collectives.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::world;

TEST_CASE("all_reduce sums, averages and takes the maximum of every rank's values")
{
	const Device cpu;
	TensorCollectives c(world().comm(), cpu);
	const int n = world().size(), r = world().rank();
	// Rank r holds r + i at element i: the sum is n * i + n (n - 1) / 2.
	const auto mine = [&] {
		std::vector<float> v(5);
		for (size_t i = 0; i < v.size(); ++i)
			v[i] = static_cast<float>(r) + static_cast<float>(i);
		return Tensor::from_host(v, {5}, cpu);
	};
	Tensor sum = mine(), mean = mine(), max = mine();
	c.all_reduce(sum, ReduceOp::sum, "sum");
	c.all_reduce(mean, ReduceOp::mean, "mean");
	c.all_reduce(max, ReduceOp::max);
	for (size_t i = 0; i < 5; ++i) {
		const double expected = n * static_cast<double>(i) + n * (n - 1) / 2.0;
		CHECK(sum.to_host_f32()[i] == doctest::Approx(expected));
		CHECK(mean.to_host_f32()[i] == doctest::Approx(expected / n));
		CHECK(max.to_host_f32()[i] == doctest::Approx(static_cast<double>(n - 1 + static_cast<int>(i))));
	}
	Tensor counts = Tensor::zeros({2}, DType::i64, cpu);
	counts.data_as<int64_t>()[0] = r;
	counts.data_as<int64_t>()[1] = 1;
	c.all_reduce(counts, ReduceOp::sum, "counts");
	CHECK(counts.data_as<int64_t>()[0] == static_cast<int64_t>(n) * (n - 1) / 2);
	CHECK(counts.data_as<int64_t>()[1] == n);
}

TEST_CASE("broadcast gives every rank the root's values")
{
	const Device cpu;
	TensorCollectives c(world().comm(), cpu);
	const int root = world().size() - 1;
	Tensor t = Tensor::from_host(std::vector<float>(4, static_cast<float>(world().rank() + 1)), {2, 2}, cpu);
	c.broadcast(t, root, "weights");
	CHECK(t.to_host_f32() == std::vector<float>(4, static_cast<float>(root + 1)));
	CHECK_THROWS_AS(c.broadcast(t, world().size(), "weights"), AgreedError);
}

TEST_CASE("all_gather puts every rank's rows in rank order, whatever their number")
{
	const Device cpu;
	TensorCollectives c(world().comm(), cpu);
	const int n = world().size(), r = world().rank();
	// Rank r gives r + 1 rows of 3 values, each r * 100 + row * 10 + column.
	std::vector<float> v;
	for (int row = 0; row <= r; ++row)
		for (int col = 0; col < 3; ++col)
			v.push_back(static_cast<float>(r * 100 + row * 10 + col));
	const Tensor gathered = c.all_gather(Tensor::from_host(v, {r + 1, 3}, cpu), "rows");
	REQUIRE(gathered.shape() == Shape{static_cast<int64_t>(n) * (n + 1) / 2, 3});
	std::vector<float> expected;
	for (int q = 0; q < n; ++q)
		for (int row = 0; row <= q; ++row)
			for (int col = 0; col < 3; ++col)
				expected.push_back(static_cast<float>(q * 100 + row * 10 + col));
	CHECK(gathered.to_host_f32() == expected);
	// A rank with no rows gives none.
	const Tensor none = c.all_gather(Tensor::zeros({r == 0 ? 0 : 2, 3}, DType::f32, cpu), "maybe empty");
	CHECK(none.shape() == Shape{2 * static_cast<int64_t>(n - 1), 3});
}

TEST_CASE("a rank making another call is an AgreedError on every rank naming both calls")
{
	if (world().size() < 2)
		return;
	const Device cpu;
	TensorCollectives c(world().comm(), cpu);
	Tensor t = Tensor::zeros({3}, DType::f32, cpu);
	std::string message;
	try {
		if (world().rank() == 0)
			c.all_reduce(t, ReduceOp::sum, "a");
		else
			c.broadcast(t, 0, "b");
	} catch (const AgreedError& e) {
		message = e.what();
	}
	CHECK(message.find("allreduce('a' f32[3]) op=sum") != std::string::npos);
	CHECK(message.find("broadcast('b' f32[3]) root=0") != std::string::npos);
	// The collectives stay usable after an agreed error.
	c.all_reduce(t, ReduceOp::sum);
	CHECK(t.to_host_f32() == std::vector<float>(3, 0.0f));
}
