// SVD by one-sided Jacobi (Hestenes) with QR preconditioning (Drmač and
// Veselić): rows sorted by norm, Householder QR with column pivoting
// A P = Q R (pivoted_qr_impl.h), a second QR Rᵀ = Q₂ R₂ (svd_isa.h), then one-sided Jacobi on
// the columns of X = R₂ᵀ, graded and nearly orthogonal, so that it needs
// fewer sweeps and keeps small singular values relatively accurate. Column
// pairs are visited block pair by block pair in round-robin order (disjoint
// block pairs in parallel, each block pair's columns of X and of the
// accumulated rotations W staying in cache while it runs); inside a block
// pair, by quads of two columns against two, two disjoint pairs at a time,
// each rotation pass computing the next pairs' dot products, and W turned
// once per row of quads. Every rotation is still computed from the dot
// product of the current columns (no Gram matrix), which is what keeps the
// relative accuracy. Compact kernels (jacobi_svd_lanes_impl.h) run the same
// steps on W small matrices at once, one per lane. Included through
// isa_begin.h only, after pivoted_qr_impl.h.
#pragma once

namespace sinew::linalg::detail::SINEW_LINALG_ISA {

constexpr int kSvdMaxSweeps = 30;
constexpr int64_t kSvdBlock = 32;  // columns per block of the pair ordering
constexpr int64_t kCompactSvdMax = 40;  // largest m and n that the compact (lanes) path takes

// The rotation [c s; -s c] that makes columns p and q orthogonal, given
// their squared norms and g = x_pᵀx_q: false when they already are to
// working precision. With d = ‖x_q‖² − ‖x_p‖², t = tan θ = 2g sgn(d) /
// (|d| + h) and cos θ = √((|d| + h) / 2h), h = √(d² + 4g²): the smaller
// angle (as ζ = d / 2g, t = sgn(ζ) / (|ζ| + √(1 + ζ²))), but with two
// dependent square roots and divisions instead of five, which matters
// because every rotation waits for them. Scaling d and g by the larger
// norm keeps d² + 4g² in range.
template <class T> inline bool rotation(T np2, T nq2, T g, T tol, T& c, T& s, T& t) {
  if (np2 == T(0) || nq2 == T(0)) return false;
  if (!(std::abs(g) > tol * std::sqrt(np2) * std::sqrt(nq2))) return false;
  const T mx = std::max(np2, nq2);
  T d, e;
  if (mx >= std::numeric_limits<T>::min()) [[likely]] {
    const T inv = T(1) / mx;
    d = (nq2 - np2) * inv;
    e = g * inv;
  } else {  // subnormal squared norms (columns below ~1e-154 in f64): 1 / mx would overflow
    const int k = std::ilogb(mx);
    d = std::ldexp(nq2 - np2, -k);
    e = std::ldexp(g, -k);
  }
  const T ad = std::abs(d);
  const T h = std::sqrt(d * d + T(4) * e * e);
  t = (d < T(0) ? T(-2) * e : T(2) * e) / (ad + h);
  c = std::sqrt((ad + h) / (T(2) * h));
  s = t * c;
  return true;
}

// The squared norms after rotating by t: α − t g and β + t γ (exact in exact
// arithmetic), recomputed when that cancels.
template <class T> inline void rotated_norms(Mat<T> X, T* nrm2v, int64_t p, int64_t q, T t, T g) {
  const T np2 = nrm2v[p] - t * g, nq2 = nrm2v[q] + t * g;
  if (np2 > T(0.25) * nrm2v[p] && nq2 > T(0.25) * nrm2v[q]) {
    nrm2v[p] = np2;
    nrm2v[q] = nq2;
  } else {
    nrm2v[p] = dot(X.m, X.col(p), X.col(p));
    nrm2v[q] = dot(X.m, X.col(q), X.col(q));
  }
}

// x0ᵀy0 and x1ᵀy1 in one pass.
template <class T> inline void dot2(int64_t n, const T* x0, const T* y0, const T* x1, const T* y1, T* g0, T* g1) {
  using V = Vec<T>;
  constexpr int W = V::W;
  V a0 = V::zero(), a1 = V::zero(), b0 = V::zero(), b1 = V::zero();
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    a0 = fma(V::load(x0 + i), V::load(y0 + i), a0);
    b0 = fma(V::load(x1 + i), V::load(y1 + i), b0);
    a1 = fma(V::load(x0 + i + W), V::load(y0 + i + W), a1);
    b1 = fma(V::load(x1 + i + W), V::load(y1 + i + W), b1);
  }
  for (; i < n; i += W) {
    const int r = static_cast<int>(std::min<int64_t>(W, n - i));
    a0 = fma(V::load_n(x0 + i, r), V::load_n(y0 + i, r), a0);
    b0 = fma(V::load_n(x1 + i, r), V::load_n(y1 + i, r), b0);
  }
  *g0 = reduce_add(a0 + a1);
  *g1 = reduce_add(b0 + b1);
}

// What rot2 computes besides: nothing, x0ᵀy1 and x1ᵀy0 of the results, or
// x0ᵀz0 and x1ᵀz1 (z0, z1 two more columns).
enum class Dots { kNone, kCross, kNext };

// Rotates (x0, y0) by (c0, s0) and (x1, y1) by (c1, s1) in one pass (the
// columns distinct), with the dot products D asks for, so that the next
// pairs need not load their columns again.
template <class T, Dots D>
inline void rot2(int64_t n, T* x0, T* y0, T c0, T s0, T* x1, T* y1, T c1, T s1, const T* z0 = nullptr,
                 const T* z1 = nullptr, T* g0 = nullptr, T* g1 = nullptr) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const V vc0 = V::set1(c0), vs0 = V::set1(s0), vc1 = V::set1(c1), vs1 = V::set1(s1);
  V a = V::zero(), b = V::zero();
  for (int64_t i = 0; i < n; i += W) {
    const int r = static_cast<int>(std::min<int64_t>(W, n - i));
    const bool full = r == W;
    auto ld = [&](const T* x) { return full ? V::load(x + i) : V::load_n(x + i, r); };
    auto st = [&](V v, T* x) {
      if (full) v.store(x + i);
      else v.store_n(x + i, r);
    };
    const V p0 = ld(x0), q0 = ld(y0), p1 = ld(x1), q1 = ld(y1);
    const V u0 = fnma(vs0, q0, vc0 * p0), v0 = fma(vs0, p0, vc0 * q0);
    const V u1 = fnma(vs1, q1, vc1 * p1), v1 = fma(vs1, p1, vc1 * q1);
    st(u0, x0);
    st(v0, y0);
    st(u1, x1);
    st(v1, y1);
    if constexpr (D == Dots::kCross) {
      a = fma(u0, v1, a);
      b = fma(u1, v0, b);
    } else if constexpr (D == Dots::kNext) {
      a = fma(u0, ld(z0), a);
      b = fma(u1, ld(z1), b);
    }
  }
  if constexpr (D != Dots::kNone) {
    *g0 = reduce_add(a);
    *g1 = reduce_add(b);
  }
}

// The columns rotated in the last sweep (before) and in this one (now): a
// pair neither of whose columns changed since it was found orthogonal
// still is, so the last sweeps, which rotate few pairs, check only pairs
// that a rotation touched.
struct Touched {
  char* before;
  char* now;
  bool stale(int64_t p, int64_t q) const { return before[p] | before[q] | now[p] | now[q]; }
  void mark(int64_t p, int64_t q) const { now[p] = now[q] = 1; }
};

// Rotates columns p and q of X (and of W when set) if they are not
// orthogonal to working precision; nrm2v[] holds the squared column norms.
// Returns whether it rotated.
template <class T>
inline bool jacobi_pair(Mat<T> X, Mat<T> W, T* nrm2v, int64_t p, int64_t q, T tol, const Touched& tc) {
  if (!tc.stale(p, q) || nrm2v[p] == T(0) || nrm2v[q] == T(0)) return false;
  T c, s, t;
  const T g = dot(X.m, X.col(p), X.col(q));
  if (!rotation(nrm2v[p], nrm2v[q], g, tol, c, s, t)) return false;
  rot(X.m, X.col(p), X.col(q), c, s);
  rotated_norms(X, nrm2v, p, q, t, g);
  if (W.p) rot(W.m, W.col(p), W.col(q), c, s);
  tc.mark(p, q);
  return true;
}

// The four pairs of columns p0, p1 against q0, q1, two disjoint ones at a
// time: (p0, q0) with (p1, q1), then (p0, q1) with (p1, q0), whose dot
// products come out of the first two rotations. Two independent pairs keep
// the core busy while either waits for its rotation, and the fused passes
// save loading columns again. g[2] holds the dot products of the first two
// pairs and returns those of p0, p1 with n0, n1 when n0 >= 0 (the next
// quad's first pairs); cs[8] returns the four rotations (c, s) in order,
// for W. Returns the rotations.
template <class T>
inline int jacobi_quad(Mat<T> X, T* nrm2v, int64_t p0, int64_t p1, int64_t q0, int64_t q1, T tol, T* g, int64_t n0,
                       int64_t n1, T* cs, const Touched& tc) {
  const int64_t m = X.m;
  T h0, h1, c0 = 1, s0 = 0, t0 = 0, c1 = 1, s1 = 0, t1 = 0;
  const bool r0 = rotation(nrm2v[p0], nrm2v[q0], g[0], tol, c0, s0, t0);
  const bool r1 = rotation(nrm2v[p1], nrm2v[q1], g[1], tol, c1, s1, t1);
  // A pair left alone turns by the identity (c = 1, s = 0: exact).
  if (r0 || r1) {
    rot2<T, Dots::kCross>(m, X.col(p0), X.col(q0), c0, s0, X.col(p1), X.col(q1), c1, s1, nullptr, nullptr, &h0, &h1);
    if (r0) rotated_norms(X, nrm2v, p0, q0, t0, g[0]);
    if (r1) rotated_norms(X, nrm2v, p1, q1, t1, g[1]);
    tc.mark(p0, q0);
    tc.mark(p1, q1);
  } else {
    dot2(m, X.col(p0), X.col(q1), X.col(p1), X.col(q0), &h0, &h1);
  }
  T c2 = 1, s2 = 0, t2 = 0, c3 = 1, s3 = 0, t3 = 0;
  const bool r2 = rotation(nrm2v[p0], nrm2v[q1], h0, tol, c2, s2, t2);
  const bool r3 = rotation(nrm2v[p1], nrm2v[q0], h1, tol, c3, s3, t3);
  if (r2 || r3) {
    if (n0 >= 0)
      rot2<T, Dots::kNext>(m, X.col(p0), X.col(q1), c2, s2, X.col(p1), X.col(q0), c3, s3, X.col(n0), X.col(n1), &g[0],
                           &g[1]);
    else
      rot2<T, Dots::kNone>(m, X.col(p0), X.col(q1), c2, s2, X.col(p1), X.col(q0), c3, s3);
    if (r2) rotated_norms(X, nrm2v, p0, q1, t2, h0);
    if (r3) rotated_norms(X, nrm2v, p1, q0, t3, h1);
    tc.mark(p0, q1);
    tc.mark(p1, q0);
  } else if (n0 >= 0) {
    dot2(m, X.col(p0), X.col(n0), X.col(p1), X.col(n1), &g[0], &g[1]);
  }
  const T out[8] = {c0, s0, c1, s1, c2, s2, c3, s3};
  std::copy(out, out + 8, cs);
  return r0 + r1 + r2 + r3;
}

// W <- W J for the rotations of quads of columns p0, p1 against q[k],
// q[k] + 1: cs[8 k ..] as jacobi_quad returns them. Row by row, with the
// rows of p0 and p1 held in registers across the quads, W's memory traffic
// is a load and a store of two columns per quad instead of eight of each.
template <class T>
void rotate_quads(Mat<T> W, int64_t p0, int64_t p1, const int64_t* q, const T* cs, int64_t quads) {
  using V = Vec<T>;
  constexpr int L = V::W, R = 4;  // R independent rows of vectors: the rotations chain through P0, P1
  T* w0 = W.col(p0);
  T* w1 = W.col(p1);
  auto turn = [](V& x, V& y, V c, V s) {
    const V u = fnma(s, y, c * x);
    y = fma(s, x, c * y);
    x = u;
  };
  for (int64_t i0 = 0; i0 < W.m; i0 += R * L) {
    V P0[R], P1[R], Q0[R], Q1[R];
    int rows[R];
    int64_t off[R];  // clamped, so that a block past the column's end forms no pointer beyond it
    for (int r = 0; r < R; ++r) {
      rows[r] = static_cast<int>(std::clamp<int64_t>(W.m - i0 - r * L, 0, L));
      off[r] = std::min<int64_t>(r * L, W.m - i0);
      P0[r] = V::load_n(w0 + i0 + off[r], rows[r]);
      P1[r] = V::load_n(w1 + i0 + off[r], rows[r]);
    }
    for (int64_t k = 0; k < quads; ++k) {
      T* v0 = W.col(q[k]) + i0;
      T* v1 = v0 + W.ld;
      const T* e = cs + 8 * k;
      const V c0 = V::set1(e[0]), s0 = V::set1(e[1]), c1 = V::set1(e[2]), s1 = V::set1(e[3]);
      const V c2 = V::set1(e[4]), s2 = V::set1(e[5]), c3 = V::set1(e[6]), s3 = V::set1(e[7]);
      for (int r = 0; r < R; ++r) {
        Q0[r] = V::load_n(v0 + off[r], rows[r]);
        Q1[r] = V::load_n(v1 + off[r], rows[r]);
        turn(P0[r], Q0[r], c0, s0);
        turn(P1[r], Q1[r], c1, s1);
        turn(P0[r], Q1[r], c2, s2);
        turn(P1[r], Q0[r], c3, s3);
        Q0[r].store_n(v0 + off[r], rows[r]);
        Q1[r].store_n(v1 + off[r], rows[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      P0[r].store_n(w0 + i0 + off[r], rows[r]);
      P1[r].store_n(w1 + i0 + off[r], rows[r]);
    }
  }
}

// Every pair of columns [ilo, ihi) x [jlo, jhi): by quads, each passing the
// first dot products of the next one along (quads whose pairs are all
// known orthogonal are skipped); W turns after each row of quads.
template <class T>
int64_t jacobi_cross(Mat<T> X, Mat<T> W, T* nrm2v, int64_t ilo, int64_t ihi, int64_t jlo, int64_t jhi, T tol,
                     const Touched& tc) {
  int64_t count = 0, p = ilo;
  constexpr int64_t kMaxQuads = kSvdBlock / 2 + 1;
  int64_t qs[kMaxQuads];
  T cs[8 * kMaxQuads];
  for (; p + 1 < ihi; p += 2) {
    int64_t q = jlo, quads = 0;
    T g[2];
    bool have_g = false;
    for (; q + 1 < jhi; q += 2) {
      if (!tc.stale(p, q) && !tc.stale(p, q + 1) && !tc.stale(p + 1, q) && !tc.stale(p + 1, q + 1)) {
        have_g = false;
        continue;
      }
      if (!have_g) dot2(X.m, X.col(p), X.col(q), X.col(p + 1), X.col(q + 1), &g[0], &g[1]);
      const bool more = q + 3 < jhi;
      const int r =
          jacobi_quad(X, nrm2v, p, p + 1, q, q + 1, tol, g, more ? q + 2 : -1, more ? q + 3 : -1, cs + 8 * quads, tc);
      have_g = more;
      count += r;
      if (r) qs[quads++] = q;
    }
    if (W.p && quads) rotate_quads(W, p, p + 1, qs, cs, quads);
    if (q < jhi) count += jacobi_pair(X, W, nrm2v, p, q, tol, tc) + jacobi_pair(X, W, nrm2v, p + 1, q, tol, tc);
  }
  if (p < ihi)
    for (int64_t q = jlo; q < jhi; ++q) count += jacobi_pair(X, W, nrm2v, p, q, tol, tc);
  return count;
}

// Every pair of columns inside [lo, hi): each half, then the halves against
// each other.
template <class T>
int64_t jacobi_within(Mat<T> X, Mat<T> W, T* nrm2v, int64_t lo, int64_t hi, T tol, const Touched& tc) {
  if (hi - lo < 2) return 0;
  if (hi - lo == 2) return jacobi_pair(X, W, nrm2v, lo, lo + 1, tol, tc);
  const int64_t mid = lo + (hi - lo + 1) / 2;
  return jacobi_within(X, W, nrm2v, lo, mid, tol, tc) + jacobi_within(X, W, nrm2v, mid, hi, tol, tc) +
         jacobi_cross(X, W, nrm2v, lo, mid, mid, hi, tol, tc);
}

// One-sided Jacobi on the columns of X (m x n) until they are orthogonal to
// working precision, or until a sweep rotates at most `enough` pairs; W (n x
// n) <- W J for every rotation J when W.p is set. nrm2v[] returns the
// squared column norms (recomputed exactly at the end). Returns the sweeps,
// or kSvdMaxSweeps + 1 when it did not converge.
template <class T> int one_sided_jacobi(Mat<T> X, Mat<T> W, T* nrm2v, int threads, int64_t enough = 0) {
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
  std::vector<char> flags(static_cast<size_t>(2 * n), 0);
  std::fill(flags.begin(), flags.begin() + n, 1);
  Touched tc{flags.data(), flags.data() + n};
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
          count = jacobi_within(X, W, nrm2v, lo, hi, tol, tc);
        } else {
          auto [bi, bj] = round_robin(blocks, round, k);
          auto [ilo, ihi] = range(bi);
          auto [jlo, jhi] = range(bj);
          count = jacobi_cross(X, W, nrm2v, ilo, ihi, jlo, jhi, tol, tc);
        }
        if (count) rotations += count;
      };
      if (threads > 1 && 9 * n * b * X.m >= fork_join_flops()) ThreadPool::global().parallel_for(tasks, threads, task);
      else
        for (int64_t k = 0; k < tasks; ++k) task(k, 0);
    }
    if (rotations <= enough) {
      result = sweep;
      break;
    }
    std::swap(tc.before, tc.now);
    std::fill(tc.now, tc.now + n, 0);
  }
  for (int64_t j = 0; j < n; ++j) nrm2v[j] = dot(X.m, X.col(j), X.col(j));
  return result;
}

// C = L B + beta C for L (n x n) lower triangular with zeros stored above
// the diagonal: GEMMs on halves, which skip most of the zeros (about half
// the flops of one GEMM).
template <class T> void trmm_lower(Mat<T> L, Mat<T> B, T beta, Mat<T> C, int threads) {
  const int64_t n = L.n, k = B.n;
  if (n <= 4 * kSvdBlock) {
    gemm(false, false, T(1), L, B, beta, C, threads);
    return;
  }
  const int64_t n1 = split_half(n), n2 = n - n1;
  const Mat<T> B1 = B.sub(0, 0, n1, k), C2 = C.sub(n1, 0, n2, k);
  trmm_lower(L.sub(0, 0, n1, n1), B1, beta, C.sub(0, 0, n1, k), threads);
  gemm(false, false, T(1), L.sub(n1, 0, n2, n1), B1, beta, C2, threads);
  trmm_lower(L.sub(n1, n1, n2, n2), B.sub(n1, 0, n2, k), T(1), C2, threads);
}

// G = Lᵀ L for L (n x n) lower triangular with zeros stored above the
// diagonal: row panel i of L has nonzeros in its first columns only, so
// each adds one GEMM of that width (a third of a full product's flops).
template <class T> void gram_lower(Mat<T> L, Mat<T> G, int threads) {
  const int64_t n = L.n, b = 4 * kSvdBlock;
  set_zero(G);
  for (int64_t i0 = 0; i0 < n; i0 += b) {
    const int64_t rows = std::min(b, n - i0), k = i0 + rows;
    const Mat<T> P = L.sub(i0, 0, rows, k);
    gemm(true, false, T(1), P, P, T(1), G.sub(0, 0, k, k), threads);
  }
}

// Scratch of one_sided_jacobi_deferred.
template <class T> struct DeferScratch {
  Buffer<T> buf;
  Buffer<double> gram;
  TrdScratch<double> trd;
};

// One-sided Jacobi on the lower triangular X (n x n), W (n x n) <- the
// accumulated rotations when W.p is set, preconditioned by the eigenvectors
// of the Gram matrix (Okša, Vajteršic and Bečka): G = X₀ᵀ X₀ (X₀ the input)
// in double whatever T, its eigenvectors W1 by sinew's eigh (sytrd, LAPACK
// stedc, ormtr), largest eigenvalues first, rounded to T; X <- X₀ W1 (one
// product, which keeps row-wise relative accuracy, X₀ being graded by
// rows); then the sweeps run on X in T with W = W1. The columns of X₀ W1
// are orthogonal to about ε_double ‖G‖ / √(λ_p λ_q), so Jacobi converges
// quadratically from the first sweep (random n = 512: 2 rotating sweeps in
// f64, none in f32, where Jacobi on a float copy of X₀ as the
// preconditioner took 9 float sweeps and 2-3 more; the SVD's time halved).
// Any orthogonal W1 gives the same result, a poor one only costs sweeps;
// but eigenvalues below about ε_double ‖G‖ (X₀ with condition number above
// ~1e7, as on strongly graded matrices) can come out with large relative
// errors, and their eigenvectors mix large columns into small ones, which
// Jacobi would take many sweeps to undo: where ‖X₀ W1 e_j‖² differs from λ_j by more than 25% (or X₀ is
// singular, or stedc fails), the sweeps restart from X₀ with W = I. Returns
// the sweeps of the last phase. The caller holds the OpenBLAS thread count
// (BlasThreadsScope) for stedc.
template <class T>
int one_sided_jacobi_deferred(Mat<T> X, Mat<T> W, T* nrm2v, DeferScratch<T>& s, int threads) {
  const int64_t n = X.n;
  constexpr bool dbl = std::is_same_v<T, double>;
  T* cur = s.buf.get(2 * carve_size<T>(n, n));
  Mat<T> X0 = carve<T>(cur, n, n), Wt = carve<T>(cur, n, n);
  double* dcur = s.gram.get((dbl ? 2 : 3) * carve_size<double>(n, n) + 3 * static_cast<size_t>(n) + 32);
  Mat<double> G = carve<double>(dcur, n, n), Z = carve<double>(dcur, n, n);
  Mat<double> Xd;  // X₀ in double
  if constexpr (!dbl) Xd = carve<double>(dcur, n, n);
  double* d = dcur;
  double* e = d + n + 8;
  double* tau = e + n + 8;
  copy(X, X0);
  bool ok = true;
  for (int64_t j = 0; j < n && ok; ++j) ok = X0(j, j) != T(0);
  if (ok) {
    if constexpr (dbl) {
      Xd = X0;
    } else {
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < n; ++i) Xd(i, j) = X0(i, j);
    }
    gram_lower(Xd, G, threads);
    sytrd(G, d, e, tau, s.trd, threads);
    ok = stedc(n, d, e, Z.p, Z.ld, threads) == 0;
  }
  if (ok) {
    ormtr(G, tau, Z, threads);
    const Mat<T> W1 = W.p ? W : Wt;
    for (int64_t j = 0; j < n; ++j)  // stedc's order is ascending
      for (int64_t i = 0; i < n; ++i) W1(i, j) = static_cast<T>(Z(i, n - 1 - j));
    trmm_lower(X0, W1, T(0), X, threads);
    for (int64_t j = 0; j < n && ok; ++j) {
      const double now = dot(n, X.col(j), X.col(j)), lambda = d[n - 1 - j];
      ok = std::abs(now - lambda) <= 0.25 * lambda;
    }
    if (ok) {
      // The check above lets through what only costs sweeps; should that
      // still not converge, the restart from X₀ below gets its chance.
      const int sweeps = one_sided_jacobi(X, W, nrm2v, threads);
      if (sweeps <= kSvdMaxSweeps) return sweeps;
    }
    copy(X0, X);
  }
  if (W.p) set_identity(W);
  return one_sided_jacobi(X, W, nrm2v, threads);
}

// Replaces the columns of Q (m x q, m >= q) whose flag is 0 so that all
// columns are orthonormal; the flagged ones must already be.
template <class T> void complete_columns(Mat<T> Q, const std::vector<char>& good, QrScratch<T>& s, int threads) {
  const int64_t m = Q.m, q = Q.n;
  if (std::all_of(good.begin(), good.begin() + q, [](char g) { return g != 0; })) return;  // the usual case
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

}  // namespace sinew::linalg::detail::SINEW_LINALG_ISA
