// The unfused peer's second pass: GELU (tanh form) over the GEMM output,
// with the polynomial sinew's fused store uses (kernels::gelu_tanh_pass), so
// that fused versus unfused compares memory passes, not math libraries.
#include <cstdint>

#include "gemm_peers.h"
#include "sinew/kernels/epilogue.h"

namespace sinew::bench {

void gelu_tanh_pass(float* c, int64_t ldc, int64_t m, int64_t n, int threads) {
  kernels::gelu_tanh_pass(c, ldc, m, n, threads);
}

}  // namespace sinew::bench
