// The CUDA update entry points of a CPU-only build: reaching one means a GPU tensor was used.
#include "optim/update.h"
#include "base/error.h"

namespace tower {

namespace {

[[noreturn]] void no_cuda(const char* what)
{
	throw Error(fmt::format("{} on a CUDA device, but tower was built without CUDA; rebuild with -Dcuda=enabled",
				what));
}

} // namespace

void sgd_update_cuda(float*, const float*, int64_t, const SgdCoeffs&)
{
	no_cuda("SGD update");
}

void momentum_update_cuda(float*, const float*, float*, int64_t, const SgdCoeffs&)
{
	no_cuda("momentum update");
}

void adam_update_cuda(float*, const float*, float*, float*, int64_t, const int64_t*, const AdamCoeffs&)
{
	no_cuda("Adam update");
}

void advance_step_cuda(int64_t*)
{
	no_cuda("optimizer step counter");
}

} // namespace tower
