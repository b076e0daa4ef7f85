// Householder QR with column pivoting (LAPACK geqp3 and its parts) for the
// SVD's preconditioning (jacobi_svd_impl.h), on one matrix and on the W
// matrices of a compact batch at once. Included through isa_begin.h only,
// after householder_impl.h.
#pragma once

namespace sinew::linalg::detail::SINEW_LINALG_ISA {

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
