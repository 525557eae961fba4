// The Fashion-MNIST dataset: 28x28 grey images as f32 in [0, 1] and labels 0..9 as i32.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>

#include "data/sample_set.h"

namespace tower {

enum class Split { train, test };

// Grey images with a class label each: the sample set of the built-in classifiers, whose samples
// are "images" (f32 [1, rows, cols]) and "labels" (i32 []).
struct Dataset : SampleSet {
	int64_t count = 0;
	int64_t rows = 0;
	int64_t cols = 0;
	std::vector<float> images;   // count x rows x cols, x / 255
	std::vector<int32_t> labels; // count
	int64_t sample_size() const { return rows * cols; }

	int64_t size() const override { return count; }
	std::vector<SampleField> fields() const override;
	void copy_sample(int64_t index, const std::vector<void*>& out) const override;
	std::string describe() const override;
};

constexpr int64_t fashion_mnist_side = 28;
constexpr int32_t fashion_mnist_classes = 10;

// Where Debian's dataset-fashion-mnist package puts the files.
std::string default_fashion_mnist_dir();

// Reads <dir>/train-*-ubyte.gz or <dir>/t10k-*-ubyte.gz. Throws tower::Error naming the file when
// one is missing, malformed, not 28x28, has a label outside 0..9, or when the image and label
// counts differ.
Dataset load_fashion_mnist(const std::string& dir, Split split);

// Collective over `comm`: every rank loads; if any rank fails, every rank throws
// tower::AgreedError listing each failing rank's problem, so all can leave together.
Dataset load_fashion_mnist_agreed(MPI_Comm comm, const std::string& dir, Split split);

} // namespace tower
