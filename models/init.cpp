// Deterministic parameter initialization: the same seed gives the same values on every rank and device.
#include "models/init.h"

#include <cmath>
#include <random>

namespace tower {

namespace {

// FNV-1a over the name, mixed with the seed by splitmix64's finalizer: distinct names get
// unrelated streams.
uint64_t stream_seed(const std::string& name, uint64_t seed)
{
	uint64_t h = 1469598103934665603ull;
	for (unsigned char ch : name) {
		h ^= ch;
		h *= 1099511628211ull;
	}
	uint64_t z = h ^ (seed + 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

Parameter make_parameter(const std::string& name, const Shape& shape, float bound, uint64_t seed, const Device& device)
{
	Parameter p;
	p.name = name;
	p.value = Tensor::from_host(seeded_uniform(name, seed, shape_numel(shape), bound), shape, device);
	p.grad = Tensor::zeros(shape, DType::f32, device);
	return p;
}

} // namespace

std::vector<float> seeded_uniform(const std::string& name, uint64_t seed, int64_t count, float bound)
{
	std::mt19937_64 gen(stream_seed(name, seed));
	std::vector<float> out(static_cast<size_t>(count));
	// The top 24 bits make an exact float in [0, 1); no library distribution is involved, so
	// every standard library gives the same values.
	for (float& v : out) {
		const float unit = static_cast<float>(gen() >> 40) * 0x1.0p-24f;
		v = (2.0f * unit - 1.0f) * bound;
	}
	return out;
}

Parameter make_weight(const std::string& name, const Shape& shape, int64_t fan_in, uint64_t seed, const Device& device)
{
	return make_parameter(name, shape, std::sqrt(6.0f / static_cast<float>(fan_in)), seed, device);
}

Parameter make_bias(const std::string& name, int64_t size, int64_t fan_in, uint64_t seed, const Device& device)
{
	return make_parameter(name, {size}, 1.0f / std::sqrt(static_cast<float>(fan_in)), seed, device);
}

} // namespace tower
