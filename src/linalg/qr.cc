#include "sinew/linalg/qr.h"

#include <algorithm>

#include "linalg/backend.h"
#include "sinew/core/error.h"
#include "sinew/linalg/checks.h"

namespace sinew::linalg {

using detail::backend;
using detail::batch_of;
using detail::FailureLog;
using detail::matrix_arg;

void qr(const TensorView& a, const TensorView& q, const TensorView& r, const QrOptions& options) {
  check_matrix(a, "qr");
  const int64_t m = a.shape()[a.dim() - 2], n = a.shape()[a.dim() - 1], k = std::min(m, n);
  const bool complete = options.mode == QrMode::kComplete;
  const auto batch = batch_of(a);
  detail::QrJob job;
  job.a = matrix_arg(a, batch, m, n, a.dtype(), "qr", "a");
  if (options.mode != QrMode::kR) job.q = matrix_arg(q, batch, m, complete ? m : k, a.dtype(), "qr", "q");
  job.r = matrix_arg(r, batch, complete ? m : k, n, a.dtype(), "qr", "r");
  job.complete = complete;
  job.threads = detail::resolve_threads(options.threads);
  FailureLog log;
  job.log = &log;
  backend().qr(job);
  log.throw_if_any("qr", "a", batch);
}

void lstsq(const TensorView& a, const TensorView& b, const TensorView& x, const LstsqOptions& options) {
  check_matrix(a, "lstsq");
  check_matrix(b, "lstsq", "b");
  const int64_t m = a.shape()[a.dim() - 2], n = a.shape()[a.dim() - 1], k = b.shape()[b.dim() - 1];
  const auto batch = batch_of(a);
  detail::LstsqJob job;
  job.a = matrix_arg(a, batch, m, n, a.dtype(), "lstsq", "a");
  job.b = matrix_arg(b, batch, m, k, a.dtype(), "lstsq", "b");
  job.x = matrix_arg(x, batch, n, k, a.dtype(), "lstsq", "x");
  job.threads = detail::resolve_threads(options.threads);
  FailureLog log;
  job.log = &log;
  backend().lstsq(job);
  log.throw_if_any("lstsq", "a", batch);
}

}  // namespace sinew::linalg
