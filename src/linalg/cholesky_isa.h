// One ISA's copy of the Cholesky family (see backend.h): included by
// cholesky_generic.cc and cholesky_avx512.cc.
#include "linalg/isa_begin.h"
#include "linalg/simd.h"
#include "linalg/dense.h"
#include "linalg/compact.h"
#include "linalg/cholesky_impl.h"

namespace sinew::linalg::detail::SINEW_LINALG_ISA {

void cholesky(const CholeskyJob& job) {
  if (job.a.dtype == DType::kF64) cholesky_job<double>(job);
  else cholesky_job<float>(job);
}

void trsm(const TrsmJob& job) {
  if (job.a.dtype == DType::kF64) trsm_job<double>(job);
  else trsm_job<float>(job);
}

void cholesky_solve(const CholSolveJob& job) {
  if (job.factor.dtype == DType::kF64) cholesky_solve_job<double>(job);
  else cholesky_solve_job<float>(job);
}

}  // namespace sinew::linalg::detail::SINEW_LINALG_ISA

#include "linalg/isa_end.h"
