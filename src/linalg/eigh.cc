#include "sinew/linalg/eigh.h"

#include "linalg/backend.h"
#include "sinew/core/error.h"
#include "sinew/linalg/checks.h"

namespace sinew::linalg {
namespace {

void run(const char* routine, const TensorView& a, const TensorView& w, const TensorView* v,
         const EighOptions& options) {
  const int64_t n = check_square(a, routine);
  const auto batch = detail::batch_of(a);
  detail::EighJob job;
  job.a = detail::matrix_arg(a, batch, n, n, a.dtype(), routine, "a");
  job.w = detail::vector_arg(w, batch, n, a.dtype(), routine, "w");
  if (v) job.v = detail::matrix_arg(*v, batch, n, n, a.dtype(), routine, "v");
  job.upper = options.upper;
  job.algo = options.method == EighMethod::kJacobi        ? detail::EighAlgo::kJacobi
             : options.method == EighMethod::kTridiagonal ? detail::EighAlgo::kTridiagonal
                                                          : detail::EighAlgo::kAuto;
  job.threads = detail::resolve_threads(options.threads);
  detail::FailureLog log;
  job.log = &log;
  detail::backend().eigh(job);
  log.throw_if_any(routine, "a", batch);
}

}  // namespace

void eigh(const TensorView& a, const TensorView& w, const TensorView& v, const EighOptions& options) {
  run("eigh", a, w, &v, options);
}

void eigvalsh(const TensorView& a, const TensorView& w, const EighOptions& options) {
  run("eigvalsh", a, w, nullptr, options);
}

}  // namespace sinew::linalg
