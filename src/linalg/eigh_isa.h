// One ISA's copy of eigh (see backend.h): included by eigh_generic.cc and
// eigh_avx512.cc.
#include <optional>

#include "linalg/tridiagonal_dc.h"  // before the ISA's target pragma: compiled once, outside the copies
#include "linalg/isa_begin.h"
#include "linalg/simd.h"
#include "linalg/dense.h"
#include "linalg/compact.h"
#include "linalg/cholesky_impl.h"
#include "linalg/cholesky_compact_impl.h"
#include "linalg/householder_impl.h"
#include "linalg/jacobi_eigh_impl.h"
#include "linalg/tridiagonal_impl.h"
#include "linalg/tridiagonal_lanes_impl.h"

namespace sinew::linalg::detail::SINEW_LINALG_ISA {
namespace {

// Method choice (docs/linalg.md): a single matrix of order <= kEighJacobiMax
// uses Jacobi, larger ones the tridiagonal method (kAuto); batches of
// matrices of order <= kCompactEighMax run compact, W at a time: the
// tridiagonal method (kAuto, kTridiagonal; Jacobi where its QL fails) or
// Jacobi (kJacobi). The tridiagonal method finds eigenvectors from order
// kEighDcMin by divide and conquer (LAPACK stedc, see tridiagonal_dc.cc) and
// Householder back-transformation, below it (and for eigenvalues only, where
// QL costs O(n²)) by the QL method.
constexpr int64_t kEighJacobiMax = 16;
constexpr int64_t kEighDcMin = 96;  // measured: QL is as fast up to about here
constexpr int64_t kJacobiBlockedMin = 64;
constexpr int64_t kCompactEighMax = 48;

template <class T> void eigh_compact(const EighJob& job, int64_t b0, int cnt, Buffer<Vec<T>>& buf, bool jacobi) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const int64_t n = job.a.rows, np = packed(n, 0);
  const bool want_v = job.v.present;
  // A: the lanes' lower triangles, packed.
  V* A = buf.get(static_cast<size_t>(2 * np + n * n + n + tridiagonal_eigh_lanes_scratch(n)));
  V* A0 = A + np;  // A kept for Jacobi should QL fail
  V* Z = A0 + np;
  V* d = Z + n * n;
  V* scratch = d + n;
  if (!load_packed_lanes(job.a, job.upper, b0, cnt, A, job.log)) return;
  alignas(64) T scale[W];
  scale_lanes(A, np, np, 1, scale);
  // Z(i, j) at Z[i * zi + j * zj]: row-major after QL, column-major after Jacobi.
  int64_t zi = n, zj = 1;
  bool solved = false;
  if (!jacobi) {
    std::copy(A, A + np, A0);
    solved = tridiagonal_eigh_lanes(A, n, d, want_v ? Z : nullptr, scratch);
    if (!solved) std::copy(A0, A0 + np, A);
  }
  if (!solved) {
    zi = 1;
    zj = n;
    if (want_v)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < n; ++i) Z[i + j * n] = V::set1(i == j ? T(1) : T(0));
    if (jacobi_lanes(A, n, want_v ? Z : nullptr) > kJacobiMaxSweeps) {
      for (int l = 0; l < cnt; ++l) job.log->record({b0 + l, FailKind::kNoConvergence, kJacobiMaxSweeps, 0, 0.0});
      return;
    }
    for (int64_t i = 0; i < n; ++i) d[i] = A[packed(i, i)];
  }
  const T* zt = reinterpret_cast<const T*>(Z);
  const T* dt = reinterpret_cast<const T*>(d);
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int l = 0; l < cnt; ++l) {
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return dt[x * W + l] < dt[y * W + l]; });
    T* w = job.w.ptr<T>(b0 + l);
    for (int64_t i = 0; i < n; ++i) w[i * job.w.rs] = dt[order[i] * W + l] * scale[l];
    if (!want_v) continue;
    T* v = job.v.ptr<T>(b0 + l);
    auto z = [&](int64_t i, int64_t j) { return zt[(i * zi + order[j] * zj) * W + l]; };
    if (job.v.cs == 1 && job.v.rs != 1) {  // write the destination in memory order
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) v[i * job.v.rs + j] = z(i, j);
    } else {
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < n; ++i) v[i * job.v.rs + j * job.v.cs] = z(i, j);
    }
  }
}

// Eigenvalues (d) and eigenvectors (Z) of A from its tridiagonalization (A
// as sytrd left it: reflectors below the subdiagonal, tau; d, e): stedc on
// the tridiagonal matrix, then Z <- Q Z (ormtr). When stedc does not converge,
// forms Q and runs QL from a copy of (d, e) in `save` (2n entries). Returns
// false if QL did not converge either.
template <class T>
bool tridiagonal_eigh_dc(Mat<T> A, T* d, T* e, const T* tau, Mat<T> Z, T* save, QrScratch<T>& qr, int threads) {
  const int64_t n = A.n;
  for (int64_t i = 0; i < n; ++i) {
    save[i] = d[i];
    if (i + 1 < n) save[n + i] = e[i];
  }
  if (stedc(n, d, e, Z.p, Z.ld, threads) != 0) {
    for (int64_t i = 0; i < n; ++i) {
      d[i] = save[i];
      if (i + 1 < n) e[i] = save[n + i];
    }
    orgtr(A, tau, Z, qr, threads);
    return tridiagonal_ql(n, d, e, Z, threads);
  }
  ormtr(A, tau, Z, threads);
  return true;
}

template <class T> void eigh_job(const EighJob& job) {
  const int64_t n = job.a.rows, count = job.a.batch();
  const bool want_v = job.v.present;
  if (n == 0 || count == 0) return;
  if (count >= 2 && n <= kCompactEighMax) {
    constexpr int W = Vec<T>::W;
    const bool jacobi = job.algo == EighAlgo::kJacobi;
    PerWorker<Buffer<Vec<T>>> bufs(job.threads);
    ThreadPool::global().parallel_for((count + W - 1) / W, job.threads, [&](int64_t g, int w) {
      eigh_compact<T>(job, g * W, static_cast<int>(std::min<int64_t>(W, count - g * W)), bufs[w], jacobi);
    });
    return;
  }
  struct Scratch {
    Buffer<T> buf;
    TrdScratch<T> trd;
    QrScratch<T> qr;
  };
  PerWorker<Scratch> scratch(job.threads);
  const bool jacobi = job.algo == EighAlgo::kJacobi || (job.algo == EighAlgo::kAuto && n <= kEighJacobiMax);
  const bool dc = !jacobi && want_v && n >= kEighDcMin && n <= kStedcMaxOrder;
  std::optional<BlasThreadsScope> blas_threads;
  if (dc) blas_threads.emplace(count == 1 ? job.threads : 1);  // what for_each_matrix gives each matrix
  for_each_matrix(count, job.threads, [&](int64_t b, int w, int threads) {
    Scratch& s = scratch[w];
    T* cur = s.buf.get(2 * carve_size<T>(n, n) + 5 * static_cast<size_t>(n) + 64);
    Mat<T> A = carve<T>(cur, n, n), Z = carve<T>(cur, n, n);
    T* d = cur;
    T* e = d + n;
    T* tau = e + n;
    T* save = tau + n;
    load_lower(job.a, b, A, job.upper);
    Failure f;
    if (find_nonfinite(A, true, &f)) {
      if (job.upper) std::swap(f.i, f.j);
      f.batch = b;
      job.log->record(f);
      return;
    }
    const T scale = scale_down(A, true);
    Mat<T> Zv = want_v ? Z : Mat<T>{};
    bool ok = true;
    if (jacobi) {
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = j + 1; i < n; ++i) A(j, i) = A(i, j);
      if (want_v) set_identity(Z);
      const int sweeps = n < kJacobiBlockedMin ? jacobi_small(A, Zv) : jacobi_blocked(A, Zv, threads);
      ok = sweeps <= kJacobiMaxSweeps;
      for (int64_t i = 0; i < n; ++i) d[i] = A(i, i);
    } else {
      sytrd(A, d, e, tau, s.trd, threads);
      if (dc) {
        ok = tridiagonal_eigh_dc(A, d, e, tau, Z, save, s.qr, threads);
      } else {
        if (want_v) orgtr(A, tau, Z, s.qr, threads);
        ok = tridiagonal_ql(n, d, e, Zv, threads);
      }
    }
    if (!ok) {
      job.log->record({b, FailKind::kNoConvergence, jacobi ? kJacobiMaxSweeps : kQlMaxIterations, 0, 0.0});
      return;
    }
    sort_eigenpairs(n, d, Zv);
    for (int64_t i = 0; i < n; ++i) d[i] *= scale;
    store_vector(d, job.w, b);
    if (want_v) store(Z, job.v, b);
  });
}

}  // namespace

void eigh(const EighJob& job) {
  if (job.a.dtype == DType::kF64) eigh_job<double>(job);
  else eigh_job<float>(job);
}

}  // namespace sinew::linalg::detail::SINEW_LINALG_ISA

#include "linalg/isa_end.h"
