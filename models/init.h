// Deterministic parameter initialization: the same seed gives the same values on every rank and device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/tensor/parameter.h"

namespace tower {

// Makes a parameter named `name` of `shape` on `device` with a zero gradient, filled from a
// generator seeded with (seed, name) only, so the rank count and the device never change it.
// Weights use He (Kaiming) uniform init for ReLU, U(-sqrt(6 / fan_in), +sqrt(6 / fan_in));
// biases U(-1 / sqrt(fan_in), +1 / sqrt(fan_in)).
Parameter make_weight(const std::string& name, const Shape& shape, int64_t fan_in, uint64_t seed, const Device& device);
Parameter make_bias(const std::string& name, int64_t size, int64_t fan_in, uint64_t seed, const Device& device);

// Normal(0, stddev) values (GPT-2's initialization), and a constant (LayerNorm's gain and bias),
// seeded and named as above.
Parameter make_normal(const std::string& name, const Shape& shape, float stddev, uint64_t seed, const Device& device);
Parameter make_constant(const std::string& name, const Shape& shape, float value, const Device& device);

// Uniform values in [-bound, bound) from the generator for (seed, name); exposed for tests.
std::vector<float> seeded_uniform(const std::string& name, uint64_t seed, int64_t count, float bound);
// Normal(0, stddev) values from the same generator, by Box-Muller on its 24-bit uniforms.
std::vector<float> seeded_normal(const std::string& name, uint64_t seed, int64_t count, float stddev);

} // namespace tower
