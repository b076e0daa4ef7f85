// One ISA's copy of the SVD (see backend.h): included by svd_generic.cc and
// svd_avx512.cc.
#include <mutex>
#include <optional>

#include "linalg/tridiagonal_dc.h"  // before the ISA's target pragma: compiled once, outside the copies
#include "linalg/isa_begin.h"
#include "linalg/simd.h"
#include "linalg/dense.h"
#include "linalg/compact.h"
#include "linalg/cholesky_impl.h"
#include "linalg/cholesky_compact_impl.h"
#include "linalg/householder_impl.h"
#include "linalg/tridiagonal_impl.h"
#include "linalg/tridiagonal_lanes_impl.h"
#include "linalg/pivoted_qr_impl.h"
#include "linalg/jacobi_svd_impl.h"
#include "linalg/jacobi_svd_lanes_impl.h"
#include "linalg/svd_gram_lanes.h"

namespace sinew::linalg::detail::SINEW_LINALG_ISA {
namespace {

constexpr int64_t kSvdDeferMin = 64;  // from this n, one_sided_jacobi_deferred

// Writes the factorization of the working matrix Aw (rows x cols, rows >=
// cols, Aw = A or Aᵀ) to the job's outputs for matrix b: Uw (rows x uq) and
// Vw (cols x cols) with columns in output order, sigma descending.
template <class T>
void store_svd(const SvdJob& job, int64_t b, bool tall, const T* sigma, Mat<T> Uw, Mat<T> Vw) {
  store_vector(sigma, job.s, b);
  if (!job.u.present) return;
  const int64_t k = Vw.n;
  T* vh = job.vh.ptr<T>(b);  // written transposed (strides swapped)
  if (tall) {  // A = Uw Σ Vwᵀ
    store(Uw, job.u, b);
    store_strided(Vw, vh, job.vh.cs, job.vh.rs);
  } else {  // Aᵀ = Uw Σ Vwᵀ, so A = Vw Σ Uwᵀ
    store(Vw.sub(0, 0, k, k), job.u, b);
    store_strided(Uw, vh, job.vh.cs, job.vh.rs);
  }
}

// D (n x n) <- the transposed upper triangle of S's first n rows, zeros
// above the diagonal, in 8 x 8 tiles (reading S by rows one at a time
// walks a new cache line per element).
template <class T> void transposed_upper(Mat<T> S, Mat<T> D) {
  const int64_t n = D.n;
  for (int64_t j = 0; j < n; ++j) std::fill(D.col(j), D.col(j) + j, T(0));
  for (int64_t j0 = 0; j0 < n; j0 += 8)
    for (int64_t i0 = j0; i0 < n; i0 += 8) {
      if (i0 > j0 && i0 + 8 <= n) {
        transpose8(S.col(i0) + j0, S.ld, D.col(j0) + i0, D.ld);
        continue;
      }
      for (int64_t j = j0; j < std::min(j0 + 8, n); ++j)
        for (int64_t i = std::max(i0, j); i < std::min(i0 + 8, n); ++i) D(i, j) = S(j, i);
    }
}

template <class T> struct SvdScratch {
  Buffer<T> buf, aux;
  DeferScratch<T> defer;
  QrScratch<T> qr;
  std::vector<int64_t> perm_c, perm_r, order;
  std::vector<char> good;
};

// order[r] = the index of the r-th largest of v[0, n), ties in index order
// (a stable sort's order), by counting each index's rank: branch-free, where
// a sort's comparisons on random values mispredict about half the time (0.85
// of a batched 32x32 SVD's 52 us went to sorting its rows). For n <=
// kCompactSvdMax, finite values.
template <class T> void rank_descending(const T* v, int64_t n, int64_t* order) {
  for (int64_t x = 0; x < n; ++x) {
    int64_t r = 0;
    for (int64_t y = 0; y < n; ++y) r += (v[y] > v[x]) | ((v[y] == v[x]) & (y < x));
    order[r] = x;
  }
}

// Descending order of sigma, equal values in column order (a stable sort's
// order, without its buffer).
inline void descending(const std::vector<double>& sigma, std::vector<int64_t>& order) {
  const int64_t n = static_cast<int64_t>(sigma.size());
  order.resize(sigma.size());
  if (n <= kCompactSvdMax) return rank_descending(sigma.data(), n, order.data());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int64_t x, int64_t y) { return sigma[x] > sigma[y] || (sigma[x] == sigma[y] && x < y); });
}

template <class T> void svd_one(const SvdJob& job, int64_t b, SvdScratch<T>& s, int threads) {
  const bool tall = job.a.rows >= job.a.cols, want = job.u.present;
  const MatArg a = tall ? job.a : job.a.transposed();
  const int64_t m = a.rows, n = a.cols;  // m >= n
  const int64_t uq = job.full ? m : n;
  T* cur = s.buf.get(2 * carve_size<T>(m, n) + 2 * carve_size<T>(n, n) + carve_size<T>(m, uq) +
                     6 * static_cast<size_t>(m + n) + 64);
  Mat<T> A = carve<T>(cur, m, n), Ap = carve<T>(cur, m, n), X = carve<T>(cur, n, n), Wm = carve<T>(cur, n, n),
         U = carve<T>(cur, m, uq);
  T* tau = cur;
  T* vn1 = tau + n + 8;
  T* vn2 = vn1 + n + 8;
  T* nrm = vn2 + n + 8;
  T* rown = nrm + n + 8;
  T* sig = rown + m + 8;
  load(a, b, A);
  Failure f;
  if (find_nonfinite(A, false, &f)) {
    if (!tall) std::swap(f.i, f.j);
    f.batch = b;
    job.log->record(f);
    return;
  }
  const T scale = scale_down(A, false);
  // Rows by decreasing max-norm, so that Householder QR stays accurate on
  // row-graded matrices (Powell-Reid / Drmač).
  for (int64_t i = 0; i < m; ++i) rown[i] = 0;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) rown[i] = std::max(rown[i], std::abs(A(i, j)));
  s.perm_r.resize(static_cast<size_t>(m));
  std::iota(s.perm_r.begin(), s.perm_r.end(), 0);
  std::stable_sort(s.perm_r.begin(), s.perm_r.end(), [&](int64_t x, int64_t y) { return rown[x] > rown[y]; });
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) Ap(i, j) = A(s.perm_r[i], j);
  s.perm_c.resize(static_cast<size_t>(n));
  geqp3(Ap, tau, s.perm_c.data(), vn1, vn2, threads);
  // One-sided Jacobi works with squared column norms: a nonzero column
  // below √(smallest normal) of the largest entry (1e-154 in f64, 1e-19 in
  // f32) has a subnormal one, and rotations involving it lose all accuracy.
  for (int64_t k = 0; k < n; ++k) {
    const T r = std::abs(Ap(k, k));
    if (r != T(0) && r * r < std::numeric_limits<T>::min()) {
      job.log->record({b, FailKind::kRangeTooWide, k, 0, static_cast<double>(r)});
      return;
    }
  }
  // Second preconditioning (Drmač's dgejsv): Rᵀ = Q2 R2, Jacobi on R2ᵀ,
  // whose columns are much closer to orthogonal than those of Rᵀ.
  transposed_upper(Ap, X);  // Rᵀ
  T* tau2 = sig + n + 8;
  geqrf(X, tau2, s.qr, threads);
  T* cur2 = s.aux.get(2 * carve_size<T>(n, n));
  Mat<T> X2 = carve<T>(cur2, n, n), Vo = carve<T>(cur2, n, n);
  transposed_upper(X, X2);  // R2ᵀ
  if (want) set_identity(Wm);
  const Mat<T> Wopt = want ? Wm : Mat<T>{};
  const int sweeps = n >= kSvdDeferMin ? one_sided_jacobi_deferred(X2, Wopt, nrm, s.defer, threads)
                                       : one_sided_jacobi(X2, Wopt, nrm, threads);
  if (sweeps > kSvdMaxSweeps) {
    job.log->record({b, FailKind::kNoConvergence, kSvdMaxSweeps, 0, 0.0});
    return;
  }
  std::vector<double> sigma(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) sigma[j] = std::sqrt(static_cast<double>(nrm[j]));
  descending(sigma, s.order);
  for (int64_t t = 0; t < n; ++t) sig[t] = std::sqrt(nrm[s.order[t]]) * scale;
  if (!want) {
    store_vector(sig, job.s, b);
    return;
  }
  // Thousands of rotations drift W's column norms from 1 by a few ε each;
  // renormalizing removes most of that loss of orthogonality (as dgesvj).
  for (int64_t j = 0; j < n; ++j) scal(n, T(1) / nrm2(n, Wm.col(j)), Wm.col(j));
  // A P = Q R = Q R2ᵀ Q2ᵀ and R2ᵀ W = Ux Σ, so U = Prᵀ Q [Ux; 0] (Ux the
  // normalized final columns, completed where sigma is 0) and V = P Q2 W.
  s.good.assign(static_cast<size_t>(n), 0);
  for (int64_t j = 0; j < n; ++j) {
    const T sj = std::sqrt(nrm[j]);
    if (sj > T(0) && std::isfinite(T(1) / sj)) {
      scal(n, T(1) / sj, X2.col(j));
      s.good[j] = 1;
    }
  }
  complete_columns(X2, s.good, s.qr, threads);
  set_identity(U);
  for (int64_t t = 0; t < n; ++t) std::memcpy(U.col(t), X2.col(s.order[t]), sizeof(T) * n);
  apply_q(Ap.sub(0, 0, m, n), tau, false, U, s.qr, threads);
  for (int64_t j = 0; j < uq; ++j) {  // undo the row sort, through A (free now)
    T* col = A.col(std::min<int64_t>(j, n - 1));
    for (int64_t i = 0; i < m; ++i) col[s.perm_r[i]] = U(i, j);
    std::memcpy(U.col(j), col, sizeof(T) * m);
  }
  for (int64_t t = 0; t < n; ++t) std::memcpy(X2.col(t), Wm.col(s.order[t]), sizeof(T) * n);
  apply_q(X, tau2, false, X2, s.qr, threads);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < n; ++i) Vo(s.perm_c[i], t) = X2(i, t);
  store_svd(job, b, tall, sig, U, Vo);
}

// Writes f(i, j) to element (i, j) of the rows x cols matrix b of a, in the
// order of a's memory.
template <class T, class F> void put(const MatArg& a, int64_t b, int64_t rows, int64_t cols, F f) {
  T* d = a.ptr<T>(b);
  if (a.rs <= a.cs) {
    for (int64_t j = 0; j < cols; ++j)
      for (int64_t i = 0; i < rows; ++i) d[i * a.rs + j * a.cs] = f(i, j);
  } else {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) d[i * a.rs + j * a.cs] = f(i, j);
  }
}

// The matrices of a compact batch that the Gram path (svd_gram_lanes.h)
// leaves to the QR path.
struct Leftovers {
  std::mutex mu;
  std::vector<int64_t> ids;
};

// The Gram path of svd_compact on the loaded and scaled lanes of A (m x n,
// m >= n; U thin or square): the lanes gram_jacobi_lanes solves are stored,
// the others go to left. X: m x n, Wl: n x n, nrm: n, scratch:
// gram_jacobi_scratch(n).
template <class T>
void svd_gram_lanes(const SvdJob& job, const int64_t* ids, int cnt, const Vec<T>* A, int64_t m, int64_t n, Vec<T>* X,
                    Vec<T>* Wl, Vec<T>* nrm, Vec<T>* scratch, const T* scale, SvdScratch<T>& s, Leftovers& left) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const bool tall = job.a.rows >= job.a.cols, want = job.u.present;
  const auto done = gram_jacobi_lanes(A, m, n, X, want ? Wl : nullptr, nrm, scratch);
  const T* xt = reinterpret_cast<const T*>(X);
  const T* wt = reinterpret_cast<const T*>(Wl);
  const T* nt = reinterpret_cast<const T*>(nrm);
  T* sig = s.buf.get(2 * static_cast<size_t>(n));
  T* inv = sig + n;
  std::vector<double> sigma(static_cast<size_t>(n));
  std::vector<int64_t> rest;
  for (int l = 0; l < cnt; ++l) {
    bool ok = V::lane(done, l);
    for (int64_t j = 0; j < n && ok; ++j) {
      const T sj = std::sqrt(nt[j * W + l]);
      ok = sj > T(0) && std::isfinite(T(1) / sj);
      sigma[j] = sj;
    }
    if (!ok) {
      rest.push_back(ids[l]);
      continue;
    }
    descending(sigma, s.order);
    for (int64_t t = 0; t < n; ++t) sig[t] = static_cast<T>(sigma[s.order[t]]) * scale[l];
    store_vector(sig, job.s, ids[l]);
    if (!want) continue;
    // Straight from the lanes to the outputs: U = X's columns over σ, V =
    // Wl (A = V Σ Uᵀ when A is wide).
    const int64_t* ord = s.order.data();
    for (int64_t t = 0; t < n; ++t) inv[t] = T(1) / static_cast<T>(sigma[ord[t]]);
    auto u = [&](int64_t i, int64_t t) { return xt[(i + ord[t] * m) * W + l] * inv[t]; };
    auto v = [&](int64_t i, int64_t t) { return wt[(i + ord[t] * n) * W + l]; };
    if (tall) {
      put<T>(job.u, ids[l], m, n, u);
      put<T>(job.vh, ids[l], n, n, [&](int64_t t, int64_t i) { return v(i, t); });
    } else {
      put<T>(job.u, ids[l], n, n, v);
      put<T>(job.vh, ids[l], n, m, [&](int64_t t, int64_t i) { return u(i, t); });
    }
  }
  if (!rest.empty()) {
    std::lock_guard<std::mutex> lock(left.mu);
    left.ids.insert(left.ids.end(), rest.begin(), rest.end());
  }
}

// Lane l of A's scalars `at` (m x n, ld m; W lanes): matrix `id` of a, or
// the identity when id < 0, with its rows sorted by decreasing max-norm
// when sort (the QR path; the Gram path does not depend on their order),
// pr[m] <- the row order. Returns false, after recording the matrix's first
// non-finite entry (in row order), when it has one.
template <class T>
bool load_lane(const SvdJob& job, const MatArg& a, bool tall, int64_t id, int l, bool sort, int64_t* pr, T* at) {
  constexpr int W = Vec<T>::W;
  const int64_t m = a.rows, n = a.cols;
  std::iota(pr, pr + m, 0);
  if (id < 0) {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) at[(i + j * m) * W + l] = i == j ? T(1) : T(0);
    return true;
  }
  const T* src = a.ptr<T>(id);
  // Row max-norms in the order the matrix lies in (column by column when
  // its columns are contiguous: a row at a time walks a new cache line
  // per element), into a local array the compiler knows src does not
  // alias; NaN and Inf are only flagged here and then named in row order.
  T rown[kCompactSvdMax] = {};
  bool finite = true;
  const T big = std::numeric_limits<T>::max();
  auto scan = [&](int64_t i, int64_t j) {
    const T x = std::abs(src[i * a.rs + j * a.cs]);
    finite &= x <= big;
    rown[i] = std::max(rown[i], x);
  };
  if (a.rs <= a.cs)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) scan(i, j);
  else
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) scan(i, j);
  if (!finite) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        if (const T x = src[i * a.rs + j * a.cs]; !std::isfinite(x)) {
          job.log->record({id, FailKind::kNonFinite, tall ? i : j, tall ? j : i, static_cast<double>(x)});
          return false;
        }
  }
  if (sort) rank_descending(rown, m, pr);  // decreasing max-norm, ties in row order
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) at[(i + j * m) * W + l] = src[pr[i] * a.rs + j * a.cs];
  return true;
}

// The factors of the compact QR path's lanes ids[0, cnt), once Jacobi has
// converged: X (n x n) the rotated Rᵀ, nrm its squared column norms, C (m x
// uq) the left factor before the row order is undone, perm the column
// pivots, scale the lanes' scaling.
template <class T>
void store_compact(const SvdJob& job, const int64_t* ids, int cnt, bool tall, int64_t m, int64_t n, int64_t uq,
                   const Vec<T>* X, const Vec<T>* C, const Vec<T>* nrm, const Vec<T>* perm, const T* scale,
                   SvdScratch<T>& s) {
  constexpr int W = Vec<T>::W;
  const bool want = job.u.present;
  const T* xt = reinterpret_cast<const T*>(X);
  const T* ct = reinterpret_cast<const T*>(C);
  const T* nt = reinterpret_cast<const T*>(nrm);
  const T* pt = reinterpret_cast<const T*>(perm);
  T* cur = s.buf.get(carve_size<T>(m, uq) + 2 * carve_size<T>(n, n) + static_cast<size_t>(n) + 16);
  Mat<T> U = carve<T>(cur, m, uq), Ux = carve<T>(cur, n, n), Vo = carve<T>(cur, n, n);
  T* sig = cur;
  std::vector<double> sigma(static_cast<size_t>(n));
  for (int l = 0; l < cnt; ++l) {
    for (int64_t j = 0; j < n; ++j) sigma[j] = std::sqrt(static_cast<double>(nt[j * W + l]));
    descending(sigma, s.order);
    for (int64_t t = 0; t < n; ++t) sig[t] = std::sqrt(nt[s.order[t] * W + l]) * scale[l];
    if (!want) {
      store_vector(sig, job.s, ids[l]);
      continue;
    }
    s.good.assign(static_cast<size_t>(n), 0);
    for (int64_t j = 0; j < n; ++j) {
      const T sj = std::sqrt(nt[j * W + l]);
      const bool ok = sj > T(0) && std::isfinite(T(1) / sj);
      s.good[j] = ok;
      const T inv = ok ? T(1) / sj : T(0);
      for (int64_t i = 0; i < n; ++i) Ux(i, j) = xt[(i + j * n) * W + l] * inv;
    }
    complete_columns(Ux, s.good, s.qr, 1);
    const int64_t* pr = s.perm_r.data() + l * m;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t j = s.order[t];
      for (int64_t i = 0; i < n; ++i) Vo(static_cast<int64_t>(pt[i * W + l]), t) = Ux(i, j);
      for (int64_t i = 0; i < m; ++i) U(pr[i], t) = ct[(i + j * m) * W + l];
    }
    for (int64_t t = n; t < uq; ++t)
      for (int64_t i = 0; i < m; ++i) U(pr[i], t) = ct[(i + t * m) * W + l];
    store_svd(job, ids[l], tall, sig, U, Vo);
  }
}

// The compact path on the matrices ids[0, cnt) (cnt <= W), one per lane:
// with gram, the Gram-preconditioned Jacobi, whose lanes that do not qualify
// go to left; otherwise the same QR-preconditioned method as svd_one, rows
// sorted per matrix while loading, pivoting per lane.
template <class T>
void svd_compact(const SvdJob& job, const int64_t* ids, int cnt, bool gram, Buffer<Vec<T>>& buf, SvdScratch<T>& s,
                 Leftovers& left) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const bool tall = job.a.rows >= job.a.cols, want = job.u.present;
  const MatArg a = tall ? job.a : job.a.transposed();
  const int64_t m = a.rows, n = a.cols;  // m >= n
  const int64_t uq = job.full ? m : n;
  V* A = buf.get(static_cast<size_t>(2 * m * n + n * n + m * uq + 5 * n + (gram ? gram_jacobi_scratch(n) : 0)));
  V* X = A + m * n;  // m x n on the Gram path, n x n on the QR path
  V* Wl = X + m * n;
  V* C = Wl + n * n;
  V* tau = C + m * uq;
  V* perm = tau + n;
  V* nrm = perm + n;
  V* vn1 = nrm + n;
  V* vn2 = vn1 + n;
  T* at = reinterpret_cast<T*>(A);
  s.perm_r.assign(static_cast<size_t>(m * W), 0);
  for (int l = 0; l < W; ++l)
    if (!load_lane(job, a, tall, l < cnt ? ids[l] : -1, l, !gram, s.perm_r.data() + l * m, at)) return;
  alignas(64) T scale[W];
  scale_lanes(A, m, m, n, scale);
  if (gram) {
    svd_gram_lanes(job, ids, cnt, A, m, n, X, Wl, nrm, vn2 + n, scale, s, left);
    return;
  }
  geqp3_lanes(A, m, n, tau, perm, vn1, vn2);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < n; ++i) X[i + j * n] = i >= j ? A[j + i * m] : V::zero();  // X = Rᵀ
  if (want)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < n; ++i) Wl[i + j * n] = V::set1(i == j ? T(1) : T(0));
  if (one_sided_jacobi_lanes(X, n, n, want ? Wl : nullptr, nrm) > kSvdMaxSweeps) {
    for (int l = 0; l < cnt; ++l) job.log->record({ids[l], FailKind::kNoConvergence, kSvdMaxSweeps, 0, 0.0});
    return;
  }
  if (want) {  // C = Q [W 0; 0 I], W's columns renormalized (see svd_one)
    for (int64_t j = 0; j < n; ++j) {
      V ss = V::zero();
      for (int64_t i = 0; i < n; ++i) ss = fma(Wl[i + j * n], Wl[i + j * n], ss);
      const V inv = V::set1(T(1)) / sqrt(ss);
      for (int64_t i = 0; i < n; ++i) Wl[i + j * n] = Wl[i + j * n] * inv;
    }
    for (int64_t j = 0; j < uq; ++j)
      for (int64_t i = 0; i < m; ++i)
        C[i + j * m] = i < n && j < n ? Wl[i + j * n] : V::set1(i == j ? T(1) : T(0));
    apply_q_lanes(A, m, n, tau, C, uq);
  }
  store_compact(job, ids, cnt, tall, m, n, uq, X, C, nrm, perm, scale, s);
}

template <class T> void svd_job(const SvdJob& job) {
  const int64_t m = job.a.rows, n = job.a.cols, k = std::min(m, n), count = job.a.batch();
  if (count == 0) return;
  if (k == 0) {  // no singular values; the full factors are identities
    if (job.u.present && job.full)
      for (int64_t b = 0; b < count; ++b) {
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < m; ++j) job.u.ptr<T>(b)[i * job.u.rs + j * job.u.cs] = i == j ? T(1) : T(0);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < n; ++j) job.vh.ptr<T>(b)[i * job.vh.rs + j * job.vh.cs] = i == j ? T(1) : T(0);
      }
    return;
  }
  PerWorker<SvdScratch<T>> scratch(job.threads);
  if (count >= 2 && std::max(m, n) <= kCompactSvdMax) {
    constexpr int W = Vec<T>::W;
    // The Gram path for f64 (in f32 most random matrices would fail its
    // condition test) unless U is full and not square (its m - n extra
    // columns come from the QR).
    const bool gram = std::is_same_v<T, double> && !(job.u.present && job.full && m != n);
    PerWorker<Buffer<Vec<T>>> bufs(job.threads);
    Leftovers left;
    ThreadPool::global().parallel_for((count + W - 1) / W, job.threads, [&](int64_t g, int w) {
      int64_t ids[W];
      const int cnt = static_cast<int>(std::min<int64_t>(W, count - g * W));
      std::iota(ids, ids + cnt, g * W);
      svd_compact<T>(job, ids, cnt, gram, bufs[w], scratch[w], left);
    });
    if (left.ids.empty()) return;
    std::sort(left.ids.begin(), left.ids.end());
    const int64_t rest = static_cast<int64_t>(left.ids.size());
    ThreadPool::global().parallel_for((rest + W - 1) / W, job.threads, [&](int64_t g, int w) {
      svd_compact<T>(job, left.ids.data() + g * W, static_cast<int>(std::min<int64_t>(W, rest - g * W)), false, bufs[w],
                     scratch[w], left);
    });
    return;
  }
  std::optional<BlasThreadsScope> blas_threads;  // for stedc in one_sided_jacobi_deferred
  if (k >= kSvdDeferMin) blas_threads.emplace(count == 1 ? job.threads : 1);  // what for_each_matrix gives each
  for_each_matrix(count, job.threads, [&](int64_t b, int w, int threads) { svd_one<T>(job, b, scratch[w], threads); });
}

}  // namespace

void svd(const SvdJob& job) {
  if (job.a.dtype == DType::kF64) svd_job<double>(job);
  else svd_job<float>(job);
}

}  // namespace sinew::linalg::detail::SINEW_LINALG_ISA

#include "linalg/isa_end.h"
