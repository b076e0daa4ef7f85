// The per-ISA implementations of the linear-algebra routines. Every routine
// is compiled twice from the same templates (*_generic.cc for any x86-64,
// *_avx512.cc under `#pragma GCC target`), each copy in its own namespace so
// that the two never meet at link time; backend() picks one at run time.
#pragma once

#include <algorithm>
#include <cstdint>

#include "linalg/operand.h"
#include "sinew/core/thread_pool.h"

namespace sinew::linalg::detail {

struct CholeskyJob {
  MatArg a, out;
  bool upper = false;
  int threads = 1;
  FailureLog* log = nullptr;
};

// Solves op(a) x = b for a triangular, left side only (the front end turns a
// right-side solve into a left one on the transposes).
struct TrsmJob {
  MatArg a, b, x;
  bool upper = false, unit = false;
  bool right = false;  // a, b, x are the transposes of the caller's (x a = b)
  int threads = 1;
  FailureLog* log = nullptr;
};

struct CholSolveJob {
  MatArg factor, b, x;
  bool upper = false;
  int threads = 1;
  FailureLog* log = nullptr;
};

struct QrJob {
  MatArg a, q, r;  // q.present is false in mode r
  bool complete = false;
  int threads = 1;
  FailureLog* log = nullptr;
};

struct LstsqJob {
  MatArg a, b, x;
  int threads = 1;
  FailureLog* log = nullptr;
};

enum class EighAlgo { kAuto, kJacobi, kTridiagonal };

struct EighJob {
  MatArg a, w, v;  // v.present is false for eigenvalues only
  bool upper = false;
  EighAlgo algo = EighAlgo::kAuto;
  int threads = 1;
  FailureLog* log = nullptr;
};

struct SvdJob {
  MatArg a, u, s, vh;  // u and vh are both absent for values only
  bool full = false;
  int threads = 1;
  FailureLog* log = nullptr;
};

struct Backend {
  const char* name;
  void (*cholesky)(const CholeskyJob&);
  void (*trsm)(const TrsmJob&);
  void (*cholesky_solve)(const CholSolveJob&);
  void (*qr)(const QrJob&);
  void (*lstsq)(const LstsqJob&);
  void (*eigh)(const EighJob&);
  void (*svd)(const SvdJob&);
};

#define SINEW_LINALG_DECLARE_ISA(isa)          \
  namespace isa {                              \
  void cholesky(const CholeskyJob&);           \
  void trsm(const TrsmJob&);                   \
  void cholesky_solve(const CholSolveJob&);    \
  void qr(const QrJob&);                       \
  void lstsq(const LstsqJob&);                 \
  void eigh(const EighJob&);                   \
  void svd(const SvdJob&);                     \
  }
SINEW_LINALG_DECLARE_ISA(generic)
SINEW_LINALG_DECLARE_ISA(avx512)
#undef SINEW_LINALG_DECLARE_ISA

// SINEW_LINALG_ISA=generic|avx512 pins one; by default AVX-512 (F, DQ, VL,
// BW) when the CPU has it.
const Backend& backend();
// For tests: "generic", "avx512" (throws InvalidArgument when the CPU lacks
// it) or "" (the default choice again).
void force_backend(const std::string& name);
bool cpu_has_avx512();
// SINEW_LINALG_GEMM_FAMILY: the kernels::mm family every blocked update asks
// for ("" lets the GEMM autotuner choose).
const std::string& gemm_family();

// SINEW_LINALG_FORK_JOIN_FLOPS: the work (flops) below which one step of a
// single-matrix routine (a round of Jacobi pairs, a symmetric matrix-vector
// product, a pivoting step) is not split across threads: each split is a
// fork-join of the thread pool, and on a busy machine a descheduled worker
// stalls it.
int64_t fork_join_flops();

// f(lo', hi') over [lo, hi) cut into up to `threads` equal ranges, one per
// pool task, when the step's work (`flops`) is worth a fork-join; else
// f(lo, hi) on this thread.
template <class F> void split_columns(int64_t lo, int64_t hi, int threads, int64_t flops, F&& f) {
  const int64_t cols = hi - lo;
  if (threads > 1 && cols >= 2 && flops >= fork_join_flops()) {
    const int64_t tasks = std::min<int64_t>(threads, cols);
    ThreadPool::global().parallel_for(tasks, threads, [&](int64_t t, int) {
      f(lo + cols * t / tasks, lo + cols * (t + 1) / tasks);
    });
  } else {
    f(lo, hi);
  }
}

// C (m x n, column-major with leading dimension ldc) = alpha op(A) op(B) +
// beta C through kernels::mm, op(X) = Xᵀ when tX. Defined here, outside the
// ISA copies, so that no code of another layer is compiled for their target.
void mm_colmajor(DType dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
                 int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc, int threads);

}  // namespace sinew::linalg::detail
