#include "linalg/backend.h"

#include <atomic>

#include "sinew/core/env.h"
#include "sinew/core/error.h"
#include "sinew/kernels/gemm.h"

namespace sinew::linalg::detail {
namespace {

inline const EnvParam<std::string> kIsa{"SINEW_LINALG_ISA", "",
                                        "linalg code path: generic or avx512 (default: the best the CPU runs)"};

#define SINEW_LINALG_TABLE(isa) \
  Backend { #isa, isa::cholesky, isa::trsm, isa::cholesky_solve, isa::qr, isa::lstsq, isa::eigh, isa::svd }
const Backend kGeneric = SINEW_LINALG_TABLE(generic);
const Backend kAvx512 = SINEW_LINALG_TABLE(avx512);
#undef SINEW_LINALG_TABLE

const Backend* choose(const std::string& name) {
  if (name == "generic") return &kGeneric;
  if (name == "avx512") {
    if (!cpu_has_avx512())
      throw InvalidArgument::make("SINEW_LINALG_ISA", name, "generic (this CPU lacks AVX-512 F/DQ/VL/BW)");
    return &kAvx512;
  }
  if (name.empty()) return cpu_has_avx512() ? &kAvx512 : &kGeneric;
  throw InvalidArgument::make("SINEW_LINALG_ISA", name, "generic or avx512");
}

inline const EnvParam<std::string> kGemmFamily{
    "SINEW_LINALG_GEMM_FAMILY", "", "kernels::mm family for linalg's blocked updates (default: autotuned)"};

inline const EnvParam<int64_t> kForkJoinFlops{
    "SINEW_LINALG_FORK_JOIN_FLOPS", 4000000,
    "flops below which one step of a single-matrix linalg routine runs on one thread"};

std::atomic<const Backend*> g_forced{nullptr};

}  // namespace

bool cpu_has_avx512() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("fma");
  return ok;
}

const Backend& backend() {
  if (const Backend* f = g_forced.load(std::memory_order_acquire)) return *f;
  static const Backend* chosen = choose(kIsa.get());
  return *chosen;
}

const std::string& gemm_family() { return kGemmFamily.get(); }

int64_t fork_join_flops() { return kForkJoinFlops.get(); }

void mm_colmajor(DType dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
                 int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc, int threads) {
  kernels::GemmOptions o;
  o.alpha = alpha;
  o.beta = beta;
  o.threads = threads;
  o.family = gemm_family();
  void* pa = const_cast<void*>(a);
  void* pb = const_cast<void*>(b);
  const TensorView va = ta ? TensorView(pa, dtype, {m, k}, {lda, 1}) : TensorView(pa, dtype, {m, k}, {1, lda});
  const TensorView vb = tb ? TensorView(pb, dtype, {k, n}, {ldb, 1}) : TensorView(pb, dtype, {k, n}, {1, ldb});
  kernels::mm(va, vb, TensorView(c, dtype, {m, n}, {1, ldc}), o);
}

void force_backend(const std::string& name) {
  g_forced.store(name.empty() ? nullptr : choose(name), std::memory_order_release);
}

}  // namespace sinew::linalg::detail
