// Pieces of variables: slice names parse to their place in the whole variable, and a variable
// is assembled from pieces cut another way, with clear errors for gaps and mismatches.
#include <doctest/doctest.h>

#include <numeric>

#include "base/error.h"
#include "runtime/checkpoint/variable_pieces.h"

using namespace tower;

namespace {

Tensor iota(int64_t n, float from)
{
	std::vector<float> v(static_cast<size_t>(n));
	std::iota(v.begin(), v.end(), from);
	return Tensor::from_host(v, {n}, Device{});
}

Shape shape_of(const std::string& variable)
{
	return variable.rfind("w", 0) == 0 ? Shape{4, 6} : Shape{};
}

} // namespace

TEST_CASE("variable pieces: slice names give the place in the whole variable")
{
	const VariablePiece slice = piece_of({"w[8:20]/momentum", iota(12, 0)}, shape_of);
	CHECK(slice.variable == "w/momentum");
	CHECK(slice.offset == 8);
	CHECK(slice.count == 12);
	CHECK(slice.whole == Shape{4, 6});
	const VariablePiece whole = piece_of({"w", iota(24, 0).reshaped({4, 6})}, shape_of);
	CHECK(whole.variable == "w");
	CHECK(whole.offset == 0);
	const VariablePiece counter = piece_of({"strategy/global_step", iota(1, 0)}, shape_of);
	CHECK(counter.whole == Shape{1});
	CHECK_THROWS_AS(piece_of({"w[8:10]", iota(12, 0)}, shape_of), Error); // names 2, holds 12
	CHECK_THROWS_AS(piece_of({"w[20:32]", iota(12, 0)}, shape_of), Error); // past the end
	const VariablePiece back = VariablePiece::from_json(slice.to_json());
	CHECK(back.entry == slice.entry);
	CHECK(back.whole == slice.whole);
	nlohmann::json bad = slice.to_json();
	bad["count"] = 100;
	CHECK_THROWS_AS(VariablePiece::from_json(bad), Error);
}

TEST_CASE("variable pieces: a variable is assembled from pieces cut another way")
{
	// Saved as [0:10] and [10:24] (two owners); loaded as [6:18] (another owner) and whole.
	const Tensor a = iota(10, 0), b = iota(14, 10);
	std::vector<VariablePiece> saved = {piece_of({"w[0:10]", a}, shape_of), piece_of({"w[10:24]", b}, shape_of)};
	auto read = [&](const VariablePiece& p) { return p.offset == 0 ? a : b; };
	Tensor middle = Tensor::zeros({12}, DType::f32, Device{});
	fill_from_pieces(piece_of({"w[6:18]", middle}, shape_of), middle, saved, read);
	for (int i = 0; i < 12; ++i)
		CHECK(middle.data_as<float>()[i] == static_cast<float>(6 + i));
	Tensor whole = Tensor::zeros({4, 6}, DType::f32, Device{});
	fill_from_pieces(piece_of({"w", whole}, shape_of), whole, saved, read);
	CHECK(whole.data_as<float>()[23] == 23.0f);

	// A gap, a variable of another shape, one of another type, one not saved at all.
	std::vector<VariablePiece> gap = {saved[0]};
	CHECK_THROWS_WITH_AS(fill_from_pieces(piece_of({"w", whole}, shape_of), whole, gap, read),
			     "elements [10, 24) of 'w' are in no file of the checkpoint", Error);
	Tensor other = Tensor::zeros({24}, DType::f32, Device{});
	CHECK_THROWS_AS(fill_from_pieces(piece_of({"w", other}, nullptr), other, saved, read), Error);
	Tensor wide = Tensor::zeros({4, 6}, DType::f64, Device{});
	CHECK_THROWS_AS(fill_from_pieces(piece_of({"w", wide}, shape_of), wide, saved, read), Error);
	CHECK_THROWS_WITH_AS(fill_from_pieces(piece_of({"v", other}, nullptr), other, saved, read),
			     "'v' is not in the checkpoint", Error);
}
