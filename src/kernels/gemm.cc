// mm / addmm / bmm: validate into a GemmProblem, then run the pinned, or
// else the default, candidate (candidate.h).
#include "sinew/kernels/gemm.h"

#include "sinew/kernels/candidate.h"
#include "sinew/kernels/gemm_problem.h"

namespace sinew::kernels {

void mm(const TensorView& a, const TensorView& b, const TensorView& out, const GemmOptions& options) {
  run_gemm(make_mm_problem(a, b, out, options), options);
}

void addmm(const TensorView& bias, const TensorView& a, const TensorView& b, const TensorView& out,
           const GemmOptions& options) {
  run_gemm(make_addmm_problem(bias, a, b, out, options), options);
}

void bmm(const TensorView& a, const TensorView& b, const TensorView& out, const GemmOptions& options) {
  run_gemm(make_bmm_problem(a, b, out, options), options);
}

}  // namespace sinew::kernels
