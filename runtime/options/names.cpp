// The names a front end gives the library's enums, read from text.
#include "runtime/options/names.h"

#include <charconv>
#include <cmath>

#include "base/error.h"

namespace tower {

namespace {

constexpr std::string_view loss_scale_forms =
	"use dynamic, dynamic:log2, dynamic:growth, static:VALUE (a positive number) or none";

float parse_static_scale(std::string_view text)
{
	// std::from_chars for float parses without locale and reports trailing junk.
	float value = 0.0f;
	const char* end = text.data() + text.size();
	const auto [ptr, ec] = std::from_chars(text.data(), end, value);
	if (ec != std::errc() || ptr != end || !std::isfinite(value) || value <= 0.0f)
		throw AgreedError(fmt::format("`loss_scale` static:{} needs a positive finite number; {}", text,
					      loss_scale_forms));
	return value;
}

} // namespace

AllReduceMode parse_all_reduce_mode(std::string_view text)
{
	for (AllReduceMode m : {AllReduceMode::ring, AllReduceMode::hierarchical, AllReduceMode::naive})
		if (text == all_reduce_mode_name(m))
			return m;
	throw AgreedError(fmt::format("unknown all-reduce mode '{}': use ring, hierarchical or naive", text));
}

ReduceOp parse_reduce_op(std::string_view text)
{
	if (text == "avg")
		return ReduceOp::mean;
	for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min})
		if (text == reduce_op_name(op))
			return op;
	throw AgreedError(fmt::format("unknown reduction '{}': use sum, mean, max or min", text));
}

LossScaleOptions parse_loss_scale(std::string_view text, const LossScaleOptions& base)
{
	LossScaleOptions o = base;
	constexpr std::string_view static_prefix = "static:";
	if (text == "none") {
		o.mode = LossScaleMode::none;
	} else if (text == "dynamic" || text == "dynamic:log2") {
		o.mode = LossScaleMode::dynamic;
		o.policy = LossScalePolicy::log2;
	} else if (text == "dynamic:growth") {
		o.mode = LossScaleMode::dynamic;
		o.policy = LossScalePolicy::growth;
	} else if (text.starts_with(static_prefix)) {
		o.mode = LossScaleMode::fixed;
		o.fixed_scale = parse_static_scale(text.substr(static_prefix.size()));
	} else {
		throw AgreedError(fmt::format("unknown `loss_scale` '{}'; {}", text, loss_scale_forms));
	}
	return o;
}

DevicePreference parse_device_preference(std::string_view text)
{
	if (text == "auto")
		return DevicePreference::automatic;
	if (text == "cpu")
		return DevicePreference::cpu;
	if (text == "cuda")
		return DevicePreference::cuda;
	throw AgreedError(fmt::format("unknown device '{}': use auto, cpu or cuda", text));
}

} // namespace tower
