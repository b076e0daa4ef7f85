// The unfused peer's second pass: GELU (tanh form) over the GEMM output,
// vectorized with the same polynomial sinew's fused store uses, so that
// fused versus unfused compares memory passes, not math libraries.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "gemm_peers.h"
#include "sinew/core/thread_pool.h"
#include "sinew/kernels/cpu_features.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx512fp16,fma,f16c")
#include "kernels/avx512/vec.h"
#include "kernels/tile/vec_math.h"

namespace sinew::bench {
namespace {

void gelu_row_avx512(float* x, int64_t n) {
  using V = kernels::avx512::F32;
  for (int64_t j = 0; j < n; j += V::W) {
    const auto m = V::first(static_cast<int>(std::min<int64_t>(V::W, n - j)));
    const auto v = V::load(x + j, m);
    const auto v3 = V::mul(V::mul(v, v), v);
    const auto u2 = V::mul(V::fma(v3, V::set1(0.044715f), v), V::set1(2.0f * 0.7978845608028654f));
    V::store(x + j, V::mul(v, kernels::tile::math::sigmoid<V>(u2)), m);
  }
}

}  // namespace
}  // namespace sinew::bench
#pragma GCC pop_options

namespace sinew::bench {

void gelu_tanh_pass(float* c, int64_t ldc, int64_t m, int64_t n, int threads) {
  const bool wide = kernels::cpu_features().avx512;
  const int64_t rows_per = std::max<int64_t>(1, (m + threads - 1) / std::max(threads, 1));
  ThreadPool::global().parallel_for((m + rows_per - 1) / rows_per, threads, [&](int64_t t, int) {
    for (int64_t i = t * rows_per; i < std::min(m, (t + 1) * rows_per); ++i) {
      float* row = c + i * ldc;
      if (wide) {
        gelu_row_avx512(row, n);
        continue;
      }
      for (int64_t j = 0; j < n; ++j) {
        const float x = row[j];
        row[j] = 0.5f * x * (1.0f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
      }
    }
  });
}

}  // namespace sinew::bench
