// One pre-LayerNorm transformer block: x + attention(ln1(x)), then that + mlp(ln2(that)).
#include "models/transformer_block.h"

#include <cmath>

#include "models/init.h"

namespace tower {

namespace {

constexpr float init_stddev = 0.02f;

Linear normal_linear(const std::string& name, int64_t in, int64_t out, float stddev, uint64_t seed, const Device& device,
		     Activation activation = Activation::none)
{
	return Linear(make_normal(name + ".weight", {out, in}, stddev, seed, device),
		      make_constant(name + ".bias", {out}, 0.0f, device), activation);
}

} // namespace

TransformerBlock::TransformerBlock(const std::string& prefix, const BlockShape& s, uint64_t seed, const Device& device)
	: ln1_(prefix + "ln1", s.width, device),
	  attn_(s.width, s.heads, normal_linear(prefix + "attn.qkv", s.width, 3 * s.width, init_stddev, seed, device),
		normal_linear(prefix + "attn.proj", s.width, s.width,
			      init_stddev / std::sqrt(2.0f * static_cast<float>(s.layers)), seed, device)),
	  ln2_(prefix + "ln2", s.width, device),
	  fc_(normal_linear(prefix + "mlp.fc", s.width, 4 * s.width, init_stddev, seed, device, Activation::gelu)),
	  proj_(normal_linear(prefix + "mlp.proj", 4 * s.width, s.width,
			      init_stddev / std::sqrt(2.0f * static_cast<float>(s.layers)), seed, device))
{
}

std::vector<Parameter*> TransformerBlock::parameters()
{
	std::vector<Parameter*> all;
	for (Parameter* p : ln1_.parameters())
		all.push_back(p);
	for (Parameter* p : attn_.parameters())
		all.push_back(p);
	for (Parameter* p : ln2_.parameters())
		all.push_back(p);
	for (Parameter* p : fc_.parameters())
		all.push_back(p);
	for (Parameter* p : proj_.parameters())
		all.push_back(p);
	return all;
}

const Tensor& normalize_residual(LayerNorm& norm, const Residual& x)
{
	return x.stream == nullptr ? norm.forward(*x.branch) : norm.forward_add(*x.branch, *x.stream);
}

Residual TransformerBlock::forward(const Residual& x, int64_t batch)
{
	// Each residual add goes into the projection's own output, which its backward never reads
	// (no activation), so the stream costs no buffer of its own. Both are made in the next
	// LayerNorm's pass: the attention's in ln2's, the MLP's in the next block's ln1 (or the final
	// norm's). After ln1's, x.branch holds the block's input.
	const Tensor& normalized = normalize_residual(ln1_, x);
	const Tensor& input = *x.branch;
	const Tensor& a = attn_.forward(normalized, batch);
	const Tensor& m = proj_.forward(fc_.forward(ln2_.forward_add(a, input)));
	return {&m, &a};
}

const Tensor& TransformerBlock::backward(const Tensor& dy, const BackwardArgs& args)
{
	BackwardArgs inner = args;
	inner.need_input_grad = true;
	// d(mid) = dy + the MLP branch's gradient, added in LayerNorm's pass into its own dx buffer
	// (likewise below).
	const Tensor& dmid = ln2_.backward_add(fc_.backward(proj_.backward(dy, inner), inner), dy, inner);
	return ln1_.backward_add(attn_.backward(dmid, inner), dmid, inner);
}

} // namespace tower
