// The fast path of the compact (batched) f64 SVD: one-sided Jacobi on A W1,
// W1 the eigenvectors of the Gram matrix AᵀA found by the lanes' tridiagonal
// QL, for the lanes whose condition number is at most kGramSvdMaxCond.
// Included through isa_begin.h only, after tridiagonal_lanes_impl.h and
// jacobi_svd_lanes_impl.h.
//
// Why: the columns of A W1 are orthogonal to about ε κ(A)², so Jacobi
// converges quadratically from its first sweep: 2 rotating sweeps and a
// checking one for random 32x32 matrices, where Jacobi from the pivoted QR
// takes 7-8 (one_sided_jacobi_deferred does the same for single matrices
// from n = 64). The QR preconditioning goes too: it brings sweeps and, with
// its row sorting and pivoting, the relative accuracy of small singular
// values on graded matrices; on a lane with κ(A) <= kGramSvdMaxCond no
// singular value is small, and every σ has a relative error of about ε κ(A)
// (2e-12 at most, as a backward-stable method gives). The other lanes are
// left to the QR-preconditioned Jacobi (svd_compact), which keeps its
// accuracy on graded matrices.
//
// The cost per matrix in a group of eight 32x32 f64 matrices, before the
// QL took its rotations from Newton steps (TSC, one thread): the Gram matrix
// 0.9 us, tridiagonalization and Q 2.3 us, QL 10 us, A W1 1.2 us, the
// sweeps 8.6 us; the QR path spent 7.3 us on its QR and Q and 32 us on
// sweeps.
namespace sinew::linalg::detail::SINEW_LINALG_ISA {

constexpr double kGramSvdMaxCond = 1e4;

// Scratch (in vectors) of gram_jacobi_lanes for n columns.
inline int64_t gram_jacobi_scratch(int64_t n) { return packed(n, 0) + n * n + n + tridiagonal_eigh_lanes_scratch(n); }

// G (n x n, lower triangle packed by rows) <- AᵀA for the m x n (ld m)
// matrices in the lanes of A, two columns of G at a time.
template <class T> void gram_lanes(const Vec<T>* A, int64_t m, int64_t n, Vec<T>* G) {
  using V = Vec<T>;
  for (int64_t i = 0; i < n; ++i) {
    const V* ai = A + i * m;
    int64_t k = 0;
    for (; k + 1 <= i; k += 2) {
      const V* a0 = A + k * m;
      const V* a1 = a0 + m;
      V s0 = V::zero(), s1 = V::zero(), t0 = V::zero(), t1 = V::zero();
      int64_t r = 0;
      for (; r + 1 < m; r += 2) {
        s0 = fma(ai[r], a0[r], s0);
        s1 = fma(ai[r], a1[r], s1);
        t0 = fma(ai[r + 1], a0[r + 1], t0);
        t1 = fma(ai[r + 1], a1[r + 1], t1);
      }
      if (r < m) s0 = fma(ai[r], a0[r], s0), s1 = fma(ai[r], a1[r], s1);
      G[packed(i, k)] = s0 + t0;
      G[packed(i, k + 1)] = s1 + t1;
    }
    if (k <= i) {
      const V* a0 = A + k * m;
      V s0 = V::zero(), t0 = V::zero();
      int64_t r = 0;
      for (; r + 1 < m; r += 2) s0 = fma(ai[r], a0[r], s0), t0 = fma(ai[r + 1], a0[r + 1], t0);
      if (r < m) s0 = fma(ai[r], a0[r], s0);
      G[packed(i, k)] = s0 + t0;
    }
  }
}

// X (m x n, ld m) <- A (m x n, ld m) Z, Z n x n row-major; eight rows of
// two columns of X at a time in registers.
template <class T> void times_rowmajor_lanes(const Vec<T>* A, int64_t m, int64_t n, const Vec<T>* Z, Vec<T>* X) {
  using V = Vec<T>;
  constexpr int64_t R = 8;
  for (int64_t j = 0; j < n; j += 2) {
    const bool two = j + 1 < n;
    int64_t r0 = 0;
    for (; r0 + R <= m; r0 += R) {
      V x0[R], x1[R];
      for (int64_t r = 0; r < R; ++r) x0[r] = x1[r] = V::zero();
      for (int64_t k = 0; k < n; ++k) {
        const V z0 = Z[k * n + j], z1 = two ? Z[k * n + j + 1] : V::zero();
        const V* a = A + k * m + r0;
        for (int64_t r = 0; r < R; ++r) {
          x0[r] = fma(a[r], z0, x0[r]);
          x1[r] = fma(a[r], z1, x1[r]);
        }
      }
      for (int64_t r = 0; r < R; ++r) {
        X[r0 + r + j * m] = x0[r];
        if (two) X[r0 + r + (j + 1) * m] = x1[r];
      }
    }
    for (; r0 < m; ++r0) {
      V x0 = V::zero(), x1 = V::zero();
      for (int64_t k = 0; k < n; ++k) {
        x0 = fma(A[r0 + k * m], Z[k * n + j], x0);
        if (two) x1 = fma(A[r0 + k * m], Z[k * n + j + 1], x1);
      }
      X[r0 + j * m] = x0;
      if (two) X[r0 + (j + 1) * m] = x1;
    }
  }
}

// For the m x n (m >= n, ld m) matrices in the lanes of A (unchanged): X
// (m x n, ld m) <- A W1 J and, when Wl is given, Wl (n x n, ld n) <- W1 J,
// with J the Jacobi rotations that make X's columns orthogonal, nrm2v[n]
// their squared norms: X = U Σ, A = U Σ (W1 J)ᵀ. Returns the lanes where
// this holds: κ(A) <= kGramSvdMaxCond by the Gram matrix's eigenvalues, each
// column of A W1 with a squared norm within 25% of its eigenvalue, and the
// sweeps converged. The other lanes hold X = I (columns orthogonal from the
// start, so that the sweeps do not rotate them) and nothing to use.
template <class T>
typename Vec<T>::Mask gram_jacobi_lanes(const Vec<T>* A, int64_t m, int64_t n, Vec<T>* X, Vec<T>* Wl, Vec<T>* nrm2v,
                                        Vec<T>* scratch) {
  using V = Vec<T>;
  V* G = scratch;
  V* Z = G + packed(n, 0);
  V* d = Z + n * n;
  gram_lanes(A, m, n, G);
  // W1 only has to be orthogonal (its rotations are) and close to the
  // eigenvectors: split once e is below √ε/10 of its neighbours, not ε,
  // which leaves the sweeps' count as it was and saves QL 10% of its
  // iterations.
  const T split = std::sqrt(std::numeric_limits<T>::epsilon()) / 10;
  auto ok = V::all_lanes();
  if (!tridiagonal_eigh_lanes(G, n, d, Z, d + n, split)) ok = V::not_(ok);
  const V zero = V::zero();
  if (V::any(ok)) {
    V lo = d[0], hi = d[0];
    for (int64_t j = 1; j < n; ++j) lo = min(lo, d[j]), hi = max(hi, d[j]);
    ok = ok & (lo > zero) & (lo * V::set1(static_cast<T>(kGramSvdMaxCond * kGramSvdMaxCond)) >= hi);
  }
  if (V::any(ok)) {
    times_rowmajor_lanes(A, m, n, Z, X);
    const V quarter = V::set1(T(0.25));
    for (int64_t j = 0; j < n; ++j) {
      const V s = dot_lanes(m, X + j * m, X + j * m);
      ok = ok & (abs(s - d[j]) <= quarter * d[j]);
    }
  }
  const V one = V::set1(T(1));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) X[i + j * m] = select(ok, X[i + j * m], i == j ? one : zero);
    if (Wl)
      for (int64_t i = 0; i < n; ++i) Wl[i + j * n] = select(ok, Z[i * n + j], i == j ? one : zero);
  }
  if (!V::any(ok)) return ok;
  if (one_sided_jacobi_lanes(X, m, n, Wl, nrm2v) > kSvdMaxSweeps) return V::not_(V::all_lanes());
  return ok;
}

}  // namespace sinew::linalg::detail::SINEW_LINALG_ISA
