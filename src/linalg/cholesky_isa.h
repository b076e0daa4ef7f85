// One ISA's copy of the Cholesky family (see backend.h): included by
// cholesky_generic.cc and cholesky_avx512.cc.
#include "linalg/isa_begin.h"
#include "linalg/simd.h"
#include "linalg/dense.h"
#include "linalg/compact.h"
#include "linalg/cholesky_impl.h"
#include "linalg/cholesky_compact_impl.h"
#include "linalg/cholesky_l1_impl.h"

namespace sinew::linalg::detail::SINEW_LINALG_ISA {

template <class T> void cholesky_job(const CholeskyJob& job) {
  const int64_t n = job.a.rows, count = job.a.batch();
  if (n == 0 || count == 0) return;
  using V = Vec<T>;
  constexpr int W = V::W;
  // Both read as lower: the transposes of upper operands.
  const MatArg src = job.upper ? job.a.transposed() : job.a, dst = job.upper ? job.out.transposed() : job.out;
  if (n <= kCompactCholMax && count >= 2) {
    // A column-contiguous output: runs of consecutive matrices factored
    // where they lie, two at a time (cholesky_in_l1); else the compact kernel.
    bool direct = true;
    for (int64_t b = 0; b < count && direct; ++b) direct = factors_in_out<T>(src, dst, b, n);
    if (direct) {
      const int64_t tasks = std::max<int64_t>(std::min<int64_t>(count, job.threads), (count + kL1Run - 1) / kL1Run);
      ThreadPool::global().parallel_for(tasks, job.threads, [&](int64_t t, int) {
        cholesky_in_l1<T>(job, src, dst, count * t / tasks, count * (t + 1) / tasks);
      });
      return;
    }
    // Tasks are runs of about kCompactRun consecutive groups, so that each
    // thread reads and writes memory in order.
    const int64_t groups = (count + W - 1) / W;
    const int64_t tasks =
        std::max<int64_t>(std::min<int64_t>(groups, job.threads), (groups + kCompactRun - 1) / kCompactRun);
    const auto group_size = [&](int64_t g) { return static_cast<int>(std::min<int64_t>(W, count - g * W)); };
    CompactMaps maps;
    if (W > 1) {
      maps.in = CompactMaps::of(job.upper ? job.a.transposed() : job.a, n);
      maps.out = CompactMaps::of(job.upper ? job.out.transposed() : job.out, n);
    }
    PerWorker<Buffer<V>> bufs(job.threads);
    ThreadPool::global().parallel_for(tasks, job.threads, [&](int64_t t, int w) {
      V* P = bufs[w].get(static_cast<size_t>(packed(n, 0)));
      const int64_t g1 = groups * (t + 1) / tasks;
      for (int64_t g = groups * t / tasks; g < g1; ++g) cholesky_compact<T>(job, maps, g * W, group_size(g), P);
    });
    return;
  }
  PerWorker<Buffer<T>> bufs(job.threads);
  for_each_matrix(count, job.threads, [&](int64_t b, int w, int threads) {
    const bool direct = factors_in_out<T>(src, dst, b, n);
    Mat<T> A;
    if (direct) {
      A = {dst.ptr<T>(b), n, n, dst.cs};
    } else {
      T* cur = bufs[w].get(carve_size<T>(n, n));
      A = carve<T>(cur, n, n);
    }
    Failure f;
    bool bad;
    if (direct && src.ptr<T>(b) == A.p) bad = find_nonfinite(A, true, &f);
    else bad = load_lower_checked(src, b, A, &f);
    if (bad) {
      if (job.upper) std::swap(f.i, f.j);
      f.batch = b;
      job.log->record(f);
      return;
    }
    Pivot<T> p = potrf(A, threads);
    if (p.index >= 0) {
      job.log->record({b, FailKind::kNotPositiveDefinite, p.index, 0, static_cast<double>(p.value)});
      return;
    }
    for (int64_t j = 1; j < n; ++j) std::fill(A.col(j), A.col(j) + j, T(0));
    if (!direct) store(A, dst, b);
  });
}

// Loads a triangular operand as a lower-triangular L (the transpose of an
// upper one), checking its triangle and diagonal; false and *f on failure.
template <class T> bool load_triangle(const MatArg& a, int64_t b, Mat<T> L, bool upper, bool unit, Failure* f) {
  load_lower(a, b, L, upper);
  if (unit)
    for (int64_t j = 0; j < L.n; ++j) L(j, j) = T(1);
  if (find_nonfinite(L, true, f)) {
    if (upper) std::swap(f->i, f->j);
    return false;
  }
  for (int64_t j = 0; j < L.n; ++j)
    if (L(j, j) == T(0)) {
      *f = {b, FailKind::kZeroDiagonal, j, j, 0.0};
      return false;
    }
  return true;
}

// Matrix b of a triangular system: the triangle of `tri` (named `tri_name`
// in failures) as lower L, and the right-hand sides X; false and *f (its
// operand named) when either fails its checks.
template <class T>
bool load_system(const MatArg& tri, const char* tri_name, const MatArg& rhs, int64_t b, Mat<T> L, Mat<T> X, bool upper,
                 bool unit, Failure* f) {
  if (!load_triangle(tri, b, L, upper, unit, f)) {
    f->operand = tri_name;
    return false;
  }
  f->operand = "b";
  load(rhs, b, X);
  return !find_nonfinite(X, false, f);
}

// Solves the triangular systems of a batch, matrix by matrix: the triangle
// of `tri` and the right-hand sides `rhs` loaded (load_system), solve(L, X,
// threads) on those that pass their checks, X stored to `out`; a failure is
// recorded instead (with its row and column swapped when swap_positions:
// the operands are the transposes of the caller's).
template <class T, class Solve>
void solve_each(const MatArg& tri, const char* tri_name, const MatArg& rhs, const MatArg& out, bool upper, bool unit,
                bool swap_positions, int threads, FailureLog* log, const Solve& solve) {
  const int64_t n = tri.rows, k = rhs.cols, count = tri.batch();
  if (count == 0 || k == 0) return;
  PerWorker<Buffer<T>> bufs(threads);
  for_each_matrix(count, threads, [&](int64_t b, int w, int inner) {
    T* cur = bufs[w].get(carve_size<T>(n, n) + carve_size<T>(n, k));
    Mat<T> L = carve<T>(cur, n, n), X = carve<T>(cur, n, k);
    Failure f;
    if (!load_system(tri, tri_name, rhs, b, L, X, upper, unit, &f)) {
      if (swap_positions) std::swap(f.i, f.j);
      f.batch = b;
      log->record(f);
      return;
    }
    solve(L, X, inner);
    store(X, out, b);
  });
}

template <class T> void trsm_job(const TrsmJob& job) {
  solve_each<T>(job.a, "a", job.b, job.x, job.upper, job.unit, job.right, job.threads, job.log,
                [&](Mat<T> L, Mat<T> X, int threads) { trsm_left(L, X, job.upper, job.unit, threads); });
}

template <class T> void cholesky_solve_job(const CholSolveJob& job) {
  solve_each<T>(job.factor, "factor", job.b, job.x, job.upper, false, false, job.threads, job.log,
                [](Mat<T> L, Mat<T> X, int threads) {
                  trsm_left(L, X, false, false, threads);
                  trsm_left(L, X, true, false, threads);
                });
}

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
