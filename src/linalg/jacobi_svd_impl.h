// SVD by one-sided Jacobi (Hestenes) with QR preconditioning (Drmač and
// Veselić): rows sorted by norm, Householder QR with column pivoting
// A P = Q R, a second QR Rᵀ = Q₂ R₂ (svd_isa.h), then one-sided Jacobi on
// the columns of X = R₂ᵀ, graded and nearly orthogonal, so that it needs
// fewer sweeps and keeps small singular values relatively accurate. Column
// pairs are visited block pair by block pair in round-robin order (disjoint
// block pairs in parallel, each block pair's columns of X and of the
// accumulated rotations W staying in cache while it runs). Compact kernels
// run the same steps on W small matrices at once, one per lane. Included
// through isa_begin.h only.
#pragma once

namespace sinew::linalg::detail::SINEW_LINALG_ISA {

constexpr int kSvdMaxSweeps = 30;
constexpr int64_t kSvdBlock = 32;  // columns per block of the pair ordering

// Householder QR with column pivoting of A (m x n): R above the diagonal,
// reflectors below, tau[min(m, n)], perm[j] = the column of A now at j
// (LAPACK geqp3 without blocking, with its norm downdating).
template <class T> void geqp3(Mat<T> A, T* tau, int64_t* perm, T* vn1, T* vn2, int threads) {
  const int64_t m = A.m, n = A.n, k = std::min(m, n);
  const T tol3z = std::sqrt(std::numeric_limits<T>::epsilon());
  for (int64_t j = 0; j < n; ++j) {
    perm[j] = j;
    vn1[j] = vn2[j] = nrm2(m, A.col(j));
  }
  for (int64_t i = 0; i < k; ++i) {
    int64_t p = i;
    for (int64_t j = i + 1; j < n; ++j)
      if (vn1[j] > vn1[p]) p = j;
    if (p != i) {
      std::swap_ranges(A.col(i), A.col(i) + m, A.col(p));
      std::swap(perm[i], perm[p]);
      vn1[p] = vn1[i];
      vn2[p] = vn2[i];
    }
    tau[i] = larfg(m - i, A(i, i), A.col(i) + i + 1);
    const T beta = A(i, i);
    A(i, i) = T(1);  // v = A(i:, i) while the threads apply it
    auto update = [&](int64_t c0, int64_t c1) {
      if (tau[i] != T(0)) apply_unit_reflector(A.col(i) + i, m - i, tau[i], A, i, c0, c1);
      for (int64_t j = c0; j < c1; ++j) {
        if (vn1[j] == T(0)) continue;
        const T r = std::abs(A(i, j)) / vn1[j];
        const T temp = std::max(T(0), T(1) - r * r);
        const T ratio = vn1[j] / vn2[j];
        if (temp * ratio * ratio <= tol3z) {
          vn1[j] = nrm2(m - i - 1, A.col(j) + i + 1);
          vn2[j] = vn1[j];
        } else {
          vn1[j] *= std::sqrt(temp);
        }
      }
    };
    const int64_t cols = n - i - 1;
    if (threads > 1 && cols >= 2 && 4 * cols * (m - i) >= fork_join_flops()) {
      const int64_t tasks = std::min<int64_t>(threads, cols);
      ThreadPool::global().parallel_for(tasks, threads, [&](int64_t t, int) {
        update(i + 1 + cols * t / tasks, i + 1 + cols * (t + 1) / tasks);
      });
    } else {
      update(i + 1, n);
    }
    A(i, i) = beta;
  }
}

// Rotates columns p and q of X (and of W when set) if they are not
// orthogonal to working precision; nrm2v[] holds the squared column norms,
// updated as α − t γ and β + t γ (exact in exact arithmetic) unless that
// cancels, when they are recomputed. Returns whether it rotated.
template <class T> inline bool jacobi_pair(Mat<T> X, Mat<T> W, T* nrm2v, int64_t p, int64_t q, T tol) {
  const T np2 = nrm2v[p], nq2 = nrm2v[q];
  if (np2 == T(0) || nq2 == T(0)) return false;
  const T g = dot(X.m, X.col(p), X.col(q));
  const T np = std::sqrt(np2), nq = std::sqrt(nq2);
  if (!(std::abs(g) / np / nq > tol)) return false;
  const T zeta = (nq2 - np2) / (T(2) * g);
  const T az = std::abs(zeta);
  const T t = az > T(1) / std::numeric_limits<T>::epsilon()
                  ? T(0.5) / zeta
                  : std::copysign(T(1) / (az + std::sqrt(T(1) + az * az)), zeta);
  const T c = T(1) / std::sqrt(T(1) + t * t), sn = t * c;
  const T np2n = np2 - t * g, nq2n = nq2 + t * g;
  if (np2n > T(0.25) * np2 && nq2n > T(0.25) * nq2) {
    rot(X.m, X.col(p), X.col(q), c, sn);
    nrm2v[p] = np2n;
    nrm2v[q] = nq2n;
  } else {
    rot_norms(X.m, X.col(p), X.col(q), c, sn, &nrm2v[p], &nrm2v[q]);
  }
  if (W.p) rot(W.m, W.col(p), W.col(q), c, sn);
  return true;
}

// One-sided Jacobi on the columns of X (m x n) until they are orthogonal to
// working precision; W (n x n) <- W J for every rotation J when W.p is set.
// nrm2v[] returns the squared column norms (recomputed exactly at the end).
// Returns the sweeps, or kSvdMaxSweeps + 1 when it did not converge.
template <class T> int one_sided_jacobi(Mat<T> X, Mat<T> W, T* nrm2v, int threads) {
  const int64_t n = X.n, b = kSvdBlock;
  for (int64_t j = 0; j < n; ++j) nrm2v[j] = dot(X.m, X.col(j), X.col(j));
  if (n < 2) return 0;
  const T tol = std::numeric_limits<T>::epsilon() * std::sqrt(static_cast<T>(X.m));
  const int64_t real_blocks = (n + b - 1) / b, blocks = real_blocks + (real_blocks & 1);
  auto range = [&](int64_t blk) {
    const int64_t lo = std::min(blk * b, n);
    return std::pair<int64_t, int64_t>{lo, std::min(lo + b, n)};
  };
  std::atomic<int64_t> rotations{0};
  int result = kSvdMaxSweeps + 1;
  for (int sweep = 0; sweep < kSvdMaxSweeps; ++sweep) {
    rotations = 0;
    // Round -1 pairs columns inside each block; rounds 0 .. blocks-2 pair
    // blocks, each block pair's columns staying in cache while it runs.
    for (int64_t round = -1; round < blocks - 1; ++round) {
      const int64_t tasks = round < 0 ? real_blocks : blocks / 2;
      auto task = [&](int64_t k, int) {
        int64_t count = 0;
        if (round < 0) {
          auto [lo, hi] = range(k);
          for (int64_t p = lo; p < hi; ++p)
            for (int64_t q = p + 1; q < hi; ++q) count += jacobi_pair(X, W, nrm2v, p, q, tol);
        } else {
          auto [bi, bj] = round_robin(blocks, round, k);
          auto [ilo, ihi] = range(bi);
          auto [jlo, jhi] = range(bj);
          for (int64_t p = ilo; p < ihi; ++p)
            for (int64_t q = jlo; q < jhi; ++q) count += jacobi_pair(X, W, nrm2v, p, q, tol);
        }
        if (count) rotations += count;
      };
      if (threads > 1 && 9 * n * b * X.m >= fork_join_flops()) ThreadPool::global().parallel_for(tasks, threads, task);
      else
        for (int64_t k = 0; k < tasks; ++k) task(k, 0);
    }
    if (rotations == 0) {
      result = sweep;
      break;
    }
  }
  for (int64_t j = 0; j < n; ++j) nrm2v[j] = dot(X.m, X.col(j), X.col(j));
  return result;
}

// One-sided Jacobi on the lower triangular X (n x n), W (n x n) <- the
// accumulated rotations when W.p is set, cheaper (after dgejsv's idea of
// not accumulating rotations): the first sweeps run on a float copy of X
// alone (16 lanes, and 8n instead of 14n flops per rotation); W1 = X₀⁻¹ X_f
// (X₀ the input) is made exactly orthogonal by QR and X <- X₀ W1 (one
// GEMM, which keeps row-wise relative accuracy, X₀ being graded by rows);
// then the sweeps run on X in T with W = W1. X₀ W1 is orthogonal to about
// float precision, so they converge quadratically, in two or three. Any
// orthogonal W1 gives the same result, a poor one only costs sweeps; but
// on strongly graded X, W1's float-sized absolute errors mix large columns
// into small ones (the column norms of X₀ W1 then differ from X_f's), and
// Jacobi would take many sweeps to undo that: then, as for a singular X₀,
// the sweeps restart from X₀ with W = I. The float copy flushes entries
// below 2⁻⁶⁰ max |X| to zero, so that its dot products stay clear of
// subnormals (slow). Returns the sweeps of the last phase.
template <class T>
int one_sided_jacobi_deferred(Mat<T> X, Mat<T> W, T* nrm2v, Buffer<T>& buf, QrScratch<T>& s, int threads) {
  const int64_t n = X.n;
  const int64_t taus = (n + 16) / 16 * 16;  // keeps the float part 64-byte aligned
  T* cur = buf.get(3 * carve_size<T>(n, n) + static_cast<size_t>(taus) + carve_size<float>(n, n) +
                   static_cast<size_t>(n) + 16);
  Mat<T> X0 = carve<T>(cur, n, n), G = carve<T>(cur, n, n), Wt = carve<T>(cur, n, n);
  T* tau = cur;
  float* fcur = reinterpret_cast<float*>(cur + taus);
  Mat<float> Xf = carve<float>(fcur, n, n);
  float* nf = fcur;
  copy(X, X0);
  T big = 0;
  for (int64_t j = 0; j < n; ++j) big = std::max(big, amax(n - j, X.col(j) + j));
  const T floor = std::ldexp(big, -60);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < n; ++i) Xf(i, j) = std::abs(X(i, j)) < floor ? 0.0f : static_cast<float>(X(i, j));
  bool ok = one_sided_jacobi(Xf, Mat<float>{}, nf, threads) <= kSvdMaxSweeps;
  for (int64_t j = 0; j < n && ok; ++j) ok = X0(j, j) != T(0);
  if (ok) {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < n; ++i) G(i, j) = static_cast<T>(Xf(i, j));
    trsm_left(X0, G, false, false, threads);
    for (int64_t j = 0; j < n && ok; ++j)
      for (int64_t i = 0; i < n && ok; ++i) ok = std::isfinite(G(i, j));
  }
  if (ok) {
    const Mat<T> W1 = W.p ? W : Wt;
    geqrf(G, tau, s, threads);
    orgqr(G, tau, W1, s, threads);
    gemm(false, false, T(1), X0, W1, T(0), X, threads);
    for (int64_t j = 0; j < n && ok; ++j) {
      const T now = dot(n, X.col(j), X.col(j)), was = static_cast<T>(nf[j]);
      ok = std::abs(now - was) <= T(0.01) * was;
    }
    if (ok) return one_sided_jacobi(X, W, nrm2v, threads);
    copy(X0, X);
  }
  if (W.p) set_identity(W);
  return one_sided_jacobi(X, W, nrm2v, threads);
}

// Replaces the columns of Q (m x q, m >= q) whose flag is 0 so that all
// columns are orthonormal; the flagged ones must already be.
template <class T> void complete_columns(Mat<T> Q, const std::vector<char>& good, QrScratch<T>& s, int threads) {
  const int64_t m = Q.m, q = Q.n;
  std::vector<int64_t> keep, fill;
  for (int64_t j = 0; j < q; ++j) (good[j] ? keep : fill).push_back(j);
  if (fill.empty()) return;
  const int64_t g = static_cast<int64_t>(keep.size());
  Buffer<T> buf;
  T* cur = buf.get(carve_size<T>(m, std::max<int64_t>(g, 1)) + carve_size<T>(m, m) + static_cast<size_t>(g) + 64);
  Mat<T> G = carve<T>(cur, m, std::max<int64_t>(g, 1)), F = carve<T>(cur, m, m);
  T* tau = cur;
  G.n = g;
  for (int64_t t = 0; t < g; ++t) std::memcpy(G.col(t), Q.col(keep[t]), sizeof(T) * m);
  geqrf(G, tau, s, threads);
  orgqr(G, tau, F, s, threads);  // F's columns g.. span the complement of the kept ones
  for (size_t t = 0; t < fill.size(); ++t) std::memcpy(Q.col(fill[t]), F.col(g + static_cast<int64_t>(t)), sizeof(T) * m);
}

// ---- compact: W matrices at once --------------------------------------------

// One-sided Jacobi on the m x n (m >= n) matrices in the lanes of A (ld m);
// V (n x n, ld n) <- accumulated rotations when given; nrm2v[n] the squared
// column norms. Returns the sweeps (kSvdMaxSweeps + 1: no convergence).
template <class T> int one_sided_jacobi_lanes(Vec<T>* A, int64_t m, int64_t n, Vec<T>* V, Vec<T>* nrm2v) {
  using V_ = Vec<T>;
  const V_ zero = V_::zero(), one = V_::set1(T(1)), two = V_::set1(T(2)), half = V_::set1(T(0.5));
  const V_ tol = V_::set1(std::numeric_limits<T>::epsilon() * std::sqrt(static_cast<T>(m)));
  const V_ big = V_::set1(T(1) / std::numeric_limits<T>::epsilon());
  for (int64_t j = 0; j < n; ++j) {
    V_ s = zero;
    for (int64_t i = 0; i < m; ++i) s = fma(A[i + j * m], A[i + j * m], s);
    nrm2v[j] = s;
  }
  for (int sweep = 0; sweep < kSvdMaxSweeps; ++sweep) {
    typename V_::Mask any = V_::not_(V_::all_lanes());
    for (int64_t p = 0; p + 1 < n; ++p) {
      V_* ap = A + p * m;
      for (int64_t q = p + 1; q < n; ++q) {
        V_* aq = A + q * m;
        V_ g0 = zero, g1 = zero;
        int64_t i = 0;
        for (; i + 1 < m; i += 2) {
          g0 = fma(ap[i], aq[i], g0);
          g1 = fma(ap[i + 1], aq[i + 1], g1);
        }
        if (i < m) g0 = fma(ap[i], aq[i], g0);
        const V_ g = g0 + g1, np2 = nrm2v[p], nq2 = nrm2v[q];
        const auto rotate = (abs(g) > tol * sqrt(np2) * sqrt(nq2)) & (np2 > zero) & (nq2 > zero);
        if (!V_::any(rotate)) continue;
        any = any | rotate;
        const V_ zeta = (nq2 - np2) / (two * g);
        const V_ az = abs(zeta);
        V_ t = copysign(one / (az + sqrt(fma(az, az, one))), zeta);
        t = select(az > big, half / zeta, t);
        t = select(rotate, t, zero);
        const V_ c = one / sqrt(fma(t, t, one)), s = t * c;
        V_ sp = zero, sq = zero;
        for (int64_t r = 0; r < m; ++r) {
          const V_ x = ap[r], y = aq[r];
          const V_ u = fnma(s, y, c * x), w = fma(s, x, c * y);
          ap[r] = u;
          aq[r] = w;
          sp = fma(u, u, sp);
          sq = fma(w, w, sq);
        }
        nrm2v[p] = sp;
        nrm2v[q] = sq;
        if (V) {
          V_* vp = V + p * n;
          V_* vq = V + q * n;
          for (int64_t r = 0; r < n; ++r) {
            const V_ x = vp[r], y = vq[r];
            vp[r] = fnma(s, y, c * x);
            vq[r] = fma(s, x, c * y);
          }
        }
      }
    }
    if (!V_::any(any)) return sweep;
  }
  return kSvdMaxSweeps + 1;
}

// Householder QR with column pivoting of the m x n (m >= n) matrices in the
// lanes of A (ld m), each lane pivoting on its own: tau[n], perm[j] = the
// original column now at j (as a value), vn1/vn2 scratch[n].
template <class T> void geqp3_lanes(Vec<T>* A, int64_t m, int64_t n, Vec<T>* tau, Vec<T>* perm, Vec<T>* vn1,
                                    Vec<T>* vn2) {
  using V = Vec<T>;
  const V zero = V::zero(), one = V::set1(T(1));
  const V tol3z = V::set1(std::sqrt(std::numeric_limits<T>::epsilon()));
  auto colnorm = [&](int64_t j, int64_t from) {
    V s = zero;
    for (int64_t r = from; r < m; ++r) s = fma(A[r + j * m], A[r + j * m], s);
    return sqrt(s);
  };
  for (int64_t j = 0; j < n; ++j) {
    vn1[j] = vn2[j] = colnorm(j, 0);
    perm[j] = V::set1(static_cast<T>(j));
  }
  for (int64_t i = 0; i < n; ++i) {
    V best = vn1[i], at = V::set1(static_cast<T>(i));
    for (int64_t j = i + 1; j < n; ++j) {
      const auto more = vn1[j] > best;
      best = select(more, vn1[j], best);
      at = select(more, V::set1(static_cast<T>(j)), at);
    }
    for (int64_t j = i + 1; j < n; ++j) {
      const V vj = V::set1(static_cast<T>(j));
      const auto sw = (at >= vj) & (at <= vj);
      if (!V::any(sw)) continue;
      V* ci = A + i * m;
      V* cj = A + j * m;
      for (int64_t r = 0; r < m; ++r) {
        const V x = ci[r], y = cj[r];
        ci[r] = select(sw, y, x);
        cj[r] = select(sw, x, y);
      }
      for (V* arr : {vn1, vn2, perm}) {
        const V x = arr[i], y = arr[j];
        arr[i] = select(sw, y, x);
        arr[j] = select(sw, x, y);
      }
    }
    // Reflector for column i (as geqr2_lanes).
    V* a = A + i * m;
    V ss = zero;
    for (int64_t r = i + 1; r < m; ++r) ss = fma(a[r], a[r], ss);
    const V alpha = a[i];
    const auto skip = ss <= zero;
    const V beta = -copysign(sqrt(fma(alpha, alpha, ss)), alpha);
    const V t = select(skip, zero, (beta - alpha) / beta);
    const V sc = select(skip, one, one / (alpha - beta));
    for (int64_t r = i + 1; r < m; ++r) a[r] = a[r] * sc;
    a[i] = select(skip, alpha, beta);
    tau[i] = t;
    reflect_lanes(a, i, m, t, A, i + 1, n);
    for (int64_t c = i + 1; c < n; ++c) {
      V* cc = A + c * m;
      // Downdate the partial column norm; recompute it when cancellation
      // has eaten its accuracy (LAPACK's test).
      const auto live = vn1[c] > zero;
      const V safe1 = select(live, vn1[c], one), safe2 = select(live, vn2[c], one);
      const V rr = abs(cc[i]) / safe1;
      const V temp = max(zero, fnma(rr, rr, one));
      const V ratio = safe1 / safe2;
      const auto again = (temp * ratio * ratio <= tol3z) & live;
      V next = vn1[c] * sqrt(temp);
      if (V::any(again)) {
        const V fresh = colnorm(c, i + 1);
        next = select(again, fresh, next);
        vn2[c] = select(again, fresh, vn2[c]);
      }
      vn1[c] = select(live, next, vn1[c]);
    }
  }
}

// C (m x q, ld m) <- H_0 ... H_{k-1} C for the reflectors below the diagonal
// of A (m x k, ld m), lanes at once.
template <class T> void apply_q_lanes(const Vec<T>* A, int64_t m, int64_t k, const Vec<T>* tau, Vec<T>* C, int64_t q) {
  for (int64_t j = k; j-- > 0;) reflect_lanes(A + j * m, j, m, tau[j], C, 0, q);
}

}  // namespace sinew::linalg::detail::SINEW_LINALG_ISA
