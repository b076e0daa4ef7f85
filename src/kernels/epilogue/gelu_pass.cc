#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/epilogue/pass.h"
#include "sinew/core/thread_pool.h"
#include "sinew/kernels/cpu_features.h"
#include "sinew/kernels/epilogue.h"

namespace sinew::kernels {

void gelu_tanh_pass(float* c, int64_t ldc, int64_t m, int64_t n, int threads) {
  const bool wide = cpu_features().avx512;
  const int64_t rows_per = std::max<int64_t>(1, (m + threads - 1) / std::max(threads, 1));
  ThreadPool::global().parallel_for((m + rows_per - 1) / rows_per, threads, [&](int64_t t, int) {
    for (int64_t i = t * rows_per; i < std::min(m, (t + 1) * rows_per); ++i) {
      float* row = c + i * ldc;
      if (wide) {
        avx512::gelu_tanh_row(row, n);
        continue;
      }
      for (int64_t j = 0; j < n; ++j) {
        const float x = row[j];
        row[j] = 0.5f * x * (1.0f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
      }
    }
  });
}

}  // namespace sinew::kernels
