// The oneDNN engine of the CPU backend, its thread count, and cached primitives.
#include "models/kernels/cpu/dnnl_cpu.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include <omp.h>

#include "models/kernels/cpu/cpu_threads.h"
#include "base/error.h"

namespace tower {

namespace {

int default_threads()
{
	const char* env = std::getenv("OMP_NUM_THREADS");
	const int n = env != nullptr ? std::atoi(env) : 0;
	return n >= 1 ? n : 1;
}

int& threads_setting()
{
	static int threads = default_threads();
	return threads;
}

} // namespace

void set_cpu_threads(int n)
{
	if (n < 1)
		throw Error(fmt::format("`threads` must be at least 1, got {}", n));
	threads_setting() = n;
}

int cpu_threads()
{
	return threads_setting();
}

void pin_cpu_threads()
{
	const int n = threads_setting();
	if (omp_get_max_threads() != n)
		omp_set_num_threads(n);
}

const char* onednn_version()
{
	static const std::string text = [] {
		const dnnl_version_t* v = dnnl_version();
		return fmt::format("{}.{}.{}", v->major, v->minor, v->patch);
	}();
	return text.c_str();
}

const char* onednn_isa()
{
	switch (dnnl::get_effective_cpu_isa()) {
	case dnnl::cpu_isa::sse41: return "sse41";
	case dnnl::cpu_isa::avx: return "avx";
	case dnnl::cpu_isa::avx2: return "avx2";
	case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
	case dnnl::cpu_isa::avx512_mic: return "avx512_mic";
	case dnnl::cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
	case dnnl::cpu_isa::avx512_core: return "avx512_core";
	case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
	case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
	case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
	default: return "unknown";
	}
}

dnnl::engine& dnnl_cpu_engine()
{
	static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
	return engine;
}

dnnl::memory::data_type dnnl_type(DType dtype)
{
	switch (dtype) {
	case DType::f32: return dnnl::memory::data_type::f32;
	case DType::f16: return dnnl::memory::data_type::f16;
	case DType::bf16: return dnnl::memory::data_type::bf16;
	default:
		throw Error(fmt::format("oneDNN kernels take f32, f16 or bf16 tensors, not {}", dtype_name(dtype)));
	}
}

dnnl::memory::desc dense_desc(const dnnl::memory::dims& dims, DType dtype)
{
	dnnl::memory::dims strides(dims.size(), 1);
	for (size_t i = dims.size(); i-- > 1;)
		strides[i - 1] = strides[i] * dims[i];
	return dnnl::memory::desc(dims, dnnl_type(dtype), strides);
}

namespace {

std::atomic<int64_t> primitives_made{0};

} // namespace

int64_t dnnl_primitives_made()
{
	return primitives_made.load();
}

DnnlPrimitive::DnnlPrimitive(const dnnl::primitive& primitive, const dnnl::primitive_desc_base& pd,
			     std::initializer_list<std::pair<int, dnnl::memory::desc>> args)
	: primitive_(primitive), implementation_(pd.impl_info_str())
{
	for (const auto& [arg, desc] : args)
		args_.emplace(arg, dnnl::memory(desc, dnnl_cpu_engine(), DNNL_MEMORY_NONE));
	args_.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(pd.scratchpad_desc(), dnnl_cpu_engine()));
	++primitives_made;
}

void DnnlPrimitive::run(std::initializer_list<std::pair<int, const void*>> data)
{
	for (const auto& [arg, pointer] : data)
		args_.at(arg).set_data_handle(const_cast<void*>(pointer));
	pin_cpu_threads();
	// One stream per calling thread keeps threads that run kernels independent of each other.
	static thread_local dnnl::stream stream(dnnl_cpu_engine());
	primitive_.execute(stream, args_);
	stream.wait();
}

} // namespace tower
