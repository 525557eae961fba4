// The CUDA backend: setup, cuBLAS GEMM, and the checks around tower's kernels.
#include "models/kernels/cuda/cuda_ops.h"

#include <cmath>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

#include "models/kernels/cuda/kernels.h"
#include "models/kernels/ops_checks.h"
#include "base/device/cuda_check.h"
#include "base/tensor/memory.h"
#include "base/device/gpu_runtime.h"
#include "base/device/thread_stream.h"

namespace tower {

namespace {

void check_cublas(cublasStatus_t status, const char* what)
{
	TOWER_CHECK(status == CUBLAS_STATUS_SUCCESS, "{} failed: {}", what, cublasGetStatusString(status));
}

cudaDataType_t cublas_type(DType t)
{
	switch (t) {
	case DType::f16:
		return CUDA_R_16F;
	case DType::bf16:
		return CUDA_R_16BF;
	default:
		return CUDA_R_32F;
	}
}

} // namespace

void cuda::unsupported_type(DType t)
{
	throw Error(fmt::format("CUDA kernels compute in f32, f16 or bf16, not {}", dtype_name(t)));
}

void cuda::check_launch(const char* what)
{
	const cudaError_t rc = cudaGetLastError();
	TOWER_CHECK(rc == cudaSuccess, "CUDA kernel {} failed to launch: {}", what, cudaGetErrorString(rc));
}

CudaOps::CudaOps(int device_index) : device_{DeviceKind::cuda, device_index}
{
	select_gpu(device_index);
	check_cublas(cublasCreate(&cublas_), "cublasCreate");
	xent_results_ = Tensor::zeros({3}, DType::f32, device_);
	square_partials_ = Tensor::empty({cuda::max_partials}, DType::f64, device_);
	square_total_ = Tensor::empty({1}, DType::f64, device_);
}

CudaOps::~CudaOps()
{
	if (cublas_)
		cublasDestroy(cublas_);
}

cublasHandle_t CudaOps::blas() const
{
	// The GEMMs go where the calling thread's kernels go (base/device/stream.h).
	check_cublas(cublasSetStream(cublas_, static_cast<cudaStream_t>(thread_stream())), "cublasSetStream");
	return cublas_;
}

void CudaOps::expect_here(const Tensor& t, const char* what) const
{
	expect_on(t, device_, what);
}

void CudaOps::gemm(Transpose ta, Transpose tb, float alpha, const Tensor& a, const Tensor& b, float beta,
		   const Tensor& c) const
{
	const GemmDims d = checked_gemm_dims(ta, tb, a, b, c);
	for (const Tensor* t : {&a, &b, &c})
		expect_here(*t, "gemm operand");
	if (d.m == 0 || d.n == 0)
		return;
	// cuBLAS is column-major: a row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T,
	// so the operands swap places and keep their transpose flags.
	const auto flag = [](Transpose t) { return t == Transpose::yes ? CUBLAS_OP_T : CUBLAS_OP_N; };
	if (c.dtype() != DType::f32) {
		// 16-bit operands and result, f32 accumulation and f32 alpha/beta.
		const cudaDataType_t type = cublas_type(c.dtype());
		check_cublas(cublasGemmEx(blas(), flag(tb), flag(ta), static_cast<int>(d.n), static_cast<int>(d.m),
					  static_cast<int>(d.k), &alpha, b.data(), type, static_cast<int>(b.dim(1)),
					  a.data(), type, static_cast<int>(a.dim(1)), &beta, c.data(), type,
					  static_cast<int>(c.dim(1)), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
			     "cublasGemmEx");
		return;
	}
	check_cublas(cublasSgemm(blas(), flag(tb), flag(ta), static_cast<int>(d.n), static_cast<int>(d.m),
				 static_cast<int>(d.k), &alpha, b.data_as<float>(), static_cast<int>(b.dim(1)),
				 a.data_as<float>(), static_cast<int>(a.dim(1)), &beta, c.data_as<float>(),
				 static_cast<int>(c.dim(1))),
		     "cublasSgemm");
}

bool CudaOps::gemm_into_f32(Transpose ta, Transpose tb, float alpha, const Tensor& a, const Tensor& b, float beta,
			    const Tensor& c) const
{
	// bf16 only, as on the CPU: it has f32's range, so skipping its rounding changes no overflow,
	// while an f16 gradient that overflows must still become inf for the loss scaler to see.
	if (a.dtype() != DType::bf16 || b.dtype() != DType::bf16 || c.dtype() != DType::f32)
		return false;
	const Tensor c16 = Tensor::view(c.data(), c.shape(), DType::bf16, device_); // for the checks only
	const GemmDims d = checked_gemm_dims(ta, tb, a, b, c16);
	for (const Tensor* t : {&a, &b, &c})
		expect_here(*t, "gemm operand");
	if (d.m == 0 || d.n == 0)
		return true;
	// Column-major as in gemm(); bf16 operands, an f32 result, f32 accumulation.
	const auto flag = [](Transpose t) { return t == Transpose::yes ? CUBLAS_OP_T : CUBLAS_OP_N; };
	check_cublas(cublasGemmEx(blas(), flag(tb), flag(ta), static_cast<int>(d.n), static_cast<int>(d.m),
				  static_cast<int>(d.k), &alpha, b.data(), CUDA_R_16BF, static_cast<int>(b.dim(1)), a.data(),
				  CUDA_R_16BF, static_cast<int>(a.dim(1)), &beta, c.data(), CUDA_R_32F,
				  static_cast<int>(c.dim(1)), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
		     "cublasGemmEx into f32");
	return true;
}

void CudaOps::gemm_strided_batched(Transpose ta, Transpose tb, float alpha, const MatrixBatch& a,
				   const MatrixBatch& b, float beta, const MatrixBatch& c) const
{
	const GemmDims d = checked_strided_gemm_dims(ta, tb, a, b, c);
	for (const MatrixBatch* v : {&a, &b, &c})
		expect_here(v->tensor, "batched gemm operand");
	if (c.batch == 0 || d.m == 0 || d.n == 0)
		return;
	// Column-major as in gemm(): the operands swap places; each item lies `stride` after the last.
	const auto flag = [](Transpose t) { return t == Transpose::yes ? CUBLAS_OP_T : CUBLAS_OP_N; };
	const auto first = [](const MatrixBatch& v) {
		return static_cast<char*>(v.tensor.data()) + static_cast<size_t>(v.offset) * dtype_size(v.tensor.dtype());
	};
	const cudaDataType_t type = cublas_type(c.tensor.dtype());
	if (c.groups == 1) {
		check_cublas(cublasGemmStridedBatchedEx(blas(), flag(tb), flag(ta), static_cast<int>(d.n),
							static_cast<int>(d.m), static_cast<int>(d.k), &alpha, first(b), type,
							static_cast<int>(b.ld), b.stride, first(a), type, static_cast<int>(a.ld),
							a.stride, &beta, first(c), type, static_cast<int>(c.ld), c.stride,
							static_cast<int>(c.batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
			     "cublasGemmStridedBatchedEx");
		return;
	}
	// cuBLAS strides one level of batch. Heads inside rows have two (sequence, then head): a call
	// per sequence cost a launch per sequence and product (thousands per GPT step at 64 windows),
	// so the matrices' addresses are written on the GPU and one call takes them all.
	const int64_t items = c.groups * c.batch;
	if (batch_pointers_.numel() < 3 * items)
		batch_pointers_ = Tensor::empty({3 * items}, DType::i64, device_);
	const auto operand = [&](const MatrixBatch& v) {
		return cuda::StridedOperand{first(v), v.stride, v.group_stride,
					    static_cast<int64_t>(dtype_size(v.tensor.dtype()))};
	};
	cuda::batch_pointers({{operand(a), operand(b), operand(c)}}, c.batch, c.groups, static_cast<void**>(batch_pointers_.data()));
	void** pointers = static_cast<void**>(batch_pointers_.data());
	check_cublas(cublasGemmBatchedEx(blas(), flag(tb), flag(ta), static_cast<int>(d.n), static_cast<int>(d.m),
					 static_cast<int>(d.k), &alpha, pointers + items, type, static_cast<int>(b.ld),
					 pointers, type, static_cast<int>(a.ld), &beta, pointers + 2 * items, type,
					 static_cast<int>(c.ld), static_cast<int>(items), CUBLAS_COMPUTE_32F,
					 CUBLAS_GEMM_DEFAULT),
		     "cublasGemmBatchedEx");
}

void CudaOps::fill(const Tensor& x, float value) const
{
	expect_float(x, "filled tensor");
	expect_here(x, "filled tensor");
	cuda::fill(x.dtype(), x.data(), x.numel(), value);
}

void CudaOps::accumulate(float alpha, const Tensor& x, const Tensor& y) const
{
	expect_float(x, "accumulated tensor");
	expect_same_dtype(x, y, "accumulate");
	expect_same_numel(x, y, "accumulate");
	expect_here(x, "accumulated tensor");
	expect_here(y, "accumulator");
	cuda::axpy(x.dtype(), alpha, x.data(), y.data(), x.numel());
}

void CudaOps::bias_act(const Tensor& y, const Tensor& bias, int64_t inner, bool relu) const
{
	const int64_t outer = checked_bias_outer(y, bias, inner);
	expect_here(y, "biased tensor");
	expect_here(bias, "bias");
	cuda::bias_act(y.dtype(), y.data(), bias.data(), outer, bias.numel(), inner, relu);
}

void CudaOps::bias_grad(const Tensor& dy, const Tensor& db, int64_t inner, bool accumulate) const
{
	const int64_t outer = checked_bias_outer(dy, db, inner);
	expect_here(dy, "output gradient");
	expect_here(db, "bias gradient");
	const int64_t scratch = cuda::bias_grad_partials(db.numel());
	if (bias_partials_.numel() < scratch)
		bias_partials_ = Tensor::empty({scratch}, DType::f32, device_);
	cuda::bias_grad(dy.dtype(), dy.data(), db.data(), outer, db.numel(), inner, accumulate,
			bias_partials_.data_as<float>());
}

void CudaOps::relu_forward(const Tensor& x, const Tensor& y) const
{
	expect_float(x, "relu input");
	expect_same_dtype(x, y, "relu");
	expect_same_numel(x, y, "relu");
	expect_here(x, "relu input");
	expect_here(y, "relu output");
	cuda::relu_forward(x.dtype(), x.data(), y.data(), x.numel());
}

void CudaOps::relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) const
{
	for (const Tensor* t : {&y, &dy, &dx}) {
		expect_float(*t, "relu backward operand");
		expect_same_dtype(y, *t, "relu backward");
		expect_here(*t, "relu backward operand");
		expect_same_numel(y, *t, "relu backward");
	}
	cuda::relu_backward(y.dtype(), y.data(), dy.data(), dx.data(), y.numel());
}

void CudaOps::im2col(const ConvGeometry& g, const Tensor& image, const Tensor& col) const
{
	check_im2col(g, image, col);
	expect_here(image, "im2col image");
	expect_here(col, "im2col columns");
	cuda::im2col(image.dtype(), g, image.numel() / (g.channels * g.height * g.width), image.data(), col.data());
}

void CudaOps::col2im(const ConvGeometry& g, const Tensor& col, const Tensor& image) const
{
	check_im2col(g, image, col);
	expect_here(image, "col2im image");
	expect_here(col, "col2im columns");
	cuda::col2im(image.dtype(), g, image.numel() / (g.channels * g.height * g.width), col.data(), image.data());
}

void CudaOps::maxpool_forward(const Tensor& x, const Tensor& y, const Tensor& argmax) const
{
	check_maxpool(x, y, argmax);
	for (const Tensor* t : {&x, &y, &argmax})
		expect_here(*t, "pooling operand");
	cuda::maxpool_forward(x.dtype(), x.data(), y.data(), argmax.data_as<int32_t>(), x.dim(0) * x.dim(1), x.dim(2),
			      x.dim(3));
}

void CudaOps::maxpool_backward(const Tensor& dy, const Tensor& argmax, const Tensor& dx) const
{
	check_maxpool(dx, dy, argmax);
	for (const Tensor* t : {&dx, &dy, &argmax})
		expect_here(*t, "pooling operand");
	cuda::maxpool_backward(dy.dtype(), dy.data(), argmax.data_as<int32_t>(), dx.data(), dx.dim(0) * dx.dim(1),
			       dx.dim(2), dx.dim(3));
}

XentResult CudaOps::softmax_xent_forward(const Tensor& logits, const Tensor& labels, const Tensor& probs) const
{
	check_xent(logits, labels, probs);
	for (const Tensor* t : {&logits, &labels, &probs})
		expect_here(*t, "cross-entropy operand");
	const int64_t rows = logits.dim(0);
	if (xent_rows_.numel() < 2 * rows)
		xent_rows_ = Tensor::empty({2 * rows}, DType::f32, device_);
	// The loss and correct totals (two f32) and the bad-label flag (an i32) share one buffer, so
	// one copy (one wait) brings all three back.
	struct Results {
		float totals[2];
		int32_t bad_label;
	};
	static_assert(sizeof(Results) == 3 * sizeof(float));
	// Device addresses, computed without touching the device memory they point to.
	char* const base = static_cast<char*>(xent_results_.data());
	auto* const totals = reinterpret_cast<float*>(base + offsetof(Results, totals));
	auto* const bad_label = reinterpret_cast<int32_t*>(base + offsetof(Results, bad_label));
	// The kernel only ever sets the flag: clear it, or one bad batch fails every later forward.
	zero_bytes(bad_label, device_, sizeof(int32_t));
	cuda::softmax_xent_forward(logits.dtype(), logits.data(), labels.data_as<int32_t>(), probs.data(),
				   xent_rows_.data_as<float>(), totals, bad_label, rows, logits.dim(1));
	Results got{};
	copy_bytes(&got, Device{}, base, device_, sizeof got);
	TOWER_CHECK(got.bad_label == 0, "a label is outside [0, {}); check the data set's labels", logits.dim(1));
	return {rows > 0 ? got.totals[0] / static_cast<float>(rows) : 0.0f, static_cast<int64_t>(got.totals[1])};
}

void CudaOps::softmax_xent_backward(const Tensor& probs, const Tensor& labels, const Tensor& dlogits,
				    float scale) const
{
	check_xent(probs, labels, dlogits);
	for (const Tensor* t : {&probs, &labels, &dlogits})
		expect_here(*t, "cross-entropy operand");
	cuda::softmax_xent_backward(probs.dtype(), probs.data(), labels.data_as<int32_t>(), dlogits.data(), probs.dim(0),
				    probs.dim(1), scale);
}

void CudaOps::cast(const Tensor& src, const Tensor& dst, bool accumulate) const
{
	expect_float(src, "cast source");
	expect_float(dst, "cast destination");
	expect_same_numel(src, dst, "cast");
	expect_here(src, "cast source");
	expect_here(dst, "cast destination");
	cuda::cast(src.dtype(), src.data(), dst.dtype(), dst.data(), src.numel(), accumulate);
}

bool CudaOps::all_finite(const Tensor& x) const
{
	// A sum of squares in f64 is finite exactly when every f32 element is: one reduction and
	// one 8-byte copy back, shared with the gradient norm.
	return std::isfinite(sum_of_squares(x));
}

double CudaOps::sum_of_squares(const Tensor& x) const
{
	return sum_of_squares_all({x});
}

double CudaOps::sum_of_squares_all(const std::vector<Tensor>& xs) const
{
	// Each tensor's total is added to the last on the device, in order: the same sums as the
	// default's, with one copy back (a wait for the stream) for all of them.
	for (size_t i = 0; i < xs.size(); ++i) {
		expect_f32(xs[i], "gradient");
		expect_here(xs[i], "gradient");
		cuda::sum_of_squares(xs[i].data_as<float>(), xs[i].numel(), square_partials_.data_as<double>(),
				     square_total_.data_as<double>(), i > 0);
	}
	if (xs.empty())
		return 0.0;
	double total = 0.0;
	copy_bytes(&total, Device{}, square_total_.data(), device_, sizeof total);
	return total;
}

void CudaOps::scale(const Tensor& x, float factor) const
{
	expect_f32(x, "scaled tensor");
	expect_here(x, "scaled tensor");
	cuda::scale(x.data_as<float>(), x.numel(), factor);
}

const Ops& cuda_ops(int device_index)
{
	// One backend per device, made on first use and kept for the process's life.
	static std::mutex mutex;
	static std::map<int, std::unique_ptr<CudaOps>> by_device;
	const std::lock_guard<std::mutex> lock(mutex);
	std::unique_ptr<CudaOps>& ops = by_device[device_index];
	if (!ops)
		ops = std::make_unique<CudaOps>(device_index);
	return *ops;
}

} // namespace tower
