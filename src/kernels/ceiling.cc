#include "sinew/kernels/ceiling.h"

#include "sinew/kernels/cpu_features.h"

namespace sinew::kernels {
namespace tile {
double avx512_f32_l1_flops(int64_t reps);  // avx512/ceiling_f32.cc, built with the AVX-512 flags
}

double microkernel_f32_l1_flops(int64_t reps) {
  return best_isa() == Isa::kAvx512 ? tile::avx512_f32_l1_flops(reps) : 0.0;
}

}  // namespace sinew::kernels
