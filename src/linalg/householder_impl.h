// Householder QR: reflectors (larfg), the unblocked panel (geqr2), compact
// WY blocks (larft, larfb: three kernels::mm calls per block), the blocked
// factorization, forming Q and applying Q or Qᵀ; plus a compact kernel that
// factors W small matrices at once. Included through isa_begin.h only.
#pragma once

namespace sinew::linalg::detail::SINEW_LINALG_ISA {

constexpr int64_t kQrBlock = 32;          // reflectors per compact WY block of a panel, and in ormtr
// Reflectors per trailing update in geqrf and apply_q. A block of k
// reflectors costs three passes over the trailing matrix for 4k flops per
// element, so at k = 32 the update is bound by memory once that matrix
// leaves L2 (n = 1024: 8 MiB in f64); 64 halves the passes. The panel stays
// blocked by kQrBlock, so its level-2 work does not grow.
constexpr int64_t kQrWideBlock = 64;
constexpr int64_t kQrBlockedMin = 96;     // unblocked below this many reflectors
constexpr int64_t kCompactQrMax = 40;

// Generates H = I - tau v vᵀ with H [alpha; x] = [beta; 0], v = [1; x'].
// On return alpha = beta and x = x'. Returns tau (0 when x is already 0).
template <class T> T larfg(int64_t n, T& alpha, T* x) {
  if (n <= 1) return T(0);
  const T xnorm = nrm2(n - 1, x);
  if (xnorm == T(0)) return T(0);
  const T beta = -std::copysign(std::hypot(alpha, xnorm), alpha);
  const T tau = (beta - alpha) / beta;
  scal(n - 1, T(1) / (alpha - beta), x);
  alpha = beta;
  return tau;
}

// Applies H = I - tau v vᵀ (v[0] == 1, len entries) from the left to
// columns [c0, c1) of C, rows j to j + len.
template <class T>
inline void apply_unit_reflector(const T* v, int64_t len, T tau, Mat<T> C, int64_t j, int64_t c0, int64_t c1) {
  for (int64_t c = c0; c < c1; ++c) {
    T* cc = C.col(c) + j;
    const T w = dot(len, v, cc);
    axpy(len, -tau * w, v, cc);
  }
}

// Applies H = I - tau v vᵀ (v = [1; A(j+1:, j)], stored in column j from row
// j) from the left to columns [c0, c1) of C, rows j and below.
template <class T> inline void apply_reflector(Mat<T> A, int64_t j, T tau, Mat<T> C, int64_t c0, int64_t c1) {
  if (tau == T(0)) return;
  T* v = A.col(j) + j;
  const T keep = v[0];
  v[0] = T(1);
  apply_unit_reflector(v, A.m - j, tau, C, j, c0, c1);
  v[0] = keep;
}

// Unblocked QR of the m x n panel A: R above the diagonal, the reflectors
// below, tau[min(m, n)].
template <class T> void geqr2(Mat<T> A, T* tau) {
  const int64_t k = std::min(A.m, A.n);
  for (int64_t j = 0; j < k; ++j) {
    tau[j] = larfg(A.m - j, A(j, j), A.col(j) + j + 1);
    apply_reflector(A, j, tau[j], A, j + 1, A.n);
  }
}

// V (rows x k): the explicit unit lower-trapezoidal reflector block stored
// below the diagonal of A (rows x k).
template <class T> void explicit_v(Mat<T> A, Mat<T> V) {
  for (int64_t j = 0; j < V.n; ++j) {
    T* v = V.col(j);
    std::fill(v, v + std::min(j, V.m), T(0));
    if (j < V.m) v[j] = T(1);
    if (j + 1 < V.m) std::memcpy(v + j + 1, A.col(j) + j + 1, sizeof(T) * (V.m - j - 1));
  }
}

// The upper-triangular T (k x k, zeros below) of the compact WY form
// H_0 ... H_{k-1} = I - V T Vᵀ (LAPACK larft, forward, columnwise).
template <class T> void larft(Mat<T> V, const T* tau, Mat<T> Tm, int threads) {
  const int64_t k = V.n;
  gemm(true, false, T(1), V, V, T(0), Tm, threads);  // Tm = VᵀV; only its strict upper part is used
  T w[kQrWideBlock];
  for (int64_t j = 0; j < k; ++j) {
    for (int64_t i = 0; i < j; ++i) w[i] = Tm(i, j);
    // Tm(0:j, j) = -tau_j Tm(0:j, 0:j) w, Tm(0:j, 0:j) upper triangular and final.
    for (int64_t i = 0; i < j; ++i) {
      T s = 0;
      for (int64_t l = i; l < j; ++l) s += Tm(i, l) * w[l];
      Tm(i, j) = -tau[j] * s;
    }
    Tm(j, j) = tau[j];
    for (int64_t i = j + 1; i < k; ++i) Tm(i, j) = T(0);
  }
}

// C <- H C (trans = false) or Hᵀ C, H = I - V T Vᵀ; W1, W2 are k x C.n scratch.
template <class T>
void larfb(Mat<T> V, Mat<T> Tm, bool trans, Mat<T> C, Mat<T> W1, Mat<T> W2, int threads) {
  gemm(true, false, T(1), V, C, T(0), W1, threads);
  gemm(trans, false, T(1), Tm, W1, T(0), W2, threads);
  gemm(false, false, T(-1), V, W2, T(1), C, threads);
}

// Scratch of the blocked routines: V, T and two k x ncols panels.
template <class T> struct QrScratch {
  Buffer<T> buf;
  Mat<T> V, Tm, W1, W2;
  void reserve(int64_t m, int64_t ncols) {
    const int64_t nb = kQrWideBlock;
    T* cur = buf.get(carve_size<T>(m, nb) + carve_size<T>(nb, nb) + 2 * carve_size<T>(nb, ncols));
    V = carve<T>(cur, m, nb);
    Tm = carve<T>(cur, nb, nb);
    W1 = carve<T>(cur, nb, ncols);
    W2 = carve<T>(cur, nb, ncols);
  }
};

// QR of A (m x n) in place, tau[min(m, n)], `nb` reflectors per compact
// WY block; s reserved for A.
template <class T> void geqrf_blocks(Mat<T> A, T* tau, QrScratch<T>& s, int64_t nb, int threads) {
  const int64_t m = A.m, n = A.n, k = std::min(m, n);
  for (int64_t j0 = 0; j0 < k; j0 += nb) {
    const int64_t jb = std::min(nb, k - j0);
    Mat<T> panel = A.sub(j0, j0, m - j0, jb);
    if (nb > kQrBlock) geqrf_blocks(panel, tau + j0, s, kQrBlock, threads);
    else geqr2(panel, tau + j0);
    if (j0 + jb >= n) continue;
    Mat<T> V = s.V.sub(0, 0, m - j0, jb), Tm = s.Tm.sub(0, 0, jb, jb);
    explicit_v(panel, V);
    larft(V, tau + j0, Tm, threads);
    const int64_t nc = n - j0 - jb;
    larfb(V, Tm, true, A.sub(j0, j0 + jb, m - j0, nc), s.W1.sub(0, 0, jb, nc), s.W2.sub(0, 0, jb, nc), threads);
  }
}

// Blocked QR of A (m x n) in place, tau[min(m, n)]: panels of kQrWideBlock
// columns, each factored in blocks of kQrBlock.
template <class T> void geqrf(Mat<T> A, T* tau, QrScratch<T>& s, int threads) {
  if (std::min(A.m, A.n) < kQrBlockedMin) {
    geqr2(A, tau);
    return;
  }
  s.reserve(A.m, A.n);
  geqrf_blocks(A, tau, s, kQrWideBlock, threads);
}

// C (m x c) <- Q C (trans = false) or Qᵀ C, Q = H_0 ... H_{k-1} from the k
// reflectors stored below the diagonal of A (m x k). With `identity_tail`,
// C starts as the first columns of the identity and block j0 touches only
// C(j0:, j0:) (forming Q, LAPACK orgqr).
template <class T>
void apply_q(Mat<T> A, const T* tau, bool trans, Mat<T> C, QrScratch<T>& s, int threads,
             bool identity_tail = false) {
  const int64_t m = A.m, k = A.n;
  if (k == 0 || C.n == 0) return;
  if (k < kQrBlockedMin) {
    for (int64_t t = 0; t < k; ++t) {
      const int64_t j = trans ? t : k - 1 - t;
      apply_reflector(A, j, tau[j], C, identity_tail ? std::min(j, C.n) : 0, C.n);
    }
    return;
  }
  s.reserve(m, C.n);
  const int64_t nb = kQrWideBlock, blocks = (k + nb - 1) / nb;
  for (int64_t t = 0; t < blocks; ++t) {
    const int64_t j0 = (trans ? t : blocks - 1 - t) * nb, jb = std::min(nb, k - j0);
    const int64_t c0 = identity_tail ? std::min(j0, C.n) : 0, nc = C.n - c0;
    Mat<T> V = s.V.sub(0, 0, m - j0, jb), Tm = s.Tm.sub(0, 0, jb, jb);
    explicit_v(A.sub(j0, j0, m - j0, jb), V);
    larft(V, tau + j0, Tm, threads);
    larfb(V, Tm, trans, C.sub(j0, c0, m - j0, nc), s.W1.sub(0, 0, jb, nc), s.W2.sub(0, 0, jb, nc), threads);
  }
}

// Q (m x q, q <= m) <- the first q columns of H_0 ... H_{k-1}.
template <class T> void orgqr(Mat<T> A, const T* tau, Mat<T> Q, QrScratch<T>& s, int threads) {
  set_identity(Q);
  apply_q(A, tau, false, Q, s, threads, true);
}

// ---- compact: W matrices at once --------------------------------------------

// Columns [c0, c1) of C (ld m) <- H C for H = I - t v vᵀ, v = [1; a[j+1 .. m)]
// acting on rows j .. m, lanes at once. Four columns share each load of v,
// and each column's dot product runs on two accumulators, so that the
// update is not one long chain of dependent FMAs.
template <class T>
inline void reflect_lanes(const Vec<T>* a, int64_t j, int64_t m, Vec<T> t, Vec<T>* C, int64_t c0, int64_t c1) {
  using V = Vec<T>;
  int64_t c = c0;
  for (; c + 4 <= c1; c += 4) {
    V* x0 = C + c * m;
    V* x1 = x0 + m;
    V* x2 = x1 + m;
    V* x3 = x2 + m;
    V w0 = x0[j], w1 = x1[j], w2 = x2[j], w3 = x3[j];
    V u0 = V::zero(), u1 = V::zero(), u2 = V::zero(), u3 = V::zero();
    int64_t i = j + 1;
    for (; i + 1 < m; i += 2) {
      const V a0 = a[i], a1 = a[i + 1];
      w0 = fma(a0, x0[i], w0);
      w1 = fma(a0, x1[i], w1);
      w2 = fma(a0, x2[i], w2);
      w3 = fma(a0, x3[i], w3);
      u0 = fma(a1, x0[i + 1], u0);
      u1 = fma(a1, x1[i + 1], u1);
      u2 = fma(a1, x2[i + 1], u2);
      u3 = fma(a1, x3[i + 1], u3);
    }
    if (i < m) {
      const V a0 = a[i];
      w0 = fma(a0, x0[i], w0);
      w1 = fma(a0, x1[i], w1);
      w2 = fma(a0, x2[i], w2);
      w3 = fma(a0, x3[i], w3);
    }
    w0 = (w0 + u0) * t;
    w1 = (w1 + u1) * t;
    w2 = (w2 + u2) * t;
    w3 = (w3 + u3) * t;
    x0[j] = x0[j] - w0;
    x1[j] = x1[j] - w1;
    x2[j] = x2[j] - w2;
    x3[j] = x3[j] - w3;
    for (i = j + 1; i < m; ++i) {
      const V ai = a[i];
      x0[i] = fnma(w0, ai, x0[i]);
      x1[i] = fnma(w1, ai, x1[i]);
      x2[i] = fnma(w2, ai, x2[i]);
      x3[i] = fnma(w3, ai, x3[i]);
    }
  }
  for (; c < c1; ++c) {
    V* x = C + c * m;
    V w0 = x[j], w1 = V::zero(), w2 = V::zero(), w3 = V::zero();
    int64_t i = j + 1;
    for (; i + 3 < m; i += 4) {
      w0 = fma(a[i], x[i], w0);
      w1 = fma(a[i + 1], x[i + 1], w1);
      w2 = fma(a[i + 2], x[i + 2], w2);
      w3 = fma(a[i + 3], x[i + 3], w3);
    }
    for (; i < m; ++i) w0 = fma(a[i], x[i], w0);
    const V w = ((w0 + w1) + (w2 + w3)) * t;
    x[j] = x[j] - w;
    for (i = j + 1; i < m; ++i) x[i] = fnma(w, a[i], x[i]);
  }
}

// The reflector that zeroes a[j+1 .. m) (LAPACK larfg, lanes at once):
// a[j] <- beta, a[j+1 ..] <- v, returns tau (0 where the column is already
// zero below j). A sum of squares that has lost precision to underflow is
// taken again on the column scaled by its largest entry, as sytd2_lanes
// does for its packed columns.
template <class T> Vec<T> larfg_lanes(Vec<T>* a, int64_t j, int64_t m) {
  using V = Vec<T>;
  const V zero = V::zero(), one = V::set1(T(1));
  V ss = zero;
  for (int64_t i = j + 1; i < m; ++i) ss = fma(a[i], a[i], ss);
  const V alpha = a[j];
  const auto skip = ss <= zero;
  V norm = sqrt(fma(alpha, alpha, ss));
  const V ss_min = V::set1(std::numeric_limits<T>::min() / std::numeric_limits<T>::epsilon());
  if (const auto rescue = (ss > zero) & (ss < ss_min); V::any(rescue)) [[unlikely]] {
    V mx = abs(alpha);
    for (int64_t i = j + 1; i < m; ++i) mx = max(mx, abs(a[i]));
    const V inv = one / select(mx > zero, mx, one);
    const V x0 = alpha * inv;
    V s2 = x0 * x0;
    for (int64_t i = j + 1; i < m; ++i) {
      const V x = a[i] * inv;
      s2 = fma(x, x, s2);
    }
    norm = select(rescue, mx * sqrt(s2), norm);
  }
  const V beta = -copysign(norm, alpha);
  const V t = select(skip, zero, (beta - alpha) / beta);
  const V sc = select(skip, one, one / (alpha - beta));
  for (int64_t i = j + 1; i < m; ++i) a[i] = a[i] * sc;
  a[j] = select(skip, alpha, beta);
  return t;
}

}  // namespace sinew::linalg::detail::SINEW_LINALG_ISA
