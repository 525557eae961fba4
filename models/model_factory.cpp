// Builds the built-in models by name.
#include "models/model_factory.h"

#include "models/cnn.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "base/error.h"

namespace tower {

namespace {

void expect_option(bool ok, const std::string& what)
{
	if (!ok)
		throw AgreedError(what);
}

} // namespace

std::string known_model_names()
{
	return "mlp, cnn, gpt";
}

GptOptions gpt_options(const ModelConfig& config)
{
	GptOptions o;
	o.layers = config.layers;
	o.width = config.width;
	o.heads = config.heads;
	o.context = config.context;
	o.seed = config.seed;
	o.precision = config.precision;
	return o;
}

std::unique_ptr<Model> make_model(const ModelConfig& config, const Device& device)
{
	const DType p = config.precision;
	expect_option(p == DType::f32 || p == DType::f16 || p == DType::bf16,
		      fmt::format("model precision {} is not a compute type; use fp32, fp16 or bf16", dtype_name(p)));
	expect_option(config.hidden >= 0, fmt::format("model hidden width {} is negative; use a positive width, or 0 "
						      "for the model's default", config.hidden));
	if (config.name == "mlp") {
		expect_option(config.depth >= 1, fmt::format("mlp depth {} must be at least 1 hidden layer", config.depth));
		MlpOptions o;
		o.hidden = config.hidden > 0 ? config.hidden : o.hidden;
		o.depth = config.depth;
		o.seed = config.seed;
		o.precision = p;
		return make_mlp(o, device);
	}
	if (config.name == "cnn") {
		CnnOptions o;
		o.hidden = config.hidden > 0 ? config.hidden : o.hidden;
		o.seed = config.seed;
		o.precision = p;
		return make_cnn(o, device);
	}
	if (config.name == "gpt")
		return make_gpt(gpt_options(config), device);
	throw AgreedError(fmt::format("unknown model '{}'; the known models are: {}", config.name, known_model_names()));
}

} // namespace tower
