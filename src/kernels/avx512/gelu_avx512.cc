// GELU (tanh form) over a row with the polynomial the fused AVX-512 tile
// store uses, for a separate pass that must match the fused math.
#include <algorithm>
#include <cstdint>

#include "kernels/avx512/vec.h"
#include "kernels/epilogue/pass.h"
#include "kernels/tile/vec_math.h"

namespace sinew::kernels::avx512 {

void gelu_tanh_row(float* x, int64_t n) {
  using V = F32;
  for (int64_t j = 0; j < n; j += V::W) {
    const auto m = V::first(static_cast<int>(std::min<int64_t>(V::W, n - j)));
    const auto v = V::load(x + j, m);
    const auto v3 = V::mul(V::mul(v, v), v);
    const auto u2 = V::mul(V::fma(v3, V::set1(0.044715f), v), V::set1(2.0f * 0.7978845608028654f));
    V::store(x + j, V::mul(v, tile::math::sigmoid<V>(u2)), m);
  }
}

}  // namespace sinew::kernels::avx512
