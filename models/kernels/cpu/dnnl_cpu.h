// The oneDNN engine and stream of the CPU backend, and cached primitives that run on them.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <utility>

#include <oneapi/dnnl/dnnl.hpp>

#include "base/tensor/tensor.h"

namespace tower {

dnnl::engine& dnnl_cpu_engine();

// oneDNN's element type for a tower compute type (f32, f16, bf16).
dnnl::memory::data_type dnnl_type(DType dtype);

// A plain dense memory descriptor of `dims` in the row-major order tower stores tensors in.
dnnl::memory::desc dense_desc(const dnnl::memory::dims& dims, DType dtype);

// A primitive with its argument memories made once; each run only points them at the step's
// tensors, so the per-step path allocates nothing. Its scratchpad is its own (attributes must
// ask for scratchpad_mode::user).
class DnnlPrimitive {
public:
	DnnlPrimitive(const dnnl::primitive& primitive, const dnnl::primitive_desc_base& pd,
		      std::initializer_list<std::pair<int, dnnl::memory::desc>> args);

	// Whether oneDNN picked its reference (unoptimized) code, which it does for types this CPU
	// has no kernels for.
	bool is_reference() const { return implementation_.rfind("ref", 0) == 0; }
	const std::string& implementation() const { return implementation_; }

	// Runs on the calling thread with the given data pointers, one per argument named at
	// construction, and waits for it.
	void run(std::initializer_list<std::pair<int, const void*>> data);

private:
	dnnl::primitive primitive_;
	std::string implementation_;
	std::unordered_map<int, dnnl::memory> args_;
};

// How many primitives this process has made: a steady training loop makes none after its first
// step.
int64_t dnnl_primitives_made();

// Sets the calling thread's OpenMP team size to cpu_threads() before oneDNN runs a kernel on it
// (the setting is per thread in OpenMP, so every calling thread needs it).
void pin_cpu_threads();

} // namespace tower
