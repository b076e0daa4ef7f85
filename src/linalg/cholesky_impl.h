// Cholesky factorization and triangular solves: recursive blocking whose
// updates are kernels::mm calls and small register-blocked base cases. The
// compact kernel that factors Vec<T>::W small matrices at once, one per
// vector lane, is in cholesky_compact_impl.h, the batches factored in L1 in
// cholesky_l1_impl.h. Included through isa_begin.h only.
#pragma once

namespace sinew::linalg::detail::SINEW_LINALG_ISA {

template <class T> struct Pivot {
  int64_t index = -1;  // -1: success
  T value = 0;
};

constexpr int64_t kCholBase = 128;  // register-blocked base case up to this order
constexpr int64_t kTrsmBase = 64;   // substitution below this
constexpr int64_t kSyrkBase = 128;  // full-square GEMM on diagonal blocks up to this
constexpr int64_t kCompactCholMax = 48;
constexpr int64_t kCompactRun = 16;  // groups of W matrices per task of a batch
constexpr int64_t kL1Run = 64;      // matrices per task of a batch factored where they lie

// Lower Cholesky of a small matrix, left-looking by columns.
template <class T> Pivot<T> potrf_small(Mat<T> A) {
  const int64_t n = A.n;
  for (int64_t j = 0; j < n; ++j) {
    T* cj = A.col(j);
    for (int64_t k = 0; k < j; ++k) axpy(n - j, -A(j, k), A.col(k) + j, cj + j);
    const T d = cj[j];
    if (!(d > T(0)) || !std::isfinite(d)) return {j, d};
    const T r = std::sqrt(d);
    cj[j] = r;
    scal(n - j - 1, T(1) / r, cj + j + 1);
  }
  return {};
}

// Rows [i0, i0 + rows) of B <- B L^-T, rows <= 4 W, one column at a time
// with the rows in registers.
template <class T> inline void trsm_rlt_rows(Mat<T> L, const T* inv, Mat<T> B, int64_t i0, int64_t rows) {
  using V = Vec<T>;
  constexpr int W = V::W;
  int c[4];
  for (int v = 0; v < 4; ++v) c[v] = static_cast<int>(std::clamp<int64_t>(rows - v * W, 0, W));
  for (int64_t j = 0; j < L.n; ++j) {
    T* bj = B.col(j) + i0;
    V a0 = V::load_n(bj, c[0]), a1 = V::load_n(bj + W, c[1]), a2 = V::load_n(bj + 2 * W, c[2]),
      a3 = V::load_n(bj + 3 * W, c[3]);
    for (int64_t k = 0; k < j; ++k) {
      const T* bk = B.col(k) + i0;
      const V l = V::set1(L(j, k));
      a0 = fnma(l, V::load_n(bk, c[0]), a0);
      a1 = fnma(l, V::load_n(bk + W, c[1]), a1);
      a2 = fnma(l, V::load_n(bk + 2 * W, c[2]), a2);
      a3 = fnma(l, V::load_n(bk + 3 * W, c[3]), a3);
    }
    const V s = V::set1(inv[j]);
    (a0 * s).store_n(bj, c[0]);
    (a1 * s).store_n(bj + W, c[1]);
    (a2 * s).store_n(bj + 2 * W, c[2]);
    (a3 * s).store_n(bj + 3 * W, c[3]);
  }
}

// Rows [r0, r0 + c0 + c1) of the P columns at j0 of A -= A(r0.., 0:j0) A(j0:j0+P, 0:j0)ᵀ,
// the 2W x P block of accumulators in registers.
template <class T, int P> inline void panel_update(Mat<T> A, int64_t j0, int64_t r0, int c0, int c1) {
  using V = Vec<T>;
  constexpr int W = V::W;
  V a0[P], a1[P];
  for (int c = 0; c < P; ++c) {
    a0[c] = V::load_n(A.col(j0 + c) + r0, c0);
    a1[c] = V::load_n(A.col(j0 + c) + r0 + W, c1);
  }
  for (int64_t k = 0; k < j0; ++k) {
    const T* xk = A.col(k);
    const V x0 = V::load_n(xk + r0, c0), x1 = V::load_n(xk + r0 + W, c1);
    for (int c = 0; c < P; ++c) {
      const V b = V::set1(xk[j0 + c]);
      a0[c] = fnma(x0, b, a0[c]);
      a1[c] = fnma(x1, b, a1[c]);
    }
  }
  for (int c = 0; c < P; ++c) {
    a0[c].store_n(A.col(j0 + c) + r0, c0);
    a1[c].store_n(A.col(j0 + c) + r0 + W, c1);
  }
}

// Lower Cholesky of A (n <= kCholBase) by 8-column panels, left-looking:
// each panel is updated by the columns to its left with a 2W x 8 block of
// accumulators in registers (16 FMAs per 2 loads), its 8 x 8 diagonal block
// factored, and the rows below solved against it.
template <class T> Pivot<T> potrf_base(Mat<T> A) {
  using V = Vec<T>;
  constexpr int W = V::W;
  constexpr int64_t P = 8, R = 2 * W;
  const int64_t n = A.n;
  for (int64_t j0 = 0; j0 < n; j0 += P) {
    const int64_t jb = std::min(P, n - j0);
    if (j0 > 0) {
      for (int64_t r0 = j0; r0 < n; r0 += R) {
        const int c0 = static_cast<int>(std::min<int64_t>(W, n - r0));
        const int c1 = static_cast<int>(std::clamp<int64_t>(n - r0 - W, 0, W));
        if (jb == P) {
          panel_update<T, P>(A, j0, r0, c0, c1);
        } else {
          for (int64_t c = 0; c < jb; ++c)  // the last, narrow panel: column by column
            for (int64_t k = 0; k < j0; ++k) {
              const V b = V::set1(A(j0 + c, k));
              fnma(V::load_n(A.col(k) + r0, c0), b, V::load_n(A.col(j0 + c) + r0, c0)).store_n(A.col(j0 + c) + r0, c0);
              fnma(V::load_n(A.col(k) + r0 + W, c1), b, V::load_n(A.col(j0 + c) + r0 + W, c1))
                  .store_n(A.col(j0 + c) + r0 + W, c1);
            }
        }
      }
    }
    Pivot<T> p = potrf_small(A.sub(j0, j0, jb, jb));
    if (p.index >= 0) return {p.index + j0, p.value};
    if (j0 + jb < n) {
      T inv[P];
      for (int64_t c = 0; c < jb; ++c) inv[c] = T(1) / A(j0 + c, j0 + c);
      Mat<T> L = A.sub(j0, j0, jb, jb), B = A.sub(j0 + jb, j0, n - j0 - jb, jb);
      for (int64_t r0 = 0; r0 < B.m; r0 += 4 * W) trsm_rlt_rows(L, inv, B, r0, std::min<int64_t>(4 * W, B.m - r0));
    }
  }
  return {};
}

// P (R x n, R = 4 W rows, column stride R) <- P L^-T for lower L (column
// stride ldl), four columns at a time: each column of P loaded for the
// columns to its right serves 16 FMAs.
template <class T> inline void trsm_rlt_packed(const T* L, int64_t ldl, const T* inv, T* P, int64_t n) {
  using V = Vec<T>;
  constexpr int W = V::W, R = 4 * W;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    V a[4][4];
    for (int q = 0; q < 4; ++q)
      for (int v = 0; v < 4; ++v) a[q][v] = V::load(P + (j + q) * R + v * W);
    for (int64_t k = 0; k < j; ++k) {
      const T* pk = P + k * R;
      const V x0 = V::load(pk), x1 = V::load(pk + W), x2 = V::load(pk + 2 * W), x3 = V::load(pk + 3 * W);
      const T* lk = L + k * ldl + j;
      for (int q = 0; q < 4; ++q) {
        const V l = V::set1(lk[q]);
        a[q][0] = fnma(l, x0, a[q][0]);
        a[q][1] = fnma(l, x1, a[q][1]);
        a[q][2] = fnma(l, x2, a[q][2]);
        a[q][3] = fnma(l, x3, a[q][3]);
      }
    }
    for (int q = 0; q < 4; ++q) {
      for (int p = 0; p < q; ++p) {
        const V l = V::set1(L[(j + p) * ldl + j + q]);
        for (int v = 0; v < 4; ++v) a[q][v] = fnma(l, a[p][v], a[q][v]);
      }
      const V s = V::set1(inv[j + q]);
      for (int v = 0; v < 4; ++v) a[q][v] = a[q][v] * s;
    }
    for (int q = 0; q < 4; ++q)
      for (int v = 0; v < 4; ++v) a[q][v].store(P + (j + q) * R + v * W);
  }
  for (; j < n; ++j) {
    V a[4];
    for (int v = 0; v < 4; ++v) a[v] = V::load(P + j * R + v * W);
    for (int64_t k = 0; k < j; ++k) {
      const V l = V::set1(L[k * ldl + j]);
      for (int v = 0; v < 4; ++v) a[v] = fnma(l, V::load(P + k * R + v * W), a[v]);
    }
    const V s = V::set1(inv[j]);
    for (int v = 0; v < 4; ++v) (a[v] * s).store(P + j * R + v * W);
  }
}

// B (m x n) <- B L^-T for lower L (n x n): X Lᵀ = B. One thread: potrf
// splits the rows of B across threads. The base case copies L and blocks of
// rows of B into small local arrays, which also keeps a leading dimension
// that aliases in the L1 sets (a power-of-two order factored in place) out
// of its inner loop.
template <class T> void trsm_rlt(Mat<T> L, Mat<T> B) {
  const int64_t n = L.n, m = B.m;
  if (m == 0 || n == 0) return;
  if (n <= kTrsmBase) {
    constexpr int64_t R = 4 * Vec<T>::W;
    alignas(64) T lp[kTrsmBase * kTrsmBase];
    alignas(64) T bp[R * kTrsmBase];
    T inv[kTrsmBase];
    for (int64_t k = 0; k < n; ++k) {
      std::memcpy(lp + k * n + k, L.col(k) + k, sizeof(T) * (n - k));
      inv[k] = T(1) / L(k, k);
    }
    for (int64_t r0 = 0; r0 < m; r0 += R) {
      const int64_t rows = std::min(R, m - r0);
      for (int64_t j = 0; j < n; ++j) {
        std::memcpy(bp + j * R, B.col(j) + r0, sizeof(T) * rows);
        if (rows < R) std::fill(bp + j * R + rows, bp + (j + 1) * R, T(0));
      }
      trsm_rlt_packed(lp, n, inv, bp, n);
      for (int64_t j = 0; j < n; ++j) std::memcpy(B.col(j) + r0, bp + j * R, sizeof(T) * rows);
    }
    return;
  }
  const int64_t n1 = split_half(n), n2 = n - n1;
  trsm_rlt(L.sub(0, 0, n1, n1), B.sub(0, 0, m, n1));
  gemm(false, true, T(-1), B.sub(0, 0, m, n1), L.sub(n1, 0, n2, n1), T(1), B.sub(0, n1, m, n2), 1);
  trsm_rlt(L.sub(n1, n1, n2, n2), B.sub(0, n1, m, n2));
}

// Lower triangle of C (n x n) -= A Aᵀ, A n x k, on one thread. Small
// diagonal blocks are done as full squares (their strictly upper part is
// scratch).
template <class T> void syrk_ln(Mat<T> A, Mat<T> C) {
  const int64_t n = C.n, k = A.n;
  if (n <= kSyrkBase) {
    gemm(false, true, T(-1), A, A, T(1), C, 1);
    return;
  }
  const int64_t n1 = split_half(n), n2 = n - n1;
  syrk_ln(A.sub(0, 0, n1, k), C.sub(0, 0, n1, n1));
  gemm(false, true, T(-1), A.sub(n1, 0, n2, k), A.sub(0, 0, n1, k), T(1), C.sub(n1, 0, n2, n1), 1);
  syrk_ln(A.sub(n1, 0, n2, k), C.sub(n1, n1, n2, n2));
}

// A21 <- A21 L11^-T, then the lower triangle of A22 -= A21 A21ᵀ, split
// across threads by bands of rows: equal bands for the solve, bands of
// equal work (edges at n2 √(t / tasks)) for the update, each band on serial
// kernels. Two fork-joins per step rather than one or two per GEMM: every
// fork-join waits for its slowest worker to check in, which on a busy
// machine costs far more than the split saves on small blocks.
template <class T> void trailing_update(Mat<T> L11, Mat<T> A21, Mat<T> A22, int threads) {
  const int64_t n1 = L11.n, n2 = A22.n;
  constexpr int64_t R = 4 * Vec<T>::W;  // the rows of a block of trsm_rlt's base case
  const int64_t tasks = std::min<int64_t>(threads, (n2 + R - 1) / R);
  ThreadPool::global().parallel_for(tasks, threads, [&](int64_t t, int) {
    const int64_t r0 = std::min(n2, (n2 * t / tasks + R - 1) / R * R);
    const int64_t r1 = std::min(n2, (n2 * (t + 1) / tasks + R - 1) / R * R);
    trsm_rlt(L11, A21.sub(r0, 0, r1 - r0, n1));
  });
  auto edge = [&](int64_t t) {
    if (t == tasks) return n2;
    const double e = static_cast<double>(n2) * std::sqrt(static_cast<double>(t) / static_cast<double>(tasks));
    return std::min(n2, (static_cast<int64_t>(e) + 8) / 16 * 16);
  };
  ThreadPool::global().parallel_for(tasks, threads, [&](int64_t t, int) {
    const int64_t r0 = edge(t), r1 = edge(t + 1);
    if (r1 <= r0) return;
    Mat<T> rows = A21.sub(r0, 0, r1 - r0, n1);
    gemm(false, true, T(-1), rows, A21.sub(0, 0, r0, n1), T(1), A22.sub(r0, 0, r1 - r0, r0), 1);
    syrk_ln(rows, A22.sub(r0, r0, r1 - r0, r1 - r0));
  });
}

// Lower Cholesky in place (the strictly upper part becomes scratch). A step
// whose solve is below 16 fork_join_flops() (n below about 800 by default)
// runs, with all below it, on one thread: splitting it costs two fork-joins,
// and on a busy machine a fork-join can cost a time slice of a descheduled
// worker, more than a second thread saves on a step of that size.
template <class T> Pivot<T> potrf(Mat<T> A, int threads) {
  const int64_t n = A.n;
  if (n <= kCholBase) return potrf_base(A);
  const int64_t n1 = split_half(n), n2 = n - n1;
  if (n2 * n1 * n1 < 16 * fork_join_flops()) threads = 1;
  Pivot<T> p = potrf(A.sub(0, 0, n1, n1), threads);
  if (p.index >= 0) return p;
  Mat<T> L11 = A.sub(0, 0, n1, n1), A21 = A.sub(n1, 0, n2, n1), A22 = A.sub(n1, n1, n2, n2);
  if (threads > 1) {
    trailing_update(L11, A21, A22, threads);
  } else {
    trsm_rlt(L11, A21);
    syrk_ln(A21, A22);
  }
  p = potrf(A22, threads);
  if (p.index >= 0) p.index += n1;
  return p;
}

// Substitution on columns [c0, c1) of B: L X = B, or Lᵀ X = B with trans.
template <class T>
inline void trsm_left_cols(Mat<T> L, const T* inv, Mat<T> B, bool trans, int64_t c0, int64_t c1) {
  const int64_t n = L.n;
  for (int64_t c = c0; c < c1; ++c) {
    T* b = B.col(c);
    if (!trans) {
      for (int64_t j = 0; j < n; ++j) {
        const T x = inv ? b[j] * inv[j] : b[j];
        b[j] = x;
        axpy(n - j - 1, -x, L.col(j) + j + 1, b + j + 1);
      }
    } else {
      for (int64_t j = n; j-- > 0;) {
        const T y = b[j] - dot(n - j - 1, L.col(j) + j + 1, b + j + 1);
        b[j] = inv ? y * inv[j] : y;
      }
    }
  }
}

// B (n x k) <- L⁻¹ B, or L⁻ᵀ B with trans, for lower L (unit diagonal when unit).
template <class T> void trsm_left(Mat<T> L, Mat<T> B, bool trans, bool unit, int threads) {
  const int64_t n = L.n, k = B.n;
  if (n == 0 || k == 0) return;
  if (n <= kTrsmBase) {
    T inv[kTrsmBase];
    for (int64_t j = 0; j < n; ++j) inv[j] = T(1) / L(j, j);
    const T* pinv = unit ? nullptr : inv;
    if (threads > 1 && k >= 2 * threads && k * n * n >= fork_join_flops()) {
      const int64_t tasks = std::min<int64_t>(threads, k);
      ThreadPool::global().parallel_for(tasks, threads, [&](int64_t t, int) {
        trsm_left_cols(L, pinv, B, trans, k * t / tasks, k * (t + 1) / tasks);
      });
    } else {
      trsm_left_cols(L, pinv, B, trans, 0, k);
    }
    return;
  }
  const int64_t n1 = split_half(n), n2 = n - n1;
  Mat<T> L11 = L.sub(0, 0, n1, n1), L21 = L.sub(n1, 0, n2, n1), L22 = L.sub(n1, n1, n2, n2);
  Mat<T> B1 = B.sub(0, 0, n1, k), B2 = B.sub(n1, 0, n2, k);
  if (!trans) {
    trsm_left(L11, B1, false, unit, threads);
    gemm(false, false, T(-1), L21, B1, T(1), B2, threads);
    trsm_left(L22, B2, false, unit, threads);
  } else {
    trsm_left(L22, B2, true, unit, threads);
    gemm(true, false, T(-1), L21, B2, T(1), B1, threads);
    trsm_left(L11, B1, true, unit, threads);
  }
}

}  // namespace sinew::linalg::detail::SINEW_LINALG_ISA
