// The tridiagonal method for W small symmetric matrices at once, one per
// vector lane: Householder tridiagonalization (LAPACK sytd2, lower), Q
// formed from its reflectors (orgtr), then implicit QL (tql2) with per-lane
// shifts. For n = 32 it costs about 1/5 of the flops of cyclic Jacobi with
// vectors (2/3 n³ + 2/3 n³ FMAs for the reduction and Q, about n² rotations
// of n-vectors for QL, against 7 to 9 sweeps of n²/2 rotations of 2 n-vector
// pairs). Included through isa_begin.h only, after householder_impl.h and
// tridiagonal_impl.h.
#pragma once

namespace sinew::linalg::detail::SINEW_LINALG_ISA {

// Tridiagonalizes the symmetric matrices in the lanes of A (n x n, lower
// triangle packed by rows, see cholesky_compact_impl.h; overwritten): Qᵀ A Q = T with
// diagonal d[n] and subdiagonal e[n - 1]; reflector k (tau[k]) is
// v = [1; U(k+2 .., k)] on rows k+1 .. n of Q, U n x n column-major (ld n).
// p: n scratch. A lane whose column is already reduced gets tau = 0, so an
// already tridiagonal (or diagonal) matrix passes through exactly.
template <class T> void sytd2_lanes(Vec<T>* A, int64_t n, Vec<T>* d, Vec<T>* e, Vec<T>* tau, Vec<T>* U, Vec<T>* p) {
  using V = Vec<T>;
  const V zero = V::zero(), one = V::set1(T(1)), half = V::set1(T(0.5));
  // Below this a sum of squares has lost precision to underflow.
  const V ss_min = V::set1(std::numeric_limits<T>::min() / std::numeric_limits<T>::epsilon());
  for (int64_t k = 0; k + 2 < n; ++k) {
    d[k] = A[packed(k, k)];
    V* v = U + k * n;
    const V alpha = A[packed(k + 1, k)];
    V ss = zero;
    for (int64_t i = k + 2; i < n; ++i) ss = fma(A[packed(i, k)], A[packed(i, k)], ss);
    V norm = sqrt(fma(alpha, alpha, ss));
    if (const auto rescue = (ss > zero) & (ss < ss_min); V::any(rescue)) {
      V mx = abs(alpha);
      for (int64_t i = k + 2; i < n; ++i) mx = max(mx, abs(A[packed(i, k)]));
      const V inv = one / select(mx > zero, mx, one);
      const V a = alpha * inv;
      V s2 = a * a;
      for (int64_t i = k + 2; i < n; ++i) {
        const V x = A[packed(i, k)] * inv;
        s2 = fma(x, x, s2);
      }
      norm = select(rescue, mx * sqrt(s2), norm);
    }
    const auto skip = V::not_(ss > zero);
    const V beta = -copysign(norm, alpha);
    const V t = select(skip, zero, (beta - alpha) / beta);
    const V sc = select(skip, one, one / (alpha - beta));
    v[k + 1] = one;
    for (int64_t i = k + 2; i < n; ++i) v[i] = A[packed(i, k)] * sc;
    e[k] = select(skip, alpha, beta);
    tau[k] = t;
    // p = t A22 v (A22 = A(k+1 .., k+1 ..), lower triangle by rows).
    for (int64_t i = k + 1; i < n; ++i) {
      const V* ri = A + packed(i, 0);
      const V vi = v[i];
      V a0 = ri[i] * vi, a1 = zero;
      int64_t j = k + 1;
      for (; j + 1 < i; j += 2) {
        a0 = fma(ri[j], v[j], a0);
        a1 = fma(ri[j + 1], v[j + 1], a1);
        p[j] = fma(ri[j], vi, p[j]);
        p[j + 1] = fma(ri[j + 1], vi, p[j + 1]);
      }
      if (j < i) {
        a0 = fma(ri[j], v[j], a0);
        p[j] = fma(ri[j], vi, p[j]);
      }
      p[i] = a0 + a1;
    }
    V pv = zero;
    for (int64_t i = k + 1; i < n; ++i) {
      p[i] = p[i] * t;
      pv = fma(p[i], v[i], pv);
    }
    // w = p - (t/2)(pᵀv) v in p; A22 -= v wᵀ + w vᵀ.
    const V a2 = -(half * t * pv);
    for (int64_t i = k + 1; i < n; ++i) p[i] = fma(a2, v[i], p[i]);
    for (int64_t i = k + 1; i < n; ++i) {
      V* ri = A + packed(i, 0);
      const V vi = v[i], wi = p[i];
      for (int64_t j = k + 1; j <= i; ++j) ri[j] = fnma(vi, p[j], fnma(wi, v[j], ri[j]));
    }
  }
  if (n >= 2) {
    d[n - 2] = A[packed(n - 2, n - 2)];
    e[n - 2] = A[packed(n - 1, n - 2)];
  }
  d[n - 1] = A[packed(n - 1, n - 1)];
}

// Z (n x n, row-major: Z[r n + c]) <- Q = H_0 ... H_{n-3} of sytd2_lanes.
// Q is formed column-major by reflect_lanes and transposed in place, so
// that ql_lanes walks each row of Z in memory order.
template <class T> void orgtr_lanes(const Vec<T>* U, const Vec<T>* tau, int64_t n, Vec<T>* Z) {
  using V = Vec<T>;
  for (int64_t c = 0; c < n; ++c)
    for (int64_t i = 0; i < n; ++i) Z[i + c * n] = V::set1(i == c ? T(1) : T(0));
  for (int64_t k = n - 3; k >= 0; --k) reflect_lanes(U + k * n, k + 1, n, tau[k], Z, k + 1, n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) std::swap(Z[i + j * n], Z[j + i * n]);
}

// QL iterations whose rotations go through Z in one pass: Z (64 KB for n =
// 32 in f64) does not fit L1, and one pass per iteration had QL bound by
// moving it through L2.
constexpr int kQlChains = 4;

// The rotations of one QL iteration: (c[i], s[i]) of columns i, i+1 for i
// from M - 1 down to l.
template <class T> struct QlChain {
  const Vec<T>* c;
  const Vec<T>* s;
  int64_t l, M;
};

// Rows [r0, r1) of Z (row-major, n columns) <- Z G(0) ... G(k-1), G(j) =
// G_{M-1} ... G_l of chains[j]. Each row carries one column through a whole
// chain in a register, so each entry is loaded and stored once per chain,
// from L1 after the first; four rows at a time hide the FMA latency of the
// chain.
template <class T>
void rotate_rows_lanes(Vec<T>* Z, int64_t n, int64_t r0, int64_t r1, const QlChain<T>* chains, int k) {
  using V = Vec<T>;
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    V* z0 = Z + r * n;
    V* z1 = z0 + n;
    V* z2 = z1 + n;
    V* z3 = z2 + n;
    for (int j = 0; j < k; ++j) {
      const V* c = chains[j].c;
      const V* s = chains[j].s;
      const int64_t l = chains[j].l, M = chains[j].M;
      V f0 = z0[M], f1 = z1[M], f2 = z2[M], f3 = z3[M];
      for (int64_t i = M - 1; i >= l; --i) {
        const V ci = c[i], si = s[i];
        const V a0 = z0[i], a1 = z1[i], a2 = z2[i], a3 = z3[i];
        z0[i + 1] = fma(si, a0, ci * f0);
        z1[i + 1] = fma(si, a1, ci * f1);
        z2[i + 1] = fma(si, a2, ci * f2);
        z3[i + 1] = fma(si, a3, ci * f3);
        f0 = fnma(si, f0, ci * a0);
        f1 = fnma(si, f1, ci * a1);
        f2 = fnma(si, f2, ci * a2);
        f3 = fnma(si, f3, ci * a3);
      }
      z0[l] = f0;
      z1[l] = f1;
      z2[l] = f2;
      z3[l] = f3;
    }
  }
  for (; r < r1; ++r) {
    V* z = Z + r * n;
    for (int j = 0; j < k; ++j) {
      const V* c = chains[j].c;
      const V* s = chains[j].s;
      const int64_t l = chains[j].l, M = chains[j].M;
      V f = z[M];
      for (int64_t i = M - 1; i >= l; --i) {
        const V a = z[i];
        z[i + 1] = fma(s[i], a, c[i] * f);
        f = fnma(s[i], f, c[i] * a);
      }
      z[l] = f;
    }
  }
}

// Implicit QL (tql2, as tridiagonal_ql) on the tridiagonal matrices in the
// lanes of (d[n], e[n - 1]; e needs n entries): d <- the eigenvalues,
// unsorted; Z (row-major, see orgtr_lanes) <- Z times the rotations when
// given. Each lane splits and shifts on its own; a lane whose eigenvalue l
// has converged rotates by the identity until all lanes have. The chain of
// one iteration is a serial run of square roots and divisions while Z's
// update is plain FMAs that d and e do not wait for, so the rotations of
// kQlChains iterations are applied to Z in one pass, a few rows at a time
// during the next kQlChains iterations' chains. rc, rs: 2 kQlChains n
// scratch each. A lane splits at e[m] once |e[m]| <= tol (|d[m]| + |d[m+1]|),
// tol = ε unless given. Returns false when a lane took more than kQlMaxIterations
// iterations for one eigenvalue or a rotation underflowed to 0 (then d, e
// and Z hold garbage).
template <class T> bool ql_lanes(Vec<T>* d, Vec<T>* e, int64_t n, Vec<T>* Z, Vec<T>* rc, Vec<T>* rs, T tol = 0) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const T eps = std::numeric_limits<T>::epsilon();
  const V veps = V::set1(tol > 0 ? tol : eps), zero = V::zero(), one = V::set1(T(1)), two = V::set1(T(2));
  // Below this f² + g² has lost precision to underflow.
  const V r_min = V::set1(std::sqrt(std::numeric_limits<T>::min()) / eps);
  e[n - 1] = zero;
  // Two batches of chains: one being built, the other pending, its rows
  // [prow, n) still to rotate.
  QlChain<T> batch[2][kQlChains];
  int cur = 0, built = 0, pending = 0;
  int64_t prow = n;
  auto drain = [&](int64_t upto) {
    if (Z && prow < upto) rotate_rows_lanes(Z, n, prow, upto, batch[cur ^ 1], pending);
    prow = std::max(prow, upto);
  };
  for (int64_t l = 0; l + 1 < n; ++l) {
    for (int iter = 0;; ++iter) {
      // m: the first negligible e[m] from l on, per lane (n - 1: none).
      V mv = V::set1(static_cast<T>(n - 1));
      auto found = V::not_(V::all_lanes());
      for (int64_t m = l; m + 1 < n; ++m) {
        const auto split = abs(e[m]) <= veps * (abs(d[m]) + abs(d[m + 1]));
        mv = select(split & V::not_(found), V::set1(static_cast<T>(m)), mv);
        found = found | split;
        if (!V::any(V::not_(found))) break;
      }
      const auto active = V::set1(static_cast<T>(l)) < mv;
      if (!V::any(active)) break;
      if (iter == kQlMaxIterations) return false;
      alignas(64) T mt[W];
      mv.store(mt);
      int64_t M = l;
      for (int w = 0; w < W; ++w) M = std::max(M, static_cast<int64_t>(mt[w]));
      const V el = select(active, e[l], one);
      V g = (d[l + 1] - d[l]) / (two * el);
      const V ag = abs(g);
      const auto gbig = ag > one;
      const V q = select(gbig, one / ag, ag);
      V r = select(gbig, ag, one) * sqrt(fma(q, q, one));  // hypot(g, 1) without overflow
      V dm = d[l];
      for (int64_t i = l + 1; i <= M; ++i) dm = select(V::set1(static_cast<T>(i)) <= mv, d[i], dm);
      g = dm - d[l] + el / (g + copysign(r, g));
      V s = one, c = one, p = zero;
      V* rc_ = rc + (cur * kQlChains + built) * n;
      V* rs_ = rs + (cur * kQlChains + built) * n;
      for (int64_t i = M - 1; i >= l; --i) {
        drain(std::min(n, ((built * (M - l) + M - i) * n / (kQlChains * (M - l)) + 3) / 4 * 4));
        const auto act = V::set1(static_cast<T>(i)) < mv;
        const V f = s * e[i], b = c * e[i];
        const V x = fma(f, f, g * g);
        V inv = newton_rsqrt(x);
        r = x * inv;
        if (V::any(act & V::not_(r >= r_min))) {  // small, zero or NaN
          r = sqrt(x);
          const V mx = max(abs(f), abs(g));
          const V sc = one / select(mx > zero, mx, one);
          const V fs = f * sc, gs = g * sc;
          r = select(r < r_min, mx * sqrt(fma(fs, fs, gs * gs)), r);
          if (V::any(act & V::not_(r > zero))) return false;
          inv = one / select(act, r, one);
        }
        e[i + 1] = select(act, r, e[i + 1]);
        const V sn = f * inv, cn = g * inv;
        const V gn = d[i + 1] - p;
        const V rn = fma(d[i] - gn, sn, two * cn * b);
        const V pn = sn * rn;
        d[i + 1] = select(act, gn + pn, d[i + 1]);
        g = select(act, fnma(one, b, cn * rn), g);
        s = select(act, sn, s);
        c = select(act, cn, c);
        p = select(act, pn, p);
        rc_[i] = select(act, cn, one);
        rs_[i] = select(act, sn, zero);
      }
      d[l] = select(active, d[l] - p, d[l]);
      e[l] = select(active, g, e[l]);
      for (int64_t i = l + 1; i <= M; ++i) {
        const V vi = V::set1(static_cast<T>(i));
        e[i] = select(active & (vi <= mv) & (mv <= vi), zero, e[i]);
      }
      batch[cur][built++] = {rc_, rs_, l, M};
      if (built == kQlChains) {
        drain(n);
        pending = built;
        built = 0;
        prow = 0;
        cur ^= 1;
      }
    }
  }
  drain(n);
  pending = built;
  prow = 0;
  cur ^= 1;
  drain(n);
  return true;
}

// Scratch (in vectors) of tridiagonal_eigh_lanes for order n.
inline int64_t tridiagonal_eigh_lanes_scratch(int64_t n) { return n * n + (3 + 4 * kQlChains) * n; }

// The eigenvalues d[n] (unsorted) and, when Z is given, the eigenvectors Z
// (n x n, row-major) of the symmetric matrices in the lanes of A (lower
// triangle packed by rows, overwritten): sytd2_lanes, orgtr_lanes and
// ql_lanes (splitting at tol, ε unless given). Returns false where ql_lanes
// does.
template <class T>
bool tridiagonal_eigh_lanes(Vec<T>* A, int64_t n, Vec<T>* d, Vec<T>* Z, Vec<T>* scratch, T tol = 0) {
  Vec<T>* U = scratch;
  Vec<T>* e = U + n * n;
  Vec<T>* tau = e + n;
  Vec<T>* p = tau + n;
  Vec<T>* rc = p + n;
  Vec<T>* rs = rc + 2 * kQlChains * n;
  sytd2_lanes(A, n, d, e, tau, U, p);
  if (Z) orgtr_lanes(U, tau, n, Z);
  return ql_lanes(d, e, n, Z, rc, rs, tol);
}

}  // namespace sinew::linalg::detail::SINEW_LINALG_ISA
