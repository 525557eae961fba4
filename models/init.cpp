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

Parameter parameter_of(const std::string& name, const Shape& shape, const std::vector<float>& values,
		       const Device& device)
{
	Parameter p;
	p.name = name;
	p.value = Tensor::from_host(values, shape, device);
	p.grad = Tensor::zeros(shape, DType::f32, device);
	return p;
}

Parameter make_parameter(const std::string& name, const Shape& shape, float bound, uint64_t seed, const Device& device)
{
	return parameter_of(name, shape, seeded_uniform(name, seed, shape_numel(shape), bound), device);
}

// A float in [0, 1) from the top 24 bits of the generator: exact, and the same in every standard
// library (no library distribution is involved).
float unit_float(std::mt19937_64& gen)
{
	return static_cast<float>(gen() >> 40) * 0x1.0p-24f;
}

} // namespace

std::vector<float> seeded_uniform(const std::string& name, uint64_t seed, int64_t count, float bound)
{
	std::mt19937_64 gen(stream_seed(name, seed));
	std::vector<float> out(static_cast<size_t>(count));
	for (float& v : out)
		v = (2.0f * unit_float(gen) - 1.0f) * bound;
	return out;
}

std::vector<float> seeded_normal(const std::string& name, uint64_t seed, int64_t count, float stddev)
{
	std::mt19937_64 gen(stream_seed(name, seed));
	std::vector<float> out(static_cast<size_t>(count));
	// Box-Muller in double, one pair per two values; 1 - u keeps the logarithm's argument in (0, 1].
	constexpr double two_pi = 6.283185307179586;
	for (size_t i = 0; i < out.size(); i += 2) {
		const double u1 = 1.0 - static_cast<double>(unit_float(gen));
		const double u2 = static_cast<double>(unit_float(gen));
		const double r = std::sqrt(-2.0 * std::log(u1)) * stddev;
		out[i] = static_cast<float>(r * std::cos(two_pi * u2));
		if (i + 1 < out.size())
			out[i + 1] = static_cast<float>(r * std::sin(two_pi * u2));
	}
	return out;
}

Parameter make_normal(const std::string& name, const Shape& shape, float stddev, uint64_t seed, const Device& device)
{
	return parameter_of(name, shape, seeded_normal(name, seed, shape_numel(shape), stddev), device);
}

Parameter make_constant(const std::string& name, const Shape& shape, float value, const Device& device)
{
	return parameter_of(name, shape, std::vector<float>(static_cast<size_t>(shape_numel(shape)), value), device);
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
