// tile/avx512/f32/stream_b: out[0:M, :] = alpha * A B + beta * prior for up
// to 8 rows of A (the decode shape: a few tokens times a weight) with B
// row-major f32. Each thread owns a range of columns and runs down K four
// rows of B at a time: the four row segments are sequential streams, read
// once, and the M output rows of the range (at most 8 x 22 KB at N = 11008
// on two threads) stay in L1/L2 while every group of rows is added in.
//
// Why another kernel: the direct tile kernel reads B in 64-column panels
// down its rows (256 bytes per row, then the next row), which the hardware
// prefetchers do not follow from memory. With a 180 MB weight that the
// tuner's sweep had left in L3 it timed as fast as the blocked kernels; from
// memory, as in decode, it read B at 6 GB/s, the blocked kernel (packing B
// first) at 7.5 and OpenBLAS at 12 (addmm 1 x 11008 x 4096, one thread).
//
// The epilogue runs after the sums, as a pass over the output rows while
// they are still in cache (finish_values), so there is no fused mode.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/epilogue/bound.h"
#include "kernels/tile_candidate.h"
#include "sinew/core/thread_pool.h"

namespace sinew::kernels {
namespace {

constexpr int kMaxRows = 8;
// Columns per thread at least: fewer do not pay for waking a thread.
constexpr int64_t kMinColumnsPerTask = 256;

__mmask16 low_mask(int64_t n) { return static_cast<__mmask16>(n >= 16 ? 0xffff : (1u << n) - 1u); }

// Row r of B at column j (batch b).
const float* b_row(const GemmProblem& p, int64_t b, int64_t r, int64_t j) {
  return reinterpret_cast<const float*>(p.b.byte_ptr(b, r, j));
}

// y[i][0:w] += sum over u < U of x[i][u] * B[k + u, j0:j0 + w], for U rows
// of B read side by side.
template <int M, int U>
void add_rows(const GemmProblem& p, int64_t b, int64_t k, int64_t j0, int64_t w, float* const (&y)[M],
              const float (&x)[M][4]) {
  const float* r[U];
  for (int u = 0; u < U; ++u) r[u] = b_row(p, b, k + u, j0);
  __m512 xv[M][U];
  for (int i = 0; i < M; ++i)
    for (int u = 0; u < U; ++u) xv[i][u] = _mm512_set1_ps(x[i][u]);
  // Masked throughout: the last vector of the range may be partial.
  for (int64_t j = 0; j < w; j += 16) {
    const __mmask16 t = low_mask(w - j);
    __m512 bv[U];
    for (int u = 0; u < U; ++u) bv[u] = _mm512_maskz_loadu_ps(t, r[u] + j);
    for (int i = 0; i < M; ++i) {
      __m512 acc = _mm512_maskz_loadu_ps(t, y[i] + j);
      for (int u = 0; u < U; ++u) acc = _mm512_fmadd_ps(bv[u], xv[i][u], acc);
      _mm512_mask_storeu_ps(y[i] + j, t, acc);
    }
  }
}

// The sums over K for columns [j0, j0 + w) of batch b, row i at
// dst + i * ld.
template <int M>
void sum_columns(const GemmProblem& p, int64_t b, int64_t j0, int64_t w, float* dst, int64_t ld) {
  float* y[M];
  for (int i = 0; i < M; ++i) {
    y[i] = dst + i * ld;
    std::fill(y[i], y[i] + w, 0.0f);
  }
  float x[M][4];
  auto take_x = [&](int64_t k, int rows) {
    for (int i = 0; i < M; ++i)
      for (int u = 0; u < rows; ++u) std::memcpy(&x[i][u], p.a.byte_ptr(b, i, k + u), sizeof(float));
  };
  int64_t k = 0;
  for (; k + 4 <= p.k; k += 4) {
    take_x(k, 4);
    add_rows<M, 4>(p, b, k, j0, w, y, x);
  }
  for (; k < p.k; ++k) {
    take_x(k, 1);
    add_rows<M, 1>(p, b, k, j0, w, y, x);
  }
}

// Columns [j0, j0 + w) of out = alpha * sums + beta * prior, sums' row i
// at sums + i * ld (nullptr: none, as alpha = 0 or K = 0 never read A and
// B). The prior may be out itself (mm reading out, or an addmm bias that is
// out): each element is read before it is written.
void finish_columns(const GemmProblem& p, int64_t b, int64_t j0, int64_t w, const float* sums, int64_t ld) {
  const bool prior = p.reads_prior();
  const float alpha = static_cast<float>(p.alpha), beta = static_cast<float>(p.beta);
  if (sums && alpha == 1.0f && !prior) return;  // without a prior the sums are out's
  const __m512 av = _mm512_set1_ps(alpha), bv = _mm512_set1_ps(beta);
  for (int64_t i = 0; i < p.m; ++i) {
    float* y = reinterpret_cast<float*>(p.out.byte_ptr(b, i, j0));
    for (int64_t j = 0; j < w; j += 16) {
      const __mmask16 t = low_mask(w - j);
      __m512 v = sums ? _mm512_mul_ps(_mm512_maskz_loadu_ps(t, sums + i * ld + j), av) : _mm512_setzero_ps();
      if (prior) {
        __m512 c;
        if (p.prior.cs == 1) {
          c = _mm512_maskz_loadu_ps(t, p.prior.byte_ptr(b, i, j0 + j));
        } else {
          alignas(64) float g[16] = {};
          for (int64_t l = 0; l < std::min<int64_t>(16, w - j); ++l)
            std::memcpy(&g[l], p.prior.byte_ptr(b, i, j0 + j + l), sizeof(float));
          c = _mm512_load_ps(g);
        }
        v = _mm512_fmadd_ps(c, bv, v);
      }
      _mm512_mask_storeu_ps(y + j, t, v);
    }
  }
}

class StreamBCandidate final : public Candidate {
 public:
  StreamBCandidate() : Candidate("tile", Isa::kAvx512, "tile/avx512/f32/stream_b") {}

  bool supports(const GemmProblem& p) const override {
    return p.in_dtype == DType::kF32 && p.out_dtype == DType::kF32 && p.m >= 1 && p.m <= kMaxRows &&
           (p.b.cs == 1 || p.n == 1) && (p.out.cs == 1 || p.n == 1) &&
           (!p.reads_prior() || p.prior.dtype == DType::kF32);
  }

  void run(const GemmProblem& p, EpilogueMode) const override {
    const BoundEpilogue e =
        bind_epilogue(p.epilogue, gemm_op_name(p.op), p.batch, p.m, p.n, p.op == GemmOp::kBmm, p.out_dtype);
    if (p.m == 0 || p.n == 0 || p.batch == 0) return;
    const int64_t per_task =
        std::max(kMinColumnsPerTask, (p.n + p.threads - 1) / p.threads + 15) / 16 * 16;  // whole vectors
    const int64_t tasks = (p.n + per_task - 1) / per_task;
    ThreadPool::global().parallel_for(p.batch * tasks, static_cast<int>(std::min<int64_t>(p.threads, tasks)),
                                      [&](int64_t task, int) {
                                        const int64_t b = task / tasks, j0 = task % tasks * per_task;
                                        const int64_t w = std::min(per_task, p.n - j0);
                                        if (!p.reads_ab()) return finish_columns(p, b, j0, w, nullptr, 0);
                                        // The sums go to out itself unless beta reads a prior
                                        // (which may be out).
                                        thread_local std::vector<float> scratch;
                                        float* dst = reinterpret_cast<float*>(p.out.byte_ptr(b, 0, j0));
                                        int64_t ld = p.out.rs;
                                        if (p.reads_prior()) {
                                          scratch.resize(static_cast<size_t>(p.m * w));
                                          dst = scratch.data();
                                          ld = w;
                                        }
                                        sum_columns_any(p, b, j0, w, dst, ld);
                                        finish_columns(p, b, j0, w, dst, ld);
                                      });
    if (!e.trivial()) finish_values(p, e, p.out);
  }

  std::vector<std::pair<std::string, int64_t>> params() const override {
    return {{"mr", kMaxRows}, {"nr", 16}, {"stream", 1}, {"split_n", 1}};
  }

 private:
  static void sum_columns_any(const GemmProblem& p, int64_t b, int64_t j0, int64_t w, float* dst, int64_t ld) {
    switch (p.m) {
      case 1: return sum_columns<1>(p, b, j0, w, dst, ld);
      case 2: return sum_columns<2>(p, b, j0, w, dst, ld);
      case 3: return sum_columns<3>(p, b, j0, w, dst, ld);
      case 4: return sum_columns<4>(p, b, j0, w, dst, ld);
      case 5: return sum_columns<5>(p, b, j0, w, dst, ld);
      case 6: return sum_columns<6>(p, b, j0, w, dst, ld);
      case 7: return sum_columns<7>(p, b, j0, w, dst, ld);
      default: return sum_columns<8>(p, b, j0, w, dst, ld);
    }
  }
};

}  // namespace

std::unique_ptr<Candidate> make_stream_b_candidate() { return std::make_unique<StreamBCandidate>(); }

}  // namespace sinew::kernels
