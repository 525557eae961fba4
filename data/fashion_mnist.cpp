// The Fashion-MNIST dataset: 28x28 grey images as f32 in [0, 1] and labels 0..9 as i32.
#include "data/fashion_mnist.h"

#include "data/idx_file.h"
#include "base/mpi/agree.h"
#include "base/content_hash.h"
#include "base/error.h"

#include <algorithm>

namespace tower {

namespace {

constexpr int images_rank = 3;
constexpr int labels_rank = 1;
// Divided, not multiplied by 1/255, so each pixel is the correctly rounded x / 255.
constexpr float pixel_max = 255.0f;

std::string file_path(const std::string& dir, Split split, const char* kind)
{
	const char* prefix = split == Split::train ? "train" : "t10k";
	return fmt::format("{}/{}-{}-ubyte.gz", dir, prefix, kind);
}

void take_images(Dataset& d, const IdxArray& idx, const std::string& path)
{
	if (idx.dims[1] != fashion_mnist_side || idx.dims[2] != fashion_mnist_side)
		throw Error(fmt::format("{} holds {}x{} images; Fashion-MNIST images are {}x{}", path, idx.dims[1],
					idx.dims[2], fashion_mnist_side, fashion_mnist_side));
	d.count = idx.dims[0];
	d.rows = idx.dims[1];
	d.cols = idx.dims[2];
	d.images.resize(idx.data.size());
	for (size_t i = 0; i < idx.data.size(); ++i)
		d.images[i] = static_cast<float>(idx.data[i]) / pixel_max;
}

void take_labels(Dataset& d, const IdxArray& idx, const std::string& path)
{
	d.labels.resize(idx.data.size());
	for (size_t i = 0; i < idx.data.size(); ++i) {
		if (idx.data[i] >= fashion_mnist_classes)
			throw Error(fmt::format("{}: label {} of sample {} is outside 0..{}", path, idx.data[i], i,
						fashion_mnist_classes - 1));
		d.labels[i] = idx.data[i];
	}
}

} // namespace

std::string default_fashion_mnist_dir()
{
	return "/usr/share/datasets/fashion-mnist";
}

Dataset load_fashion_mnist(const std::string& dir, Split split)
{
	const std::string images_path = file_path(dir, split, "images-idx3");
	const std::string labels_path = file_path(dir, split, "labels-idx1");
	Dataset d;
	take_images(d, read_idx(images_path, images_rank), images_path);
	const IdxArray labels = read_idx(labels_path, labels_rank);
	if (labels.dims[0] != d.count)
		throw Error(fmt::format("{} has {} labels but {} has {} images; the files are from different sets",
					labels_path, labels.dims[0], images_path, d.count));
	take_labels(d, labels, labels_path);
	return d;
}

Dataset load_fashion_mnist_agreed(MPI_Comm comm, const std::string& dir, Split split)
{
	Dataset d;
	std::string problem;
	try {
		d = load_fashion_mnist(dir, split);
	} catch (const Error& e) {
		problem = fmt::format("{}; point `data` at a directory holding the four Fashion-MNIST *-ubyte.gz "
				      "files (the Debian package dataset-fashion-mnist puts them in {})",
				      e.what(), default_fashion_mnist_dir());
	}
	agree(comm, problem);
	return d;
}

std::vector<SampleField> Dataset::fields() const
{
	return {{"images", DType::f32, {1, rows, cols}}, {"labels", DType::i32, {}}};
}

void Dataset::copy_sample(int64_t index, const std::vector<void*>& out) const
{
	const auto n = static_cast<size_t>(sample_size());
	std::copy_n(images.data() + static_cast<size_t>(index) * n, n, static_cast<float*>(out[0]));
	*static_cast<int32_t*>(out[1]) = labels[static_cast<size_t>(index)];
}

std::string Dataset::describe() const
{
	uint64_t h = content_hash(images.data(), images.size() * sizeof(float));
	h = content_hash(labels.data(), labels.size() * sizeof(int32_t), h);
	return fmt::format("{} samples of {}x{}, checksum {:016x}", count, rows, cols, h);
}

} // namespace tower
