#include <cblas.h>
#include <fmt/format.h>

#include <cstring>

#include "gemm_peers.h"

namespace sinew::bench {

std::string openblas_description() {
  return fmt::format("{} (core {})", openblas_get_config(), openblas_get_corename());
}

// OpenBLAS's DYNAMIC_ARCH build picks its kernels from the CPU's model; a VM
// whose CPUID names none (seen here, sessions 10 and 11) gets the Prescott
// kernels, and a peer several times slower than it is on the same hardware
// (4.7x at f32 1024^3). The core that the CPU's features call for then.
const char* openblas_fallback_core() {
  if (std::strcmp(openblas_get_corename(), "Prescott") != 0 || !__builtin_cpu_supports("avx2")) return nullptr;
  if (__builtin_cpu_supports("avx512bf16")) return "Cooperlake";
  return __builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell";
}

// Ratios against the fallback would flatter sinew, so the benchmarks say so
// when it is still in use (ensure_peer_bench_env forces the core otherwise).
std::string openblas_fallback_warning() {
  const char* core = openblas_fallback_core();
  if (!core) return {};
  return fmt::format(
      "warning: OpenBLAS did not recognize this CPU and runs its Prescott kernels, so it is no fair peer; "
      "set OPENBLAS_CORETYPE={} in the benchmark's environment",
      core);
}

void openblas_sgemm(int threads, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                    int64_t ldb, bool b_t, float beta, float* c, int64_t ldc) {
  if (openblas_get_num_threads() != threads) openblas_set_num_threads(threads);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, b_t ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

void openblas_sgemv(int threads, int64_t n, int64_t k, const float* w, const float* x, float* y) {
  if (openblas_get_num_threads() != threads) openblas_set_num_threads(threads);
  cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, w,
              static_cast<blasint>(k), x, 1, 0.0f, y, 1);
}

void broadcast_bias(float* c, int64_t ldc, const float* bias, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i) std::memcpy(c + i * ldc, bias, static_cast<size_t>(n) * sizeof(float));
}

}  // namespace sinew::bench
