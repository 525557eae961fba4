// Causal self-attention in f32 one sequence and head at a time, on AVX-512 register tiles.
//
// oneDNN runs attention's products as batched strided GEMMs: each product streams every head's
// operands through memory once, and at these sizes (blocks of 32 x 64 x 32..128) a GEMM call per
// matrix costs as much as its arithmetic; in the fp32 GPT step they ran at 69 GFLOP/s against
// 170 for the layers' GEMMs. Here one head's queries, keys, values and probabilities (160 KiB at
// T = 128, D = 64) stay in cache from its first product to its last, each tile of 8 query rows
// computes only the keys up to its last row, and the softmax runs on rows still in cache.
#include "models/kernels/cpu/attention_f32.h"

#include "base/error.h"
#include "models/kernels/cpu/own_avx512.h"

// The kernels need GCC's per-function target pragma on x86-64 (clang ignores it: the fuzz build
// compiles this file with clang and runs the default attention instead).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TOWER_ATTENTION_KERNELS 1
// GCC 12's intrinsics pass an undefined vector through their unused mask lanes, which it then
// reports as a read of an uninitialized value (its bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "models/kernels/cpu/vector_math.h"
#endif

namespace tower {

#ifdef TOWER_ATTENTION_KERNELS

bool attention_f32_available()
{
	return own_avx512_allowed();
}

// Everything below is compiled for AVX-512 (the check above runs first, compiled for any x86-64):
// the loops vectorize sixteen wide, and the intrinsics are allowed.
#pragma GCC push_options
#pragma GCC target("avx512f")

namespace {

constexpr int64_t tile_rows = 8;  // 8 rows x 2 vectors: 16 accumulators of the 32 registers
constexpr int64_t tile_cols = 32;

// One product of a few rows: rows [0, rows) (at most 8) of c = a b, where a's element (r, p) is
// at a[r * a_row + p * a_col] (a_col = 1 for a matrix read as stored, a_row = 1 for one read
// transposed), over `cols` columns of b and c (row strides ldb and ldc) and inner length k.
// Passed by reference: by value, its fields went through the stack on every call, and the
// narrower stores followed by a wider load stalled (a fifth of the forward pass in `perf`).
struct RowsProduct {
	int64_t rows;
	const float* a;
	int64_t a_row, a_col;
	const float* b;
	int64_t ldb, k;
	float* c;
	int64_t ldc, cols;
};

inline __mmask16 first_lanes(int64_t n)
{
	return n >= 16 ? static_cast<__mmask16>(0xFFFF) : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1);
}

// Columns [j, j + 16 V) of the product (V = 1 or 2 vectors), the last ones masked past `cols`:
// each b row is V vectors, each a(r, p) broadcast, the sums kept in registers in the order of p.
// A whole tile (Full) loads without masks: GCC kept the two masks on the stack and reloaded them
// every p. A last tile of at most 16 columns (the causal products' rows end on a multiple of 16)
// is one vector wide: two, half of its multiply-adds went to masked lanes.
template <int R, int V, bool Full>
inline void tile(const RowsProduct& t, int64_t j)
{
	const float* a = t.a;
	const float* b = t.b + j;
	const int64_t a_row = t.a_row, a_col = t.a_col, ldb = t.ldb, k = t.k;
	const __mmask16 m0 = Full ? static_cast<__mmask16>(0xFFFF) : first_lanes(t.cols - j);
	const __mmask16 m1 = Full ? static_cast<__mmask16>(0xFFFF) : first_lanes(t.cols - j - 16);
	// The row loops unrolled, so that the accumulators live in registers (GCC at -O2 kept them
	// in memory otherwise, at a third of the speed).
	__m512 acc[R][V];
#pragma GCC unroll 8
	for (int r = 0; r < R; ++r)
		for (int v = 0; v < V; ++v)
			acc[r][v] = _mm512_setzero_ps();
	for (int64_t p = 0; p < k; ++p) {
		const __m512 b0 = Full ? _mm512_loadu_ps(b + p * ldb) : _mm512_maskz_loadu_ps(m0, b + p * ldb);
		__m512 b1 = b0;
		if constexpr (V == 2)
			b1 = Full ? _mm512_loadu_ps(b + p * ldb + 16) : _mm512_maskz_loadu_ps(m1, b + p * ldb + 16);
#pragma GCC unroll 8
		for (int r = 0; r < R; ++r) {
			const __m512 x = _mm512_set1_ps(a[r * a_row + p * a_col]);
			acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
			if constexpr (V == 2)
				acc[r][V - 1] = _mm512_fmadd_ps(x, b1, acc[r][V - 1]);
		}
	}
	float* c = t.c + j;
#pragma GCC unroll 8
	for (int r = 0; r < R; ++r) {
		_mm512_mask_storeu_ps(c + r * t.ldc, m0, acc[r][0]);
		if constexpr (V == 2)
			_mm512_mask_storeu_ps(c + r * t.ldc + 16, m1, acc[r][V - 1]);
	}
}

template <int V, bool Full>
void tile_of_rows_wide(const RowsProduct& t, int64_t j)
{
	switch (t.rows) {
	case 8: tile<8, V, Full>(t, j); break;
	case 7: tile<7, V, Full>(t, j); break;
	case 6: tile<6, V, Full>(t, j); break;
	case 5: tile<5, V, Full>(t, j); break;
	case 4: tile<4, V, Full>(t, j); break;
	case 3: tile<3, V, Full>(t, j); break;
	case 2: tile<2, V, Full>(t, j); break;
	default: tile<1, V, Full>(t, j); break;
	}
}

// Columns [j, j + 32) for any number of rows up to 8.
template <bool Full>
void tile_of_rows(const RowsProduct& t, int64_t j)
{
	if (!Full && t.cols - j <= 16)
		tile_of_rows_wide<1, false>(t, j);
	else
		tile_of_rows_wide<2, Full>(t, j);
}

// The whole product, 32 columns at a time.
void rows_product(const RowsProduct& t)
{
	for (int64_t j = 0; j < t.cols; j += tile_cols) {
		if (j + tile_cols <= t.cols)
			tile_of_rows<true>(t, j);
		else
			tile_of_rows<false>(t, j);
	}
}

// Lane l += lane l + width for width 8, 4, 2, 1, lane_sum's order, in registers: stored to the
// stack after a scalar add to lane 0 and read back as vectors, the fold waited on a failed store
// forwarding (a quarter of attention_forward_f32's own time in perf annotate).
inline float fold16(__m512 acc)
{
	const __m256 low = _mm512_castps512_ps256(acc);
	const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
	const __m256 eight = _mm256_add_ps(low, high);
	const __m128 four = _mm_add_ps(_mm256_castps256_ps128(eight), _mm256_extractf128_ps(eight, 1));
	const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
	return _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
}

// The sum of x[0 .. n) (of x[j] y[j] with y) in sixteen lanes, as vector_math.h's lane_sum (whose
// instances are compiled for the default target, and would call a lambda from here per element).
// The lanes in one register: GCC kept them as sixteen scalars, a load and a multiply-add each.
inline float sum16(const float* x, const float* y, int64_t n)
{
	constexpr int64_t lanes = 16;
	__m512 acc = _mm512_setzero_ps();
	int64_t j = 0;
	if (y != nullptr)
		for (; j + lanes <= n; j += lanes)
			acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + j), _mm512_loadu_ps(y + j), acc);
	else
		for (; j + lanes <= n; j += lanes)
			acc = _mm512_add_ps(acc, _mm512_loadu_ps(x + j));
	float first = _mm512_cvtss_f32(acc);
	for (; j < n; ++j)
		first += y != nullptr ? x[j] * y[j] : x[j];
	return fold16(_mm512_mask_mov_ps(acc, 1, _mm512_set1_ps(first)));
}

// The maximum of row[0 .. n) in sixteen lanes (one running maximum waits on each comparison).
// _mm512_max_ps(r, m) is std::max(m, r): r where r > m, else m (a NaN in r leaves m).
inline float lane_max(const float* row, int64_t n)
{
	constexpr int64_t lanes = 16;
	__m512 acc = _mm512_set1_ps(row[0]);
	int64_t j = 0;
	for (; j + lanes <= n; j += lanes)
		acc = _mm512_max_ps(_mm512_loadu_ps(row + j), acc);
	alignas(64) float m[lanes];
	_mm512_store_ps(m, acc);
	for (; j < n; ++j)
		m[0] = std::max(m[0], row[j]);
	return *std::max_element(m, m + lanes);
}

// One head's matrices: element (i, e) of q, k, v, dq, dk, dv at [i * ld + e], of y and dy at
// [i * ldy + e]; its probabilities and their gradient [t, t].
struct Head {
	const float *q, *k, *v;
	int64_t ld;
	int64_t t, d;
};

// A 16 x 16 block of m (rows ld apart) transposed into out (rows ldo apart), in registers: the
// rows' pairs interleaved, then pairs of pairs, then 128-bit lanes twice.
inline void transpose16(const float* m, int64_t ld, float* out, int64_t ldo)
{
	__m512 r[16], t[16];
#pragma GCC unroll 16
	for (int i = 0; i < 16; ++i)
		r[i] = _mm512_loadu_ps(m + i * ld);
#pragma GCC unroll 8
	for (int i = 0; i < 16; i += 2) {
		t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
		t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
	}
#pragma GCC unroll 4
	for (int i = 0; i < 16; i += 4) {
		r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
		r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
		r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
		r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
	}
#pragma GCC unroll 4
	for (int i = 0; i < 4; ++i) {
		t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
		t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
		t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
		t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
	}
#pragma GCC unroll 8
	for (int i = 0; i < 8; ++i) {
		r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
		r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
	}
#pragma GCC unroll 16
	for (int i = 0; i < 16; ++i)
		_mm512_storeu_ps(out + i * ldo, r[i]);
}

// m^T into out [d, t], so that the products against keys or values read rows of length t. By
// 16 x 16 blocks in registers: element by element, the loads of a head's rows (3 KiB apart) took
// half of each pass's own time, one float at a time; whole rows keep many lines in flight.
void transpose_into(const float* m, int64_t ld, int64_t t, int64_t d, float* out)
{
	const int64_t t16 = t / 16 * 16, d16 = d / 16 * 16;
	for (int64_t i = 0; i < t16; i += 16)
		for (int64_t e = 0; e < d16; e += 16)
			transpose16(m + i * ld + e, ld, out + e * t + i, t);
	// The edges, where t or d is not a multiple of 16, element by element.
	for (int64_t i = 0; i < t; ++i)
		for (int64_t e = i < t16 ? d16 : 0; e < d; ++e)
			out[e * t + i] = m[i * ld + e];
}

// m's rows [t, d] into out, d apart. A head's rows lie ld apart in the projection's output (3 KiB
// at the default GPT, dy's 1 KiB): read as a product's b rows there, they fall into 4 of the L1
// cache's 64 sets, which hold 12 lines each, and every tile read its rows again from L2. Packed,
// the 32 KiB spread over every set and stay.
// A call to memcpy per row: what GCC made of a loop of vector moves anyway, and faster than those
// moves forced (`step_profile`, Zen 5: 0.65 ms a step against 1.25; the loads wait for memory).
void copy_rows(const float* m, int64_t ld, int64_t t, int64_t d, float* out)
{
	for (int64_t i = 0; i < t; ++i)
		std::memcpy(out + i * d, m + i * ld, static_cast<size_t>(d) * sizeof(float));
}

// n rounded up to whole vectors of 16, at most t.
int64_t padded_to_vectors(int64_t n, int64_t t)
{
	return std::min(t, (n + 15) / 16 * 16);
}

// c = a b^T for each tile of 8 rows of a, over the columns up to that tile's last row (padded to
// whole vectors, which cost the tile nothing): the causal products (scores, and their gradient
// dy v^T). bt is b transposed, [d, t].
void causal_rows(const Head& h, const float* a, int64_t lda, const float* bt, float* c)
{
	for (int64_t i0 = 0; i0 < h.t; i0 += tile_rows) {
		const int64_t rows = std::min(tile_rows, h.t - i0);
		rows_product({rows, a + i0 * lda, lda, 1, bt, h.t, h.d, c + i0 * h.t, h.t, padded_to_vectors(i0 + rows, h.t)});
	}
}

// out = p b for p [t, t] (0 above the diagonal): each tile of rows reads b's rows up to its last.
void lower_times(const Head& h, const float* p, const float* b, int64_t ldb, float* out, int64_t ldo)
{
	for (int64_t i0 = 0; i0 < h.t; i0 += tile_rows) {
		const int64_t rows = std::min(tile_rows, h.t - i0);
		rows_product({rows, p + i0 * h.t, h.t, 1, b, ldb, i0 + rows, out + i0 * ldo, ldo, h.d});
	}
}

// out = p^T b for p [t, t] (0 above the diagonal): row j of out reads rows j.. of p and b.
void lower_transposed_times(const Head& h, const float* p, const float* b, int64_t ldb, float* out,
					 int64_t ldo)
{
	for (int64_t j0 = 0; j0 < h.t; j0 += tile_rows) {
		const int64_t rows = std::min(tile_rows, h.t - j0);
		rows_product({rows, p + j0 * h.t + j0, 1, h.t, b + j0 * ldb, ldb, h.t - j0, out + j0 * ldo, ldo, h.d});
	}
}

// The end of the tile of rows that row i belongs to: the products read a row's columns up to it,
// so those past the diagonal must hold 0 (the columns after it are never read).
int64_t tile_end(int64_t i, int64_t t)
{
	return std::min(t, (i / tile_rows + 1) * tile_rows);
}

// Row i of the scores in place: probabilities over keys 0..i (`seen`), then 0 to the row's end.
// These kernels read only up to tile_end, but the default attention's backward reads whole
// blocks of 32: with 0 everywhere above the diagonal, as the default forward leaves it, either
// backward may follow either forward. The exponentials run over `padded` >= seen columns, whole
// vectors (the tile computed those scores too, finite numbers, the exponential clamped; they are
// dropped).
void softmax_row(float* row, int64_t seen, int64_t padded, int64_t t, float scale, float* e)
{
	const float top = lane_max(row, seen);
	exp_shifted_f32(row, top, scale, e, padded);
	const float inv = 1.0f / sum16(e, nullptr, seen);
	for (int64_t j = 0; j < seen; ++j)
		row[j] = e[j] * inv;
	std::fill(row + seen, row + t, 0.0f);
}

// Row i of dP in place: dS = scale p (dP - sum_j p dP) over keys 0..i, then 0 up to tile_end.
void softmax_grad_row(const float* p, float* dp, int64_t seen, int64_t t, float scale)
{
	const float dot = sum16(p, dp, seen);
	for (int64_t j = 0; j < seen; ++j)
		dp[j] = scale * p[j] * (dp[j] - dot);
	std::fill(dp + seen, dp + tile_end(seen - 1, t), 0.0f);
}

Head head_of(const AttentionShape& s, const float* qkv, int64_t item)
{
	const int64_t width = s.heads * s.d, b = item / s.heads, hd = item % s.heads;
	const float* q = qkv + b * s.time * 3 * width + hd * s.d;
	return {q, q + width, q + 2 * width, 3 * width, s.time, s.d};
}

// The next head's queries, keys and values, asked into L2 a row at a time while this head
// computes: its rows lie 3 KiB apart at the default GPT, a pattern the hardware prefetchers leave
// alone, and the loads of a cold head took a third of the backward pass. A row per softmax row
// spreads the requests over the head (all at once, they queue behind each other). Asking for dy's
// and the probabilities' rows as well ran no faster.
struct Upcoming {
	Head head{};
	bool any = false;

	void row(int64_t i) const
	{
		if (!any)
			return;
		for (const float* m : {head.q, head.k, head.v})
			for (int64_t e = 0; e < head.d; e += 16)
				_mm_prefetch(reinterpret_cast<const char*>(m + i * head.ld + e), _MM_HINT_T1);
	}
};

// The head after `item`, if any.
Upcoming upcoming(const AttentionShape& s, const float* qkv, int64_t item)
{
	return item + 1 < s.batch * s.heads ? Upcoming{head_of(s, qkv, item + 1), true} : Upcoming{};
}

} // namespace

void attention_forward_f32(const AttentionShape& s, const float* qkv, float* probs, float* y)
{
	const int64_t width = s.heads * s.d;
	const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
	const size_t matrix = static_cast<size_t>(s.d * s.time);
	std::vector<float> kt(matrix), v(matrix), e(static_cast<size_t>(s.time));
	for (int64_t item = 0; item < s.batch * s.heads; ++item) {
		const Head h = head_of(s, qkv, item);
		const Upcoming next = upcoming(s, qkv, item);
		float* p = probs + item * s.time * s.time;
		float* out = y + (item / s.heads) * s.time * width + (item % s.heads) * s.d;
		transpose_into(h.k, h.ld, h.t, h.d, kt.data());
		copy_rows(h.v, h.ld, h.t, h.d, v.data());
		causal_rows(h, h.q, h.ld, kt.data(), p);
		for (int64_t i = 0; i < h.t; ++i) {
			next.row(i);
			softmax_row(p + i * h.t, i + 1, padded_to_vectors(i + 1, h.t), h.t, scale, e.data());
		}
		lower_times(h, p, v.data(), h.d, out, width);
	}
}

void attention_backward_f32(const AttentionShape& s, const float* qkv, const float* probs, const float* dy,
			    float* dqkv)
{
	const int64_t width = s.heads * s.d;
	const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
	// One head's dS at a time, in a buffer that stays in cache (64 KiB at T = 128): written to
	// dprobs, each head's would go out to memory and come back.
	const size_t matrix = static_cast<size_t>(s.d * s.time);
	std::vector<float> vt(matrix), q(matrix), k(matrix), g(matrix), ds(static_cast<size_t>(s.time * s.time));
	for (int64_t item = 0; item < s.batch * s.heads; ++item) {
		const Head h = head_of(s, qkv, item);
		const Upcoming next = upcoming(s, qkv, item);
		const float* p = probs + item * s.time * s.time;
		const int64_t offset = (item / s.heads) * s.time * 3 * width + (item % s.heads) * s.d;
		float *dq = dqkv + offset, *dk = dq + width, *dv = dq + 2 * width;
		// dP = dy v^T, then through the softmax in place; dv = P^T dy; dq = dS k; dk = dS^T q.
		transpose_into(h.v, h.ld, h.t, h.d, vt.data());
		copy_rows(dy + (item / s.heads) * s.time * width + (item % s.heads) * s.d, width, h.t, h.d, g.data());
		copy_rows(h.k, h.ld, h.t, h.d, k.data());
		copy_rows(h.q, h.ld, h.t, h.d, q.data());
		causal_rows(h, g.data(), h.d, vt.data(), ds.data());
		for (int64_t i = 0; i < h.t; ++i) {
			next.row(i);
			softmax_grad_row(p + i * h.t, ds.data() + i * h.t, i + 1, h.t, scale);
		}
		lower_transposed_times(h, p, g.data(), h.d, dv, h.ld);
		lower_times(h, ds.data(), k.data(), h.d, dq, h.ld);
		lower_transposed_times(h, ds.data(), q.data(), h.d, dk, h.ld);
	}
}

#pragma GCC pop_options

#else // no kernels in this build: attention_f32_available() says so, and nothing calls them

bool attention_f32_available()
{
	return false;
}

void attention_forward_f32(const AttentionShape&, const float*, float*, float*)
{
	throw Error("the f32 attention kernels are not in this build (it was not compiled by GCC for x86-64)");
}

void attention_backward_f32(const AttentionShape&, const float*, const float*, const float*, float*)
{
	throw Error("the f32 attention kernels are not in this build (it was not compiled by GCC for x86-64)");
}

#endif

} // namespace tower
