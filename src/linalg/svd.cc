#include "sinew/linalg/svd.h"

#include <algorithm>

#include "linalg/backend.h"
#include "sinew/core/error.h"
#include "sinew/linalg/checks.h"

namespace sinew::linalg {
namespace {

void run(const char* routine, const TensorView& a, const TensorView* u, const TensorView& s, const TensorView* vh,
         const SvdOptions& options) {
  check_matrix(a, routine);
  const int64_t m = a.shape()[a.dim() - 2], n = a.shape()[a.dim() - 1], k = std::min(m, n);
  const bool full = options.full_matrices;
  const auto batch = detail::batch_of(a);
  detail::SvdJob job;
  job.a = detail::matrix_arg(a, batch, m, n, a.dtype(), routine, "a");
  job.s = detail::vector_arg(s, batch, k, a.dtype(), routine, "s");
  if (u) {
    job.u = detail::matrix_arg(*u, batch, m, full ? m : k, a.dtype(), routine, "u");
    job.vh = detail::matrix_arg(*vh, batch, full ? n : k, n, a.dtype(), routine, "vh");
  }
  job.full = full;
  job.threads = detail::resolve_threads(options.threads);
  detail::FailureLog log;
  job.log = &log;
  detail::backend().svd(job);
  log.throw_if_any(routine, "a", batch);
}

}  // namespace

void svd(const TensorView& a, const TensorView& u, const TensorView& s, const TensorView& vh,
         const SvdOptions& options) {
  run("svd", a, &u, s, &vh, options);
}

void svdvals(const TensorView& a, const TensorView& s, const SvdOptions& options) {
  run("svdvals", a, nullptr, s, nullptr, options);
}

}  // namespace sinew::linalg
