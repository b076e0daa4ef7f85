#include "sinew/linalg/cholesky.h"

#include "linalg/backend.h"
#include "sinew/core/error.h"
#include "sinew/linalg/checks.h"

namespace sinew::linalg {

using detail::backend;
using detail::batch_of;
using detail::FailureLog;
using detail::matrix_arg;

void cholesky(const TensorView& a, const TensorView& out, const CholeskyOptions& options) {
  const int64_t n = check_square(a, "cholesky");
  const auto batch = batch_of(a);
  detail::CholeskyJob job;
  job.a = matrix_arg(a, batch, n, n, a.dtype(), "cholesky", "a");
  job.out = matrix_arg(out, batch, n, n, a.dtype(), "cholesky", "out");
  job.upper = options.upper;
  job.threads = detail::resolve_threads(options.threads);
  FailureLog log;
  job.log = &log;
  backend().cholesky(job);
  log.throw_if_any("cholesky", "a", batch);
}

void solve_triangular(const TensorView& a, const TensorView& b, const TensorView& x,
                      const TriangularSolveOptions& options) {
  const int64_t n = check_square(a, "solve_triangular");
  check_matrix(b, "solve_triangular", "b");
  const auto batch = batch_of(a);
  const int64_t k = options.left ? b.shape()[b.dim() - 1] : b.shape()[b.dim() - 2];
  const int64_t rows = options.left ? n : k, cols = options.left ? k : n;
  detail::TrsmJob job;
  job.a = matrix_arg(a, batch, n, n, a.dtype(), "solve_triangular", "a");
  job.b = matrix_arg(b, batch, rows, cols, a.dtype(), "solve_triangular", "b");
  job.x = matrix_arg(x, batch, rows, cols, a.dtype(), "solve_triangular", "x");
  job.upper = options.upper;
  if (!options.left) {  // x a = b  <=>  aᵀ xᵀ = bᵀ
    job.a = job.a.transposed();
    job.b = job.b.transposed();
    job.x = job.x.transposed();
    job.upper = !job.upper;
    job.right = true;
  }
  job.unit = options.unit_diagonal;
  job.threads = detail::resolve_threads(options.threads);
  FailureLog log;
  job.log = &log;
  backend().trsm(job);
  log.throw_if_any("solve_triangular", "a", batch);
}

void cholesky_solve(const TensorView& factor, const TensorView& b, const TensorView& x,
                    const CholeskyOptions& options) {
  const int64_t n = check_square(factor, "cholesky_solve", "factor");
  check_matrix(b, "cholesky_solve", "b");
  const auto batch = batch_of(factor);
  const int64_t k = b.shape()[b.dim() - 1];
  detail::CholSolveJob job;
  job.factor = matrix_arg(factor, batch, n, n, factor.dtype(), "cholesky_solve", "factor");
  job.b = matrix_arg(b, batch, n, k, factor.dtype(), "cholesky_solve", "b");
  job.x = matrix_arg(x, batch, n, k, factor.dtype(), "cholesky_solve", "x");
  job.upper = options.upper;
  job.threads = detail::resolve_threads(options.threads);
  FailureLog log;
  job.log = &log;
  backend().cholesky_solve(job);
  log.throw_if_any("cholesky_solve", "factor", batch);
}

}  // namespace sinew::linalg
