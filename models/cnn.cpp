// The convolutional network: two conv 5x5 + ReLU + 2x2 pool blocks, then two linear layers.
#include "models/cnn.h"

#include "models/layers/conv2d.h"
#include "models/layers/flatten.h"
#include "models/layers/linear.h"
#include "models/layers/maxpool2d.h"

namespace tower {

std::unique_ptr<SequentialModel> make_cnn(const CnnOptions& o, const Device& device)
{
	constexpr int64_t kernel = 5;
	constexpr int64_t padding = 2; // keeps the image size through each convolution
	std::vector<std::unique_ptr<Layer>> layers;
	layers.push_back(std::make_unique<Conv2d>("conv1", Conv2dShape{1, o.channels1, kernel, padding}, Activation::relu,
						  o.seed, device));
	layers.push_back(std::make_unique<MaxPool2d>());
	layers.push_back(std::make_unique<Conv2d>("conv2", Conv2dShape{o.channels1, o.channels2, kernel, padding},
						  Activation::relu, o.seed, device));
	layers.push_back(std::make_unique<MaxPool2d>());
	layers.push_back(std::make_unique<Flatten>());
	const int64_t side = o.image_size / 4;
	layers.push_back(std::make_unique<Linear>("fc1", o.channels2 * side * side, o.hidden, Activation::relu, o.seed,
						  device));
	layers.push_back(std::make_unique<Linear>("fc2", o.hidden, o.classes, Activation::none, o.seed, device));
	return std::make_unique<SequentialModel>(std::move(layers), device, o.precision);
}

} // namespace tower
