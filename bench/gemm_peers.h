// The libraries `sinew bench gemm` runs beside sinew, called directly:
// OpenBLAS through CBLAS, BLIS through its typed API (when the CLI was built
// with libblis-dev), and the separate epilogue pass an unfused framework
// runs after the GEMM (bias, then GELU, vectorized like PyTorch's).
#pragma once

#include <cstdint>
#include <string>

namespace sinew::bench {

// "OpenBLAS 0.3.21 ... Cooperlake" (openblas_get_config() and the core).
std::string openblas_description();
// The OPENBLAS_CORETYPE for this CPU's features (Cooperlake, SkylakeX,
// Haswell) when OpenBLAS did not recognize the CPU and runs its Prescott
// (SSE3) fallback kernels; nullptr when it runs what it detected.
const char* openblas_fallback_core();
// Empty, or a warning naming that OPENBLAS_CORETYPE.
std::string openblas_fallback_warning();
// c[m,n] (row stride ldc) = a[m,k] @ (b[k,n] or, with b_t, b[n,k]^T) + beta * c.
void openblas_sgemm(int threads, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                    int64_t ldb, bool b_t, float beta, float* c, int64_t ldc);
// y[n] = w[n,k] @ x[k].
void openblas_sgemv(int threads, int64_t n, int64_t k, const float* w, const float* x, float* y);

// Whether the CLI was built with BLIS, and which (version and kernel set).
bool blis_available();
std::string blis_description();
// c = a[m,k] @ b[k,n], row-major with the given row strides.
void blis_sgemm(int threads, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                int64_t ldb, float* c, int64_t ldc);

// c[i, :] = bias (the first half of an unfused addmm).
void broadcast_bias(float* c, int64_t ldc, const float* bias, int64_t m, int64_t n);
// c = gelu_tanh(c) in place over `threads` (the second pass).
void gelu_tanh_pass(float* c, int64_t ldc, int64_t m, int64_t n, int threads);

}  // namespace sinew::bench
