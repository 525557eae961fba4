// The multilayer perceptron: 784 -> hidden (x depth, ReLU) -> 10.
#include "models/mlp.h"

#include <fmt/format.h>

#include "models/layers/flatten.h"
#include "models/layers/linear.h"

namespace tower {

std::unique_ptr<SequentialModel> make_mlp(const MlpOptions& o, const Device& device)
{
	std::vector<std::unique_ptr<Layer>> layers;
	layers.push_back(std::make_unique<Flatten>());
	int64_t width = o.inputs;
	for (int64_t i = 1; i <= o.depth; ++i) {
		layers.push_back(std::make_unique<Linear>(fmt::format("fc{}", i), width, o.hidden, Activation::relu,
							  o.seed, device));
		width = o.hidden;
	}
	layers.push_back(std::make_unique<Linear>(fmt::format("fc{}", o.depth + 1), width, o.classes, Activation::none,
						  o.seed, device));
	return std::make_unique<SequentialModel>(std::move(layers), device, o.precision);
}

} // namespace tower
