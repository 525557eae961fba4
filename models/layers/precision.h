// Mixed precision inside a layer: low-precision working copies of the f32 master weights, and
// parameter gradients computed in the low type and cast into the f32 Parameter::grad.
#pragma once

#include "models/layers/layer.h"
#include "models/layers/workspace.h"

namespace tower {

// p.value in `dtype`: the f32 master itself, the rounded copy the updater keeps (p.working), or
// a copy rounded into `ws` (once per forward).
Tensor working_value(const Parameter& p, DType dtype, Workspace& ws);

// Where a layer computing in `dtype` writes p's gradient: p.grad itself in f32, otherwise a
// `dtype` buffer from `ws` that finish_grad casts into p.grad.
Tensor grad_buffer(const Parameter& p, DType dtype, Workspace& ws);

// Whether the layer's own gradient op should add into `buffer`: only when it is p.grad itself
// and the step accumulates; a low-precision buffer is always overwritten and added in f32.
bool accumulate_in_place(const Tensor& buffer, const BackwardArgs& args);

// Completes p's gradient from `buffer` (casting into p.grad, adding when accumulating, unless
// buffer is p.grad) and reports it ready.
void finish_grad(const Parameter& p, const Tensor& buffer, const BackwardArgs& args);

} // namespace tower
