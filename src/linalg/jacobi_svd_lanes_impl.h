// The compact (lanes) one-sided Jacobi of the SVD: the steps of
// jacobi_svd_impl.h run on W small matrices at once, one per vector lane.
// Included through isa_begin.h only, after jacobi_svd_impl.h.
#pragma once

namespace sinew::linalg::detail::SINEW_LINALG_ISA {

// Lane by lane, the rotation (c, s, t = tan θ) that makes the columns with
// squared norms np2, nq2 and dot product g orthogonal: the identity (c = 1,
// s = t = 0) in lanes where they already are to working precision or either
// is zero. Returns the lanes that rotate. The formulas of `rotation`, but
// with no division or square root instruction: those are not pipelined, and
// with seven of them per rotation they bounded the whole sweep. The
// reciprocal and inverse square roots come from the 14-bit approximations
// refined by Newton steps (FMAs): t to a few ulps, and c = 1 / √(1 + t²),
// s = t c from that t, so that the rotation is orthogonal to working
// precision whatever t's last bits (they only steer the angle). Scaling d
// and g by about 1 / max(np2, nq2) changes neither t nor c, so that scale
// may be approximate; the test |g| > tol √(np2 nq2) is (g/mx · rtol)² >
// min/mx in those scaled terms (rtol = 1/tol), with no square root. Where a
// lane's larger squared norm is subnormal, all lanes take the ζ form with
// exact divisions instead, which needs no scaling.
template <class P>
[[gnu::always_inline]] inline typename P::Mask rotation_lanes(P np2, P nq2, P g, P rtol, P& c, P& s, P& t) {
  using T = typename P::Scalar;
  const P zero = P::zero(), one = P::set1(T(1)), two = P::set1(T(2));
  const P mx = max(np2, nq2);
  const auto live = (np2 > zero) & (nq2 > zero);
  if (!P::any(live & (mx < P::set1(std::numeric_limits<T>::min())))) [[likely]] {
    const P inv = rcp_approx(mx);
    const P d = (nq2 - np2) * inv, e = g * inv, ek = e * rtol;
    const auto rotate = live & (ek * ek > min(np2, nq2) * inv);
    const P x = fma(d, d, P::set1(T(4)) * e * e);
    const P h = x * newton_rsqrt(x);  // NaN where d = e = 0: not a rotating lane
    const P e2 = two * e;
    t = select(rotate, select(d < zero, -e2, e2) * newton_rcp(abs(d) + h), zero);
    c = newton_rsqrt(fma(t, t, one));
    s = t * c;
    return rotate;
  }
  const auto rotate = (abs(g) * rtol > sqrt(np2) * sqrt(nq2)) & live;
  const P zeta = (nq2 - np2) / (two * g);  // lanes that do not rotate may hold inf or NaN: discarded below
  const P az = abs(zeta);
  P tt = copysign(one / (az + sqrt(fma(az, az, one))), zeta);
  tt = select(az > P::set1(T(1) / std::numeric_limits<T>::epsilon()), P::set1(T(0.5)) / zeta, tt);
  t = select(rotate, tt, zero);
  c = one / sqrt(fma(t, t, one));
  s = t * c;
  return rotate;
}

// Σ x_i y_i over m rows of lanes, two accumulators (the sum chains on the
// FMA latency otherwise).
template <class P>
[[gnu::always_inline]] inline P dot_lanes(int64_t m, const P* x, const P* y) {
  P a = P::zero(), b = P::zero();
  int64_t i = 0;
  for (; i + 1 < m; i += 2) {
    a = fma(x[i], y[i], a);
    b = fma(x[i + 1], y[i + 1], b);
  }
  if (i < m) a = fma(x[i], y[i], a);
  return a + b;
}

// The compact sweeps apply every rotation in LAPACK gsvj0's scaled ("fast")
// form: column j is held as y_j with x_j = d_j y_j (V's columns likewise,
// with the same d_j), so that turning (x_p, x_q) by (c, s) is
//   y_p <- y_p - a y_q,  y_q <- y_q + b y_p,  a = t d_q / d_p,  b = t d_p / d_q,
// then d_p, d_q <- c d_p, c d_q: two FMAs per row instead of four, on the
// columns and on V. Each update is one FMA of the exact terms, as accurate
// as the plain rotation. The d_j shrink by at most c >= 1/√2 per rotation,
// and are folded back into the columns at each sweep's start.
template <class P>
struct LaneScales {
  P* d;   // d_j
  P* di;  // 1 / d_j
};

// Plans the rotation of columns p and q (dot product of the held columns
// gy): the actual g, (a, b) for the held columns, t for the norms, and the
// scales updated. Returns the lanes that rotate (a = b = 0 elsewhere).
template <class P>
[[gnu::always_inline]] inline typename P::Mask plan_lanes(const P* nrm, LaneScales<P> sc, int64_t p, int64_t q, P gy,
                                                          P rtol, P& a, P& b, P& g, P& t) {
  using T = typename P::Scalar;
  g = sc.d[p] * sc.d[q] * gy;
  P c, s;
  const auto r = rotation_lanes(nrm[p], nrm[q], g, rtol, c, s, t);
  a = t * sc.d[q] * sc.di[p];
  b = t * sc.d[p] * sc.di[q];
  const P ci = fma(t, t, P::set1(T(1))) * c;  // 1 / c
  sc.d[p] = sc.d[p] * c;
  sc.d[q] = sc.d[q] * c;
  sc.di[p] = sc.di[p] * ci;
  sc.di[q] = sc.di[q] * ci;
  return r;
}

// The squared norms of columns p and q after rotating by t: α − t g and
// β + t g, or recomputed from the columns where that cancels in some lane
// (as rotated_norms).
template <class P>
[[gnu::always_inline]] inline void rotated_norms_lanes(const P* A, int64_t m, P* nrm, LaneScales<P> sc, int64_t p,
                                                       int64_t q, P t, P g, typename P::Mask rotate) {
  using T = typename P::Scalar;
  const P tg = t * g, np2 = nrm[p] - tg, nq2 = nrm[q] + tg, quarter = P::set1(T(0.25));
  if (P::any(rotate & P::not_((np2 > quarter * nrm[p]) & (nq2 > quarter * nrm[q])))) {
    nrm[p] = sc.d[p] * sc.d[p] * dot_lanes(m, A + p * m, A + p * m);
    nrm[q] = sc.d[q] * sc.d[q] * dot_lanes(m, A + q * m, A + q * m);
  } else {
    nrm[p] = np2;
    nrm[q] = nq2;
  }
}

// One row of a scaled rotation of held columns: x <- x - a y, y <- y + b x.
template <class P>
[[gnu::always_inline]] inline void turn_lanes(P& x, P& y, P a, P b) {
  const P u = fnma(a, y, x);
  y = fma(b, x, y);
  x = u;
}

// Turns the held columns (x0, y0) by (a0, b0) and (x1, y1) by (a1, b1), m
// rows of lanes, in one pass, with the dot products of held columns that D
// asks for (as rot2).
template <class P, Dots D>
[[gnu::always_inline]] inline void rot2_lanes(int64_t m, P* x0, P* y0, P a0, P b0, P* x1, P* y1, P a1, P b1,
                                              const P* z0 = nullptr, const P* z1 = nullptr, P* g0 = nullptr,
                                              P* g1 = nullptr) {
  // Four partial sums per dot product, a row each: the next rotation waits
  // for them, and one chain of m FMAs would be most of that wait.
  constexpr int K = 4;
  P s0[K], s1[K];
  for (int k = 0; k < K; ++k) s0[k] = s1[k] = P::zero();
  auto row = [&](int64_t i, int k) {
    P u0 = x0[i], v0 = y0[i], u1 = x1[i], v1 = y1[i];
    turn_lanes(u0, v0, a0, b0);
    turn_lanes(u1, v1, a1, b1);
    x0[i] = u0;
    y0[i] = v0;
    x1[i] = u1;
    y1[i] = v1;
    if constexpr (D == Dots::kCross) {
      s0[k] = fma(u0, v1, s0[k]);
      s1[k] = fma(u1, v0, s1[k]);
    } else if constexpr (D == Dots::kNext) {
      s0[k] = fma(u0, z0[i], s0[k]);
      s1[k] = fma(u1, z1[i], s1[k]);
    }
  };
  int64_t i = 0;
  for (; i + K <= m; i += K) {
#pragma GCC unroll 4
    for (int k = 0; k < K; ++k) row(i + k, k);
  }
  for (; i < m; ++i) row(i, 0);
  if constexpr (D != Dots::kNone) {
    *g0 = (s0[0] + s0[1]) + (s0[2] + s0[3]);
    *g1 = (s1[0] + s1[1]) + (s1[2] + s1[3]);
  }
}

// Turns the held columns (x, y) by (a, b), m rows of lanes.
template <class P>
[[gnu::always_inline]] inline void rot_lanes(int64_t m, P* x, P* y, P a, P b) {
  for (int64_t i = 0; i < m; ++i) turn_lanes(x[i], y[i], a, b);
}

// The jacobi_*_lanes kernels below stay out of line: inlined into the sweep
// loop, they had GCC spill the sweep's state around them.

// One pair (p, q) of the lanes' columns: rotates it (and V's columns, when
// set) where it is not orthogonal. Returns the lanes that rotated.
template <class P>
[[gnu::noinline]] typename P::Mask jacobi_pair_lanes(P* A, int64_t m, P* V, int64_t n, P* nrm, LaneScales<P> sc,
                                                     int64_t p, int64_t q, P rtol) {
  P a, b, g, t;
  const auto r = plan_lanes(nrm, sc, p, q, dot_lanes(m, A + p * m, A + q * m), rtol, a, b, g, t);
  if (!P::any(r)) return r;
  rot_lanes(m, A + p * m, A + q * m, a, b);
  rotated_norms_lanes(A, m, nrm, sc, p, q, t, g, r);
  if (V) rot_lanes(n, V + p * n, V + q * n, a, b);
  return r;
}

// Two disjoint pairs (p0, q0) and (p1, q1) of the lanes' columns, the dot
// products of their held columns given: rotates both in one pass (the
// columns of V too, when set). Returns the lanes that rotated either pair.
template <class P>
[[gnu::noinline]] typename P::Mask jacobi_two_lanes(P* A, int64_t m, P* V, int64_t n, P* nrm, LaneScales<P> sc,
                                                    int64_t p0, int64_t q0, int64_t p1, int64_t q1, P gy0, P gy1,
                                                    P rtol) {
  P a0, b0, g0, t0, a1, b1, g1, t1;
  const auto r0 = plan_lanes(nrm, sc, p0, q0, gy0, rtol, a0, b0, g0, t0);
  const auto r1 = plan_lanes(nrm, sc, p1, q1, gy1, rtol, a1, b1, g1, t1);
  const auto r = r0 | r1;
  if (!P::any(r)) return r;
  rot2_lanes<P, Dots::kNone>(m, A + p0 * m, A + q0 * m, a0, b0, A + p1 * m, A + q1 * m, a1, b1);
  rotated_norms_lanes(A, m, nrm, sc, p0, q0, t0, g0, r0);
  rotated_norms_lanes(A, m, nrm, sc, p1, q1, t1, g1, r1);
  if (V) rot2_lanes<P, Dots::kNone>(n, V + p0 * n, V + q0 * n, a0, b0, V + p1 * n, V + q1 * n, a1, b1);
  return r;
}

// The four pairs of columns p0, p1 against q0, q1 of the lanes, as
// jacobi_quad: (p0, q0) with (p1, q1), then (p0, q1) with (p1, q0), whose
// dot products come out of the first pass; g[2] holds the held columns'
// first two dot products and returns those of p0, p1 with n0, n1 when
// n0 >= 0. ab[8] returns the four rotations (a, b), for V. Returns the
// lanes that rotated.
template <class P>
[[gnu::noinline]] typename P::Mask jacobi_quad_lanes(P* A, int64_t m, P* nrm, LaneScales<P> sc, int64_t p0, int64_t p1,
                                                     int64_t q0, int64_t q1, P rtol, P* g, int64_t n0, int64_t n1,
                                                     P* ab) {
  P* x0 = A + p0 * m;
  P* x1 = A + p1 * m;
  P* y0 = A + q0 * m;
  P* y1 = A + q1 * m;
  P a0, b0, f0, t0, a1, b1, f1, t1, h0, h1;
  const auto r0 = plan_lanes(nrm, sc, p0, q0, g[0], rtol, a0, b0, f0, t0);
  const auto r1 = plan_lanes(nrm, sc, p1, q1, g[1], rtol, a1, b1, f1, t1);
  if (P::any(r0 | r1)) {
    rot2_lanes<P, Dots::kCross>(m, x0, y0, a0, b0, x1, y1, a1, b1, nullptr, nullptr, &h0, &h1);
    rotated_norms_lanes(A, m, nrm, sc, p0, q0, t0, f0, r0);
    rotated_norms_lanes(A, m, nrm, sc, p1, q1, t1, f1, r1);
  } else {
    h0 = dot_lanes(m, x0, y1);
    h1 = dot_lanes(m, x1, y0);
  }
  P a2, b2, f2, t2, a3, b3, f3, t3;
  const auto r2 = plan_lanes(nrm, sc, p0, q1, h0, rtol, a2, b2, f2, t2);
  const auto r3 = plan_lanes(nrm, sc, p1, q0, h1, rtol, a3, b3, f3, t3);
  if (P::any(r2 | r3)) {
    if (n0 >= 0)
      rot2_lanes<P, Dots::kNext>(m, x0, y1, a2, b2, x1, y0, a3, b3, A + n0 * m, A + n1 * m, &g[0], &g[1]);
    else
      rot2_lanes<P, Dots::kNone>(m, x0, y1, a2, b2, x1, y0, a3, b3);
    rotated_norms_lanes(A, m, nrm, sc, p0, q1, t2, f2, r2);
    rotated_norms_lanes(A, m, nrm, sc, p1, q0, t3, f3, r3);
  } else if (n0 >= 0) {
    g[0] = dot_lanes(m, x0, A + n0 * m);
    g[1] = dot_lanes(m, x1, A + n1 * m);
  }
  ab[0] = a0, ab[1] = b0, ab[2] = a1, ab[3] = b1, ab[4] = a2, ab[5] = b2, ab[6] = a3, ab[7] = b3;
  return r0 | r1 | r2 | r3;
}

// V <- V J for the rotations of quads of columns p0, p1 against q[k],
// q[k] + 1 (ab[8 k ..] as jacobi_quad_lanes returns them), n rows of lanes:
// as rotate_quads, the rows of p0 and p1 stay in registers across the quads.
template <class P>
void rotate_quads_lanes(P* V, int64_t n, int64_t p0, int64_t p1, const int64_t* q, const P* ab, int64_t quads) {
  constexpr int64_t R = 4;  // independent rows: the rotations chain through P0, P1
  P* w0 = V + p0 * n;
  P* w1 = V + p1 * n;
  int64_t i0 = 0;
  for (; i0 + R <= n; i0 += R) {
    P P0[R], P1[R];
    for (int64_t r = 0; r < R; ++r) P0[r] = w0[i0 + r], P1[r] = w1[i0 + r];
    for (int64_t k = 0; k < quads; ++k) {
      P* v0 = V + q[k] * n + i0;
      P* v1 = v0 + n;
      const P* e = ab + 8 * k;
      for (int64_t r = 0; r < R; ++r) {
        P Q0 = v0[r], Q1 = v1[r];
        turn_lanes(P0[r], Q0, e[0], e[1]);
        turn_lanes(P1[r], Q1, e[2], e[3]);
        turn_lanes(P0[r], Q1, e[4], e[5]);
        turn_lanes(P1[r], Q0, e[6], e[7]);
        v0[r] = Q0;
        v1[r] = Q1;
      }
    }
    for (int64_t r = 0; r < R; ++r) w0[i0 + r] = P0[r], w1[i0 + r] = P1[r];
  }
  for (; i0 < n; ++i0) {
    P P0 = w0[i0], P1 = w1[i0];
    for (int64_t k = 0; k < quads; ++k) {
      P* v0 = V + q[k] * n + i0;
      P* v1 = v0 + n;
      const P* e = ab + 8 * k;
      P Q0 = *v0, Q1 = *v1;
      turn_lanes(P0, Q0, e[0], e[1]);
      turn_lanes(P1, Q1, e[2], e[3]);
      turn_lanes(P0, Q1, e[4], e[5]);
      turn_lanes(P1, Q0, e[6], e[7]);
      *v0 = Q0;
      *v1 = Q1;
    }
    w0[i0] = P0, w1[i0] = P1;
  }
}

// Every pair of columns [ilo, ihi) x [jlo, jhi) of the lanes: by quads,
// each passing the next one's first dot products along; V turns after each
// row of quads; odd columns left over go pair by pair. [jlo, jhi) goes in
// chunks of kLaneChunk columns, each chunk against all of [ilo, ihi), so
// that the chunk's columns of X and V stay in L1 while the p columns stream
// by (a pass over columns in L1 took 54 ns here, 136 ns from L2). qs and ab:
// scratch for a row of quads. Returns the lanes that rotated.
constexpr int64_t kLaneChunk = 8;

template <class P>
typename P::Mask jacobi_cross_lanes(P* A, int64_t m, P* V, int64_t n, P* nrm, LaneScales<P> sc, int64_t ilo,
                                    int64_t ihi, int64_t jlo, int64_t jhi, P rtol, int64_t* qs, P* ab) {
  auto any = P::not_(P::all_lanes());
  auto col = [&](int64_t j) { return A + j * m; };
  for (int64_t c0 = jlo; c0 < jhi; c0 += kLaneChunk) {
    const int64_t c1 = std::min(c0 + kLaneChunk, jhi);
    int64_t p = ilo;
    for (; p + 1 < ihi; p += 2) {
      int64_t quads = 0, q = c0;
      P g[2];
      for (; q + 1 < c1; q += 2) {
        if (q == c0) g[0] = dot_lanes(m, col(p), col(q)), g[1] = dot_lanes(m, col(p + 1), col(q + 1));
        const bool more = q + 3 < c1;
        const auto r = jacobi_quad_lanes(A, m, nrm, sc, p, p + 1, q, q + 1, rtol, g, more ? q + 2 : -1,
                                         more ? q + 3 : -1, ab + 8 * quads);
        if (P::any(r)) {
          any = any | r;
          qs[quads++] = q;
        }
      }
      if (V && quads) rotate_quads_lanes(V, n, p, p + 1, qs, ab, quads);
      if (q < c1) {
        any = any | jacobi_pair_lanes(A, m, V, n, nrm, sc, p, q, rtol);
        any = any | jacobi_pair_lanes(A, m, V, n, nrm, sc, p + 1, q, rtol);
      }
    }
    if (p < ihi)
      for (int64_t q = c0; q < c1; ++q) any = any | jacobi_pair_lanes(A, m, V, n, nrm, sc, p, q, rtol);
  }
  return any;
}

// Every pair of columns in [lo, hi) that the pairs 2a, 2a + 1 leave: the
// halves' (split at an even offset), then the halves against each other, so
// that the columns a cross visits over and over are few enough to stay in
// L1 (the whole of a group's X does not fit there in f64).
template <class P>
typename P::Mask jacobi_cross_all_lanes(P* A, int64_t m, P* V, int64_t n, P* nrm, LaneScales<P> sc, int64_t lo,
                                        int64_t hi, P rtol, int64_t* qs, P* ab) {
  if (hi - lo <= 2) return P::not_(P::all_lanes());
  const int64_t mid = lo + 2 * ((hi - lo + 3) / 4);
  auto any = jacobi_cross_all_lanes(A, m, V, n, nrm, sc, lo, mid, rtol, qs, ab);
  any = any | jacobi_cross_all_lanes(A, m, V, n, nrm, sc, mid, hi, rtol, qs, ab);
  return any | jacobi_cross_lanes(A, m, V, n, nrm, sc, lo, mid, mid, hi, rtol, qs, ab);
}

// One-sided Jacobi on the m x n (m >= n, n <= kCompactSvdMax) matrices in
// the lanes of A (ld m); V (n x n, ld n) <- accumulated rotations when
// given; nrm2v[n] the squared column norms. Returns the sweeps
// (kSvdMaxSweeps + 1: no convergence). A sweep visits the pairs as
// one_sided_jacobi's block does: the columns 2a, 2a + 1 against each other
// (two such pairs at a time), then quads of columns 2a, 2a + 1 against 2b,
// 2b + 1, each pass rotating two disjoint pairs and computing the next
// pairs' dot products; V turns once per row of quads. A lane's rotation is
// computed from its own columns only, so every matrix gets the rotations it
// would get alone; a pair is skipped when no lane rotates it.
template <class P>
int one_sided_jacobi_lanes(P* A, int64_t m, int64_t n, P* V, P* nrm2v) {
  using T = typename P::Scalar;
  // 1 / the tolerance: pairs are orthogonal once |g| <= ε √m ‖x_p‖ ‖x_q‖.
  const P rtol = P::set1(T(1) / (std::numeric_limits<T>::epsilon() * std::sqrt(static_cast<T>(m))));
  const int64_t h = n / 2;  // column pairs 2a, 2a + 1; an odd last column is paired one by one
  int64_t qs[kLaneChunk / 2];  // a row of quads, within a chunk
  P ab[8 * (kLaneChunk / 2)], d[kCompactSvdMax], di[kCompactSvdMax];
  const LaneScales<P> sc{d, di};
  auto col = [&](int64_t j) { return A + j * m; };
  std::fill(d, d + n, P::set1(T(1)));
  // Folds the scales into the columns (and V's); from then on x_j = y_j.
  auto fold = [&] {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < m; ++i) col(j)[i] = col(j)[i] * d[j];
      if (V)
        for (int64_t i = 0; i < n; ++i) V[i + j * n] = V[i + j * n] * d[j];
      d[j] = di[j] = P::set1(T(1));
      nrm2v[j] = dot_lanes(m, col(j), col(j));  // exact norms: the updates' rounding does not pile up
    }
  };
  for (int sweep = 0; sweep < kSvdMaxSweeps; ++sweep) {
    fold();
    auto any = P::not_(P::all_lanes());
    int64_t a = 0;
    for (; a + 1 < h; a += 2) {
      const P g0 = dot_lanes(m, col(2 * a), col(2 * a + 1)), g1 = dot_lanes(m, col(2 * a + 2), col(2 * a + 3));
      any = any | jacobi_two_lanes(A, m, V, n, nrm2v, sc, 2 * a, 2 * a + 1, 2 * a + 2, 2 * a + 3, g0, g1, rtol);
    }
    if (a < h) any = any | jacobi_pair_lanes(A, m, V, n, nrm2v, sc, 2 * a, 2 * a + 1, rtol);
    any = any | jacobi_cross_all_lanes(A, m, V, n, nrm2v, sc, 0, n, rtol, qs, ab);
    if (!P::any(any)) {
      fold();
      return sweep;
    }
  }
  fold();
  return kSvdMaxSweeps + 1;
}

}  // namespace sinew::linalg::detail::SINEW_LINALG_ISA
