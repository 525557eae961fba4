// gpt_dump: what the PyTorch comparison needs from tower's GPT on the CPU: its initial weights, the
// loss and every gradient of one batch, and a short AdamW run on fixed batches (their losses and the
// validation loss after it), as an index (JSON) and raw little-endian data (.bin).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "runtime/options/run_fields.h"
#include "data/text_corpus.h"
#include "models/gpt.h"
#include "models/model_factory.h"
#include "optim/optimizer.h"

using namespace tower;

namespace {

// Appends tensors to the .bin file and lists each in the index with its offset.
class Dump {
public:
	explicit Dump(const std::string& path) : out_(path, std::ios::binary) {}

	void add(const std::string& name, const Tensor& t)
	{
		add_bytes(name, t.data(), t.bytes(), t.shape(), std::string(dtype_name(t.dtype())));
	}
	void add_floats(const std::string& name, const std::vector<float>& v)
	{
		add_bytes(name, v.data(), v.size() * sizeof(float), {static_cast<int64_t>(v.size())}, "f32");
	}
	nlohmann::json& index() { return index_; }

private:
	void add_bytes(const std::string& name, const void* data, size_t bytes, const Shape& shape, const std::string& dtype)
	{
		index_["tensors"].push_back({{"name", name}, {"dtype", dtype}, {"shape", shape}, {"offset", offset_}});
		out_.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
		offset_ += bytes;
	}
	std::ofstream out_;
	nlohmann::json index_;
	size_t offset_ = 0;
};

// Windows [first, first + count) of a split (wrapping around), as i32 [count, context + 1].
Tensor windows_of(const TextWindows& set, int64_t first, int64_t count)
{
	const int64_t width = set.context() + 1;
	Tensor t = Tensor::empty({count, width}, DType::i32, Device{});
	for (int64_t i = 0; i < count; ++i)
		set.copy_sample((first + i) % set.size(), {t.data_as<int32_t>() + i * width});
	return t;
}

Batch batch_of(const Tensor& tokens)
{
	return Batch{{{"tokens", tokens}}};
}

} // namespace

int main(int argc, char** argv)
{
	CLI::App app("gpt_dump: tower's GPT, its gradients and a short AdamW run, for a PyTorch comparison");
	GptOptions o;
	int64_t batch = 8, steps = 200, eval_windows = 64;
	float lr = 1e-3f, weight_decay = 0.0f;
	std::string data, out, precision = "fp32";
	app.add_option("--layers", o.layers);
	app.add_option("--width", o.width);
	app.add_option("--heads", o.heads);
	app.add_option("--context", o.context);
	app.add_option("--seed", o.seed);
	app.add_option("--batch", batch, "windows per step");
	app.add_option("--steps", steps, "AdamW steps after the gradient dump (0: none)");
	app.add_option("--lr", lr);
	app.add_option("--weight-decay", weight_decay);
	app.add_option("--eval-windows", eval_windows, "validation windows of the loss after the run");
	app.add_option("--precision", precision, "fp32, fp16 or bf16");
	app.add_option("--data", data, "a text file or directory")->required();
	app.add_option("--out", out, "writes OUT.json and OUT.bin")->required();
	CLI11_PARSE(app, argc, argv);
	o.precision = parse_precision(precision);

	const std::string corpus = read_text_corpus(data);
	const TextWindows train(corpus, TextSplit::train, o.context, batch);
	const TextWindows validation(corpus, TextSplit::validation, o.context, 1);
	auto model = make_gpt(o, Device{});
	const std::vector<Parameter*> params = model->parameters();

	Dump dump(out + ".bin");
	for (const Parameter* p : params)
		dump.add("init/" + p->name, p->value);
	const Tensor first = windows_of(train, 0, batch);
	dump.add("batch/0", first);
	const float loss = model->forward(batch_of(first)).loss;
	model->backward({}, BackwardOptions{});
	for (const Parameter* p : params)
		dump.add("grad/" + p->name, p->grad);

	OptimizerConfig oc;
	oc.name = "adamw";
	oc.weight_decay = weight_decay;
	auto optimizer = make_optimizer(oc, params);
	std::vector<float> losses;
	for (int64_t s = 0; s < steps; ++s) {
		const Tensor tokens = windows_of(train, s * batch, batch);
		dump.add("steps/" + std::to_string(s), tokens);
		losses.push_back(model->forward(batch_of(tokens)).loss);
		model->backward({}, BackwardOptions{});
		optimizer->step(params, lr);
	}
	double eval_sum = 0;
	for (int64_t i = 0; i < eval_windows; ++i)
		eval_sum += model->forward(batch_of(windows_of(validation, i, 1))).loss;
	if (eval_windows > 0)
		dump.add("eval", windows_of(validation, 0, eval_windows));
	dump.add_floats("losses", losses);

	nlohmann::json& index = dump.index();
	index["config"] = {{"layers", o.layers}, {"width", o.width},	{"heads", o.heads},
			   {"context", o.context}, {"vocab", o.vocab}, {"batch", batch},
			   {"steps", steps},	   {"lr", lr},		{"weight_decay", weight_decay},
			   {"beta1", oc.beta1},	   {"beta2", oc.beta2}, {"epsilon", oc.epsilon},
			   {"precision", precision}};
	index["loss"] = loss;
	index["train_windows"] = train.size();
	index["validation_windows"] = validation.size();
	index["eval_windows"] = eval_windows;
	index["eval_loss"] = eval_windows > 0 ? eval_sum / static_cast<double>(eval_windows) : 0.0;
	index["parameters"] = nlohmann::json::array();
	for (const Parameter* p : params)
		index["parameters"].push_back(p->name);
	std::ofstream(out + ".json") << index.dump(1) << "\n";
	std::printf("gpt_dump: loss %.6f, %zu parameters, %lld steps, validation loss %.6f -> %s.{json,bin}\n", loss,
		    params.size(), static_cast<long long>(steps), index["eval_loss"].get<double>(), out.c_str());
	return 0;
}
