// A batch of named tensors, the input of a model: images and labels, token ids and targets, anything.
#include "base/tensor/batch.h"

#include <string>

#include "base/error.h"

namespace tower {

const Tensor& Batch::get(std::string_view name) const
{
	for (const NamedTensor& t : tensors)
		if (t.name == name)
			return t.tensor;
	std::string names;
	for (const NamedTensor& t : tensors)
		names += (names.empty() ? "" : ", ") + t.name;
	throw Error(fmt::format("the batch has no tensor '{}' (it holds: {}); the data set's samples must give the "
				"model every tensor it reads",
				name, names.empty() ? "nothing" : names));
}

int64_t Batch::samples() const
{
	if (tensors.empty() || tensors.front().tensor.shape().empty())
		return 0;
	return tensors.front().tensor.shape()[0];
}

} // namespace tower
