// The names a front end gives the library's enums: all-reduce modes, reductions, loss scaling and
// devices, read from text. Each throws tower::AgreedError naming the valid forms.
#pragma once

#include <string>
#include <string_view>

#include "base/device/device.h"
#include "collectives/all_reduce_mode.h"
#include "collectives/reduce_op.h"
#include "optim/loss_scale.h"

namespace tower {

// "ring", "hierarchical" or "naive" (all_reduce_mode_name's).
AllReduceMode parse_all_reduce_mode(std::string_view text);

// "sum", "mean" (or "avg"), "max", "min" (reduce_op_name's).
ReduceOp parse_reduce_op(std::string_view text);

// "none", "static:VALUE" (VALUE a positive finite number), "dynamic" (the log2 policy),
// "dynamic:log2" and "dynamic:growth", into a copy of `base` (which carries the policies' tuning).
LossScaleOptions parse_loss_scale(std::string_view text, const LossScaleOptions& base = {});

// "auto", "cpu" or "cuda".
DevicePreference parse_device_preference(std::string_view text);

} // namespace tower
