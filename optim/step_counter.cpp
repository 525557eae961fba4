// The optimizer's step counter: an i64 [1] tensor kept with the rest of its state.
#include "optim/step_counter.h"

#include "base/tensor/memory.h"

namespace tower {

NamedTensor make_step_counter(const Device& device)
{
	return {"optimizer/step", Tensor::zeros({1}, DType::i64, device)};
}

int64_t read_step_counter(const NamedTensor& counter)
{
	int64_t value = 0;
	copy_bytes(&value, Device{}, counter.tensor.data(), counter.tensor.device(), sizeof value);
	return value;
}

} // namespace tower
