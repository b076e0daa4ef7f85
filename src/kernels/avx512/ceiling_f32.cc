// The AVX-512 side of kernels/ceiling.h: the 12x32 f32 tile (the autotuner's
// usual pick here) multiplying packed panels that stay in L1.
#include <vector>

#include "kernels/avx512/vec.h"
#include "kernels/tile/micro.h"

namespace sinew::kernels::tile {

double avx512_f32_l1_flops(int64_t reps) {
  using K = FmaKernel<avx512::F32, 12, 2>;
  constexpr int64_t kSteps = 256;  // 12 KB of A and 32 KB of B: both fit a 48 KB L1
  std::vector<float> a(K::kMR * kSteps, 0.001f), b(K::kNR * kSteps, 0.002f);
  alignas(64) float tile[K::kMR][K::kNR];
  for (int64_t r = 0; r < reps; ++r) {
    K::multiply<true, BMode::kPacked>(kSteps, a.data(), 0, 0, K::kMR, b.data(), 0, K::kNR, tile);
    // The tile escapes, so the compiler keeps every accumulator.
    asm volatile("" : : "r"(&tile[0][0]) : "memory");
  }
  return 2.0 * K::kMR * K::kNR * kSteps * static_cast<double>(reps);
}

}  // namespace sinew::kernels::tile
