// One ISA's copy of QR and least squares (see backend.h): included by
// qr_generic.cc and qr_avx512.cc.
#include "linalg/isa_begin.h"
#include "linalg/simd.h"
#include "linalg/dense.h"
#include "linalg/compact.h"
#include "linalg/cholesky_impl.h"
#include "linalg/householder_impl.h"
#include "linalg/qr_lanes_impl.h"

namespace sinew::linalg::detail::SINEW_LINALG_ISA {
namespace {

// What each worker of a QR or least-squares batch reuses from matrix to matrix.
template <class T> struct QrWorkerScratch {
  Buffer<T> buf;
  QrScratch<T> qr;
};

template <class T> void qr_compact(const QrJob& job, int64_t b0, int cnt, Buffer<Vec<T>>& buf) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const int64_t m = job.a.rows, n = job.a.cols, k = std::min(m, n);
  const int64_t q = job.complete ? m : k, rr = job.complete ? m : k;
  V* A = buf.get(static_cast<size_t>(m * n + k + m * q));
  V* tau = A + m * n;
  V* Q = tau + k;
  load_lanes(job.a, b0, cnt, A, m);
  if (lanes_nonfinite(A, m, m, n, b0, cnt, false, job.log)) return;
  alignas(64) T scale[W];
  scale_lanes(A, m, m, n, scale);
  geqr2_pairs_lanes(A, m, n, tau);
  if (job.q.present) {
    org2r_pairs_lanes(A, m, k, tau, Q, q);
    store_lanes(Q, m, m, q, job.q, b0, cnt);
  }
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = j + 1; i < rr; ++i) A[i + j * m] = V::zero();
  store_lanes(A, m, rr, n, job.r, b0, cnt, scale);
}

template <class T> void qr_job(const QrJob& job) {
  const int64_t m = job.a.rows, n = job.a.cols, k = std::min(m, n), count = job.a.batch();
  const int64_t q = job.complete ? m : k, rr = job.complete ? m : k;
  if (count == 0) return;
  if (count >= 2 && k >= 1 && std::max(m, n) <= kCompactQrMax) {
    constexpr int W = Vec<T>::W;
    PerWorker<Buffer<Vec<T>>> bufs(job.threads);
    ThreadPool::global().parallel_for((count + W - 1) / W, job.threads, [&](int64_t g, int w) {
      qr_compact<T>(job, g * W, static_cast<int>(std::min<int64_t>(W, count - g * W)), bufs[w]);
    });
    return;
  }
  PerWorker<QrWorkerScratch<T>> scratch(job.threads);
  for_each_matrix(count, job.threads, [&](int64_t b, int w, int threads) {
    QrWorkerScratch<T>& s = scratch[w];
    T* cur = s.buf.get(carve_size<T>(m, n) + carve_size<T>(m, q) + static_cast<size_t>(k) + 64);
    Mat<T> A = carve<T>(cur, m, n), Q = carve<T>(cur, m, q);
    T* tau = cur;
    Failure f;
    load(job.a, b, A);
    if (find_nonfinite(A, false, &f)) {
      f.batch = b;
      job.log->record(f);
      return;
    }
    geqrf(A, tau, s.qr, threads);
    if (job.q.present) {
      orgqr(A.sub(0, 0, m, k), tau, Q, s.qr, threads);
      store(Q, job.q, b);
    }
    for (int64_t j = 0; j < std::min(n, rr); ++j) std::fill(A.col(j) + j + 1, A.col(j) + rr, T(0));
    store(A.sub(0, 0, rr, n), job.r, b);
  });
}

// The index of a diagonal entry of R below max(m, n) ε max|R_jj|, or -1.
template <class T> int64_t rank_deficient(Mat<T> R, int64_t k, int64_t m, int64_t n, T* value) {
  T big = 0;
  for (int64_t j = 0; j < k; ++j) big = std::max(big, std::abs(R(j, j)));
  const T tol = static_cast<T>(std::max(m, n)) * std::numeric_limits<T>::epsilon() * big;
  for (int64_t j = 0; j < k; ++j)
    if (!(std::abs(R(j, j)) > tol)) {
      *value = std::abs(R(j, j));
      return j;
    }
  return -1;
}

template <class T> void lstsq_job(const LstsqJob& job) {
  const int64_t m = job.a.rows, n = job.a.cols, nrhs = job.b.cols, count = job.a.batch();
  const int64_t k = std::min(m, n);
  if (count == 0 || n == 0 || nrhs == 0) return;
  PerWorker<QrWorkerScratch<T>> scratch(job.threads);
  for_each_matrix(count, job.threads, [&](int64_t b, int w, int threads) {
    QrWorkerScratch<T>& s = scratch[w];
    const bool tall = m >= n;
    // Tall: A = QR, x = R⁻¹ (Qᵀb)[:n]. Wide: Aᵀ = QR, x = Q [R⁻ᵀ b; 0].
    const int64_t fm = tall ? m : n;
    T* cur = s.buf.get(carve_size<T>(fm, k) + carve_size<T>(k, k) + carve_size<T>(std::max(m, n), nrhs) + k + 64);
    Mat<T> A = carve<T>(cur, fm, k), L = carve<T>(cur, k, k), X = carve<T>(cur, std::max(m, n), nrhs);
    T* tau = cur;
    Failure f;
    load(tall ? job.a : job.a.transposed(), b, A);
    bool ok = !find_nonfinite(A, false, &f);
    if (!ok && !tall) std::swap(f.i, f.j);
    if (ok) {
      load(job.b, b, X.sub(0, 0, m, nrhs));
      ok = !find_nonfinite(X.sub(0, 0, m, nrhs), false, &f);
      f.operand = "b";
    }
    if (!ok) {
      f.batch = b;
      job.log->record(f);
      return;
    }
    if (k == 0) {  // m == 0: the minimum-norm solution is 0
      set_zero(X.sub(0, 0, n, nrhs));
      store(X.sub(0, 0, n, nrhs), job.x, b);
      return;
    }
    geqrf(A, tau, s.qr, threads);
    T value = 0;
    if (int64_t j = rank_deficient(A, k, m, n, &value); j >= 0) {
      job.log->record({b, FailKind::kRankDeficient, j, j, static_cast<double>(value)});
      return;
    }
    for (int64_t j = 0; j < k; ++j)
      for (int64_t i = j; i < k; ++i) L(i, j) = A(j, i);  // L = Rᵀ
    if (tall) {
      apply_q(A, tau, true, X.sub(0, 0, m, nrhs), s.qr, threads);
      trsm_left(L, X.sub(0, 0, n, nrhs), true, false, threads);
    } else {
      trsm_left(L, X.sub(0, 0, m, nrhs), false, false, threads);
      set_zero(X.sub(m, 0, n - m, nrhs));
      apply_q(A, tau, false, X.sub(0, 0, n, nrhs), s.qr, threads);
    }
    store(X.sub(0, 0, n, nrhs), job.x, b);
  });
}

}  // namespace

void qr(const QrJob& job) {
  if (job.a.dtype == DType::kF64) qr_job<double>(job);
  else qr_job<float>(job);
}

void lstsq(const LstsqJob& job) {
  if (job.a.dtype == DType::kF64) lstsq_job<double>(job);
  else lstsq_job<float>(job);
}

}  // namespace sinew::linalg::detail::SINEW_LINALG_ISA

#include "linalg/isa_end.h"
