// SVD by one-sided Jacobi (Hestenes) with QR preconditioning (Drmač and
// Veselić): rows sorted by norm, Householder QR with column pivoting
// A P = Q R, a second QR Rᵀ = Q₂ R₂ (svd_isa.h), then one-sided Jacobi on
// the columns of X = R₂ᵀ, graded and nearly orthogonal, so that it needs
// fewer sweeps and keeps small singular values relatively accurate. Column
// pairs are visited block pair by block pair in round-robin order (disjoint
// block pairs in parallel, each block pair's columns of X and of the
// accumulated rotations W staying in cache while it runs); inside a block
// pair, by quads of two columns against two, two disjoint pairs at a time,
// each rotation pass computing the next pairs' dot products, and W turned
// once per row of quads. Every rotation is still computed from the dot
// product of the current columns (no Gram matrix), which is what keeps the
// relative accuracy. Compact kernels run the same steps on W small matrices
// at once, one per lane. Included through isa_begin.h only.
#pragma once

namespace sinew::linalg::detail::SINEW_LINALG_ISA {

constexpr int kSvdMaxSweeps = 30;
constexpr int64_t kSvdBlock = 32;  // columns per block of the pair ordering
constexpr int64_t kCompactSvdMax = 40;  // largest m and n that the compact (lanes) path takes

constexpr int64_t kQp3Block = 32;      // columns per block of geqp3
constexpr int64_t kQp3Unblocked = 64;  // its last columns, unblocked

// Householder QR with column pivoting of A (m x n) from column j0 on, one
// column at a time (LAPACK laqp2), norms in vn1, vn2 (LAPACK's downdating).
template <class T> void geqp2(Mat<T> A, int64_t j0, T* tau, int64_t* perm, T* vn1, T* vn2, int threads) {
  const int64_t m = A.m, n = A.n, k = std::min(m, n);
  const T tol3z = std::sqrt(std::numeric_limits<T>::epsilon());
  for (int64_t i = j0; i < k; ++i) {
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
    split_columns(i + 1, n, threads, 4 * (n - i - 1) * (m - i), update);
    A(i, i) = beta;
  }
}

// y[j - j0] = t A(r0:, j)ᵀ v[r0:] for the columns [j0, j1) of A. v is
// zero where it starts below r0, and r0 a multiple of the vector width, so
// that the loads stay aligned; four columns share each load of v, with two
// accumulators each. This is most of geqp3's time: it is bound by loads.
template <class T> void scaled_dots(Mat<T> A, int64_t r0, const T* v, T t, int64_t j0, int64_t j1, T* y) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const int64_t m = A.m;
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) {
    const T* x[4] = {A.col(j), A.col(j + 1), A.col(j + 2), A.col(j + 3)};
    V a[4] = {V::zero(), V::zero(), V::zero(), V::zero()}, b[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
    int64_t i = r0;
    for (; i + 2 * W <= m; i += 2 * W) {
      const V v0 = V::load(v + i), v1 = V::load(v + i + W);
      for (int c = 0; c < 4; ++c) {
        a[c] = fma(V::load(x[c] + i), v0, a[c]);
        b[c] = fma(V::load(x[c] + i + W), v1, b[c]);
      }
    }
    for (; i < m; i += W) {
      const int r = static_cast<int>(std::min<int64_t>(W, m - i));
      const V v0 = V::load_n(v + i, r);
      for (int c = 0; c < 4; ++c) a[c] = fma(V::load_n(x[c] + i, r), v0, a[c]);
    }
    for (int c = 0; c < 4; ++c) y[j + c - j0] = t * reduce_add(a[c] + b[c]);
  }
  for (; j < j1; ++j) y[j - j0] = t * dot(m - r0, A.col(j) + r0, v + r0);
}

// Up to nb pivoted columns from column j0 (LAPACK laqps): the trailing
// columns below row j0 + k are left stale, their updates gathered in F
// ((n - j0) x nb, A(j0:, trailing) <- A - V Fᵀ) and applied by one GEMM at
// the end; row j0 + k is brought up to date at step k for the norm
// downdates. Stops after a step that finds a norm to recompute (it is
// recomputed once the trailing columns are current). Returns the columns
// done; row, aux and vz (aligned) are scratch of n - j0, nb and m.
template <class T>
int64_t laqps(Mat<T> A, int64_t j0, int64_t nb, T* tau, int64_t* perm, T* vn1, T* vn2, Mat<T> F, T* row, T* aux,
              T* vz, std::vector<int64_t>& stale, int threads) {
  const int64_t m = A.m, n = A.n, nc = n - j0, last = std::min(m, n);
  const T tol3z = std::sqrt(std::numeric_limits<T>::epsilon());
  stale.clear();
  int64_t k = 0;
  for (; k < nb && stale.empty(); ++k) {
    const int64_t c = j0 + k;  // the column and row of this step
    int64_t p = c;
    for (int64_t j = c + 1; j < n; ++j)
      if (vn1[j] > vn1[p]) p = j;
    if (p != c) {
      std::swap_ranges(A.col(c), A.col(c) + m, A.col(p));
      for (int64_t i = 0; i < k; ++i) std::swap(F(k, i), F(p - j0, i));
      std::swap(perm[c], perm[p]);
      vn1[p] = vn1[c];
      vn2[p] = vn2[c];
    }
    T* v = A.col(c) + c;
    for (int64_t i = 0; i < k; ++i) axpy(m - c, -F(k, i), A.col(j0 + i) + c, v);
    const T t = tau[c] = larfg(m - c, v[0], v + 1);
    const T akk = v[0];
    v[0] = T(1);
    // F(k+1:, k) = t A(c:, c+1:)ᵀ v, from the stale columns, then corrected
    // by the earlier reflectors: F(:, k) -= t F(:, 0:k) V(c:, 0:k)ᵀ v.
    const int64_t r0 = c / Vec<T>::W * Vec<T>::W;
    std::fill(vz + r0, vz + c, T(0));
    std::memcpy(vz + c, v, sizeof(T) * (m - c));
    auto fcol = [&](int64_t ja, int64_t jb) { scaled_dots(A, r0, vz, t, ja, jb, F.col(k) + (ja - j0)); };
    split_columns(c + 1, n, threads, 2 * (n - c - 1) * (m - c), fcol);
    for (int64_t i = 0; i <= k; ++i) F(i, k) = T(0);
    scaled_dots(A, r0, vz, -t, j0, c, aux);
    for (int64_t i = 0; i < k; ++i) axpy(nc, aux[i], F.col(i), F.col(k));
    // Row c of the trailing columns <- current: A(c, :) -= A(c, j0:c] F(:, 0:k]ᵀ.
    std::fill(row, row + nc, T(0));
    for (int64_t i = 0; i <= k; ++i) axpy(n - c - 1, A(c, j0 + i), F.col(i) + k + 1, row + k + 1);
    for (int64_t j = c + 1; j < n; ++j) A(c, j) -= row[j - j0];
    if (c + 1 < last) {
      for (int64_t j = c + 1; j < n; ++j) {
        if (vn1[j] == T(0)) continue;
        const T r = std::abs(A(c, j)) / vn1[j];
        const T temp = std::max(T(0), (T(1) + r) * (T(1) - r));
        const T ratio = vn1[j] / vn2[j];
        if (temp * ratio * ratio <= tol3z) stale.push_back(j);
        else vn1[j] *= std::sqrt(temp);
      }
    }
    v[0] = akk;
  }
  const int64_t r = j0 + k;
  if (k < std::min(nc, m - j0))
    gemm(false, true, T(-1), A.sub(r, j0, m - r, k), F.sub(k, 0, nc - k, k), T(1), A.sub(r, r, m - r, n - r),
         threads);
  for (int64_t j : stale) vn1[j] = vn2[j] = nrm2(m - r, A.col(j) + r);
  return k;
}

// Householder QR with column pivoting of A (m x n): R above the diagonal,
// reflectors below, tau[min(m, n)], perm[j] = the column of A now at j
// (LAPACK geqp3: blocks of kQp3Block columns whose trailing update is one
// GEMM, half the flops, the other half still matrix-vector).
template <class T> void geqp3(Mat<T> A, T* tau, int64_t* perm, T* vn1, T* vn2, int threads) {
  const int64_t m = A.m, n = A.n, k = std::min(m, n);
  for (int64_t j = 0; j < n; ++j) {
    perm[j] = j;
    vn1[j] = vn2[j] = nrm2(m, A.col(j));
  }
  int64_t j = 0;
  if (k > kQp3Unblocked + kQp3Block) {
    Buffer<T> buf;
    T* cur = buf.get(carve_size<T>(n, kQp3Block) + carve_size<T>(m, 1) + static_cast<size_t>(n + kQp3Block) + 16);
    Mat<T> F = carve<T>(cur, n, kQp3Block);
    T* vz = carve<T>(cur, m, 1).p;
    T* row = cur;
    T* aux = row + n + 8;
    std::vector<int64_t> stale;
    while (j < k - kQp3Unblocked) {
      const int64_t jb = std::min(kQp3Block, k - kQp3Unblocked - j);
      j += laqps(A, j, jb, tau, perm, vn1, vn2, F.sub(0, 0, n - j, jb), row, aux, vz, stale, threads);
    }
  }
  geqp2(A, j, tau, perm, vn1, vn2, threads);
}

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

// ---- compact: W matrices at once --------------------------------------------

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
    V* a = A + i * m;
    const V t = larfg_lanes(a, i, m);
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
