// Why LAPACK here: the team brief says not to hand-write what a Debian
// package does well, and OpenBLAS + LAPACKE are approved dependencies.
// Cuppen's divide and conquer for the tridiagonal eigenproblem (secular
// equation solver, deflation, Löwner-corrected vectors) is not one of the
// algorithms issue #6 asks sinew to implement itself; the issue allows a
// tridiagonal method for large n. sinew keeps its own tridiagonalization and
// back-transformation (eigh_isa.h); LAPACK supplies only this middle step,
// which does O(n³) work as GEMMs of the merged eigenvectors instead of the
// QL method's ~3n³ flops of plane rotations.
#include "linalg/tridiagonal_dc.h"

#include <cblas.h>
#include <fmt/format.h>
#include <lapacke.h>

#include <algorithm>
#include <vector>

#include "sinew/core/error.h"

namespace sinew::linalg::detail {
namespace {

void use_threads(int threads) {
  threads = std::max(threads, 1);
  if (openblas_get_num_threads() != threads) openblas_set_num_threads(threads);
}

template <class T, class F> int run_stedc(const char* name, F lapack, int64_t n, T* d, T* e, T* z, int64_t ldz,
                                          int threads) {
  if (n < 1) return 0;
  use_threads(threads);
  // The documented minimum for compz = 'I' (no query: a float query rounds
  // sizes above 2^24 down).
  const int64_t lwork = n > 1 ? 1 + 4 * n + n * n : 1, liwork = n > 1 ? 3 + 5 * n : 1;
  std::vector<T> work(static_cast<size_t>(lwork));
  std::vector<lapack_int> iwork(static_cast<size_t>(liwork));
  const lapack_int info =
      lapack(LAPACK_COL_MAJOR, 'I', static_cast<lapack_int>(n), d, e, z, static_cast<lapack_int>(ldz), work.data(),
             static_cast<lapack_int>(lwork), iwork.data(), static_cast<lapack_int>(liwork));
  if (info < 0)
    throw InternalError(fmt::format("eigh: LAPACK {} rejected argument {} (n {}, ldz {})", name, -info, n, ldz));
  return static_cast<int>(info);
}

}  // namespace

int stedc(int64_t n, double* d, double* e, double* z, int64_t ldz, int threads) {
  return run_stedc("dstedc", LAPACKE_dstedc_work, n, d, e, z, ldz, threads);
}

int stedc(int64_t n, float* d, float* e, float* z, int64_t ldz, int threads) {
  return run_stedc("sstedc", LAPACKE_sstedc_work, n, d, e, z, ldz, threads);
}

BlasThreadsScope::BlasThreadsScope(int threads) : saved_(openblas_get_num_threads()) { use_threads(threads); }

BlasThreadsScope::~BlasThreadsScope() { use_threads(saved_); }

}  // namespace sinew::linalg::detail
