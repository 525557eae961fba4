// The tail that Linear and Conv2d share: a bias added per channel, then ReLU, GELU (Linear only) or
// nothing, and its backward down to the pre-activation gradient and the bias gradient.
#pragma once

#include "models/kernels/ops.h"
#include "models/layers/layer.h"
#include "models/layers/workspace.h"

namespace tower {

enum class Activation { none, relu, gelu };

// What a layer with GELU keeps in z for its backward pass: the pre-activation, or (where
// Ops::gelu_keeps_slope) GELU's slope, over which the backward writes dz, leaving it spent: a
// second backward after one forward is refused.
enum class GeluKept { input, slope, spent };

// For y = act(z), z = (product) + b: dz (dy itself without an activation; GELU's over a kept slope,
// else from `dz_ws`), and b's gradient summed over `positions` per channel (1 for Linear, the
// output pixels for Conv2d), finished into bias.grad and reported ready. ReLU's slope is read from
// y, GELU's from z (unused otherwise; `kept` says which it is); GELU's and the bias gradient are
// one pass.
Tensor bias_act_backward(const Ops& ops, const Tensor& y, const Tensor& z, GeluKept kept, const Tensor& dy,
			 Activation activation, const Parameter& bias, int64_t positions, const BackwardArgs& args,
			 Workspace& dz_ws, Workspace& db_ws);

} // namespace tower
