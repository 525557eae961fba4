// Launchers of tower's CUDA kernels (models/cuda/*.cu); all run on the current device's default stream.
#pragma once

#include <cstdint>

#include "models/ops.h"

namespace tower::cuda {

void fill(float* x, int64_t n, float value);
void axpy(float alpha, const float* x, float* y, int64_t n);
void bias_act(float* y, const float* bias, int64_t outer, int64_t channels, int64_t inner, bool relu);
void bias_grad(const float* dy, float* db, int64_t outer, int64_t channels, int64_t inner, bool accumulate);
void relu_forward(const float* x, float* y, int64_t n);
void relu_backward(const float* y, const float* dy, float* dx, int64_t n);

void im2col(const ConvGeometry& g, const float* image, float* col);
void col2im(const ConvGeometry& g, const float* col, float* image);

void maxpool_forward(const float* x, float* y, int32_t* argmax, int64_t planes, int64_t h, int64_t w);
void maxpool_backward(const float* dy, const int32_t* argmax, float* dx, int64_t planes, int64_t h, int64_t w);

// Writes probs and, into totals[0..1], the summed loss and the correct count (as floats, exact
// below 2^24 rows); `bad_label` becomes 1 when a label is out of range.
void softmax_xent_forward(const float* logits, const int32_t* labels, float* probs, float* row_loss,
			  float* totals, int32_t* bad_label, int64_t rows, int64_t classes);
void softmax_xent_backward(const float* probs, const int32_t* labels, float* dlogits, int64_t rows,
			   int64_t classes);

// Throws tower::Error if the last launch failed.
void check_launch(const char* what);

} // namespace tower::cuda
