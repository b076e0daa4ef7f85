// Cholesky factorization and triangular solves: recursive blocking whose
// updates are kernels::mm calls, small register-blocked base cases, and a
// compact kernel that factors Vec<T>::W small matrices at once, one per
// vector lane. Included through isa_begin.h only.
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

// ---- compact: W matrices at once, one per lane --------------------------------

// Lower triangles packed by rows: element (i, k), k <= i, at i (i + 1) / 2 + k.
inline int64_t packed(int64_t i, int64_t k) { return i * (i + 1) / 2 + k; }

// P (packed lower triangles, W lanes) <- the lower triangles of the W full
// n x n matrices p[l] (element (i, k) at i rs + k cs, rs or cs 1), and back
// (zeros above the diagonal), W x W blocks at a time through
// transpose_block (compact.h): each matrix is read or written in memory
// order with whole vectors. The load returns the lanes that hold a NaN or
// an infinity (x * 0 is NaN for those, 0 for finite x).
template <class T>
typename Vec<T>::Mask load_packed_blocked(T* const* p, int64_t n, int64_t rs, int64_t cs, Vec<T>* P) {
  using V = Vec<T>;
  constexpr int W = V::W;
  V r[W];
  const V zero = V::zero();
  V nan0 = zero, nan1 = zero;
  const bool by_cols = rs == 1;
  for (int64_t o = 0; o < n; ++o) {
    // column o from row o down, or row o up to column o
    const int64_t lo = by_cols ? o : 0, hi = by_cols ? n : o + 1;
    for (int64_t k0 = lo; k0 < hi; k0 += W) {
      const int c = static_cast<int>(std::min<int64_t>(W, hi - k0));
      for (int l = 0; l < W; ++l) {
        const T* s = p[l] + (by_cols ? k0 + o * cs : o * rs + k0);
        r[l] = c == W ? V::load(s) : V::load_n(s, c);
      }
      transpose_block(r);
      for (int t = 0; t < c; ++t) {
        P[by_cols ? packed(k0 + t, o) : packed(o, k0 + t)] = r[t];
        if (t & 1) nan1 = fma(r[t], zero, nan1);
        else nan0 = fma(r[t], zero, nan0);
      }
    }
  }
  return V::not_(abs(nan0 + nan1) <= zero);
}

template <class T> void store_packed_blocked(const Vec<T>* P, int64_t n, T* const* p, int64_t rs, int64_t cs) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const bool by_cols = rs == 1;
  V r[W];
  for (int64_t o = 0; o < n; ++o)
    for (int64_t k0 = 0; k0 < n; k0 += W) {
      // entries (k0 + t, o) by columns, (o, k0 + t) by rows; zeros above the diagonal
      const int c = static_cast<int>(std::min<int64_t>(W, n - k0));
      const bool nonzero = by_cols ? k0 + c > o : k0 <= o;
      if (nonzero) {
        for (int t = 0; t < W; ++t) {
          const int64_t i = by_cols ? k0 + t : o, k = by_cols ? o : k0 + t;
          r[t] = t < c && k <= i ? P[packed(i, k)] : V::zero();
        }
        transpose_block(r);
      }
      for (int l = 0; l < W; ++l) {
        T* d = p[l] + (by_cols ? k0 + o * cs : o * rs + k0);
        const V x = nonzero ? r[l] : V::zero();
        if (c == W) x.store(d);
        else x.store_n(d, c);
      }
    }
}

// The packed position of element e = outer n + inner of an n x n matrix
// (outer the column when by_cols, else the row), -1 above the diagonal.
inline std::vector<int32_t> packed_map(int64_t n, bool by_cols) {
  std::vector<int32_t> m(static_cast<size_t>(n * n));
  for (int64_t outer = 0; outer < n; ++outer)
    for (int64_t inner = 0; inner < n; ++inner) {
      const int64_t i = by_cols ? inner : outer, k = by_cols ? outer : inner;
      m[static_cast<size_t>(outer * n + inner)] = k <= i ? static_cast<int32_t>(packed(i, k)) : -1;
    }
  return m;
}

// The moves of load_ and store_packed_blocked for W contiguous matrices
// (inner stride 1, outer n), by 64-byte lines of memory rather than by
// columns, with map from packed_map: the W matrices at one offset share
// their L1 sets, and a line that two column blocks split is evicted
// between its halves (16 lines to a 12-way set in f32). Each line of each matrix is read and
// written once, with whole aligned vectors where the W matrices share
// their alignment; lines above the diagonal are not read.
template <class T> typename Vec<T>::Mask load_packed_lines(T* const* p, int64_t n, const int32_t* map, Vec<T>* P) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const int64_t nn = n * n, s = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p[0]) % 64 / sizeof(T));
  V r[W];
  const V zero = V::zero();
  V nan0 = zero, nan1 = zero;
  for (int64_t lo = 0, hi; lo < nn; lo = hi) {
    hi = std::min(nn, (lo + s) / W * W + W - s);
    const int c = static_cast<int>(hi - lo);
    bool lower = false;
    for (int t = 0; t < c; ++t) lower |= map[lo + t] >= 0;
    if (!lower) continue;
    for (int l = 0; l < W; ++l) r[l] = c == W ? V::load(p[l] + lo) : V::load_n(p[l] + lo, c);
    transpose_block(r);
    for (int t = 0; t < c; ++t)
      if (const int32_t e = map[lo + t]; e >= 0) {
        P[e] = r[t];
        if (t & 1) nan1 = fma(r[t], zero, nan1);
        else nan0 = fma(r[t], zero, nan0);
      }
  }
  return V::not_(abs(nan0 + nan1) <= zero);
}

template <class T> void store_packed_lines(const Vec<T>* P, int64_t n, const int32_t* map, T* const* p) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const int64_t nn = n * n, s = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p[0]) % 64 / sizeof(T));
  V r[W];
  for (int64_t lo = 0, hi; lo < nn; lo = hi) {
    hi = std::min(nn, (lo + s) / W * W + W - s);
    const int c = static_cast<int>(hi - lo);
    bool lower = false;
    for (int t = 0; t < W; ++t) {
      const int32_t e = t < c ? map[lo + t] : -1;
      r[t] = e >= 0 ? P[e] : V::zero();
      lower |= e >= 0;
    }
    if (lower) transpose_block(r);
    for (int l = 0; l < W; ++l) {
      if (c == W) r[l].store(p[l] + lo);
      else r[l].store_n(p[l] + lo, c);
    }
  }
}

// P (packed lower triangles, W lanes) <- the triangle of matrices b0 ..
// b0 + cnt - 1 of `a` that is read (upper: as the lower one of the
// transpose), lanes past cnt the identity; map: its packed_map() when it
// is contiguous. Returns false, after recording the first non-finite entry
// (by rows) of every lane that has one, when any has.
template <class T>
bool load_packed_lanes(const MatArg& a, bool upper, int64_t b0, int cnt, Vec<T>* P, FailureLog* log,
                       const int32_t* map = nullptr) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const int64_t n = a.rows;
  T* pt = reinterpret_cast<T*>(P);
  const int64_t rs = upper ? a.cs : a.rs, cs = upper ? a.rs : a.cs;
  typename V::Mask bad = V::not_(V::all_lanes());
  if (W > 1 && cnt == W && (rs == 1 || cs == 1)) {
    T* p[W];
    for (int l = 0; l < W; ++l) p[l] = a.ptr<T>(b0 + l);
    bad = map ? load_packed_lines(p, n, map, P) : load_packed_blocked(p, n, rs, cs, P);
  } else {
    for (int l = 0; l < W; ++l) {
      if (l < cnt) {
        const T* s = a.ptr<T>(b0 + l);
        if (rs == 1) {  // walk the source in memory order
          for (int64_t k = 0; k < n; ++k)
            for (int64_t i = k; i < n; ++i) pt[packed(i, k) * W + l] = s[i + k * cs];
        } else {
          for (int64_t i = 0; i < n; ++i)
            for (int64_t k = 0; k <= i; ++k) pt[packed(i, k) * W + l] = s[i * rs + k * cs];
        }
      } else {
        for (int64_t i = 0; i < n; ++i)
          for (int64_t k = 0; k <= i; ++k) pt[packed(i, k) * W + l] = i == k ? T(1) : T(0);
      }
    }
    const V big = V::set1(std::numeric_limits<T>::max());
    for (int64_t e = 0; e < packed(n, 0); ++e) bad = bad | V::not_(abs(P[e]) <= big);
  }
  if (!V::any(bad)) return true;
  for (int l = 0; l < cnt; ++l) {
    if (!V::lane(bad, l)) continue;
    [&] {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k <= i; ++k)
          if (const T x = pt[packed(i, k) * W + l]; !std::isfinite(x)) {
            log->record({b0 + l, FailKind::kNonFinite, upper ? k : i, upper ? i : k, static_cast<double>(x)});
            return;
          }
    }();
  }
  return false;
}

// The square root of pivot d of column j, 1 in the lanes where d is not
// positive (or NaN), which are recorded as failing at j unless they failed
// before.
template <class T>
inline Vec<T> pivot_root(Vec<T> d, int64_t j, int64_t b0, int cnt, typename Vec<T>::Mask& failed, FailureLog* log) {
  using V = Vec<T>;
  const auto bad = V::not_(d > V::zero());
  if (V::any(bad & V::not_(failed))) {
    alignas(64) T dv[V::W];
    d.store(dv);
    for (int l = 0; l < cnt; ++l)
      if (V::lane(bad, l) && !V::lane(failed, l))
        log->record({b0 + l, FailKind::kNotPositiveDefinite, j, 0, static_cast<double>(dv[l])});
    failed = failed | bad;
  }
  return sqrt(select(bad, V::set1(T(1)), d));
}

// The lower Cholesky factors of the W packed matrices in P, in place,
// left-looking two columns at a time: the dot products of a row with both
// pivot rows share its loads, four rows at once (8 accumulators, 6 loads
// per 8 FMAs; the last block of rows repeats the last row). Returns the
// failed lanes.
template <class T>
typename Vec<T>::Mask factor_packed(Vec<T>* P, int64_t n, int64_t b0, int cnt, FailureLog* log) {
  using V = Vec<T>;
  typename V::Mask failed = V::not_(V::all_lanes());
  const V one = V::set1(T(1)), zero = V::zero();
  for (int64_t j = 0; j < n; j += 2) {
    V* rj = P + packed(j, 0);
    if (j + 1 == n) {
      V d0 = rj[j], d1 = zero;
      int64_t q = 0;
      for (; q + 1 < j; q += 2) {
        d0 = fnma(rj[q], rj[q], d0);
        d1 = fnma(rj[q + 1], rj[q + 1], d1);
      }
      if (q < j) d0 = fnma(rj[q], rj[q], d0);
      rj[j] = pivot_root(d0 + d1, j, b0, cnt, failed, log);
      break;
    }
    // Columns j and j + 1 of rows j and j + 1: L(j + 1, j) and both pivots.
    V* rk = P + packed(j + 1, 0);
    V dj0 = rj[j], ak0 = rk[j], dk0 = rk[j + 1], dj1 = zero, ak1 = zero, dk1 = zero;
    int64_t q = 0;
    for (; q + 1 < j; q += 2) {
      const V x0 = rj[q], y0 = rk[q], x1 = rj[q + 1], y1 = rk[q + 1];
      dj0 = fnma(x0, x0, dj0);
      ak0 = fnma(y0, x0, ak0);
      dk0 = fnma(y0, y0, dk0);
      dj1 = fnma(x1, x1, dj1);
      ak1 = fnma(y1, x1, ak1);
      dk1 = fnma(y1, y1, dk1);
    }
    if (q < j) {
      const V x = rj[q], y = rk[q];
      dj0 = fnma(x, x, dj0);
      ak0 = fnma(y, x, ak0);
      dk0 = fnma(y, y, dk0);
    }
    const V rjj = pivot_root(dj0 + dj1, j, b0, cnt, failed, log);
    const V ij = one / rjj;
    const V lkj = (ak0 + ak1) * ij;
    const V rkk = pivot_root(fnma(lkj, lkj, dk0 + dk1), j + 1, b0, cnt, failed, log);
    const V ik = one / rkk;
    rj[j] = rjj;
    rk[j] = lkj;
    rk[j + 1] = rkk;
    for (int64_t i = j + 2; i < n; i += 4) {
      V* r0 = P + packed(i, 0);
      V* r1 = P + packed(std::min(i + 1, n - 1), 0);
      V* r2 = P + packed(std::min(i + 2, n - 1), 0);
      V* r3 = P + packed(std::min(i + 3, n - 1), 0);
      V a0 = r0[j], a1 = r1[j], a2 = r2[j], a3 = r3[j];
      V c0 = r0[j + 1], c1 = r1[j + 1], c2 = r2[j + 1], c3 = r3[j + 1];
      for (int64_t k = 0; k < j; ++k) {
        const V x = rj[k], y = rk[k];
        const V s0 = r0[k], s1 = r1[k], s2 = r2[k], s3 = r3[k];
        a0 = fnma(s0, x, a0);
        c0 = fnma(s0, y, c0);
        a1 = fnma(s1, x, a1);
        c1 = fnma(s1, y, c1);
        a2 = fnma(s2, x, a2);
        c2 = fnma(s2, y, c2);
        a3 = fnma(s3, x, a3);
        c3 = fnma(s3, y, c3);
      }
      a0 = a0 * ij;
      a1 = a1 * ij;
      a2 = a2 * ij;
      a3 = a3 * ij;
      // Rows past n - 1 repeat row n - 1: the same values, stored again.
      r0[j] = a0;
      r0[j + 1] = fnma(a0, lkj, c0) * ik;
      r1[j] = a1;
      r1[j + 1] = fnma(a1, lkj, c1) * ik;
      r2[j] = a2;
      r2[j + 1] = fnma(a2, lkj, c2) * ik;
      r3[j] = a3;
      r3[j + 1] = fnma(a3, lkj, c3) * ik;
    }
  }
  return failed;
}

// packed_map()s of the input and the output read as lower, where they are
// contiguous (else empty: moved by columns).
struct CompactMaps {
  std::vector<int32_t> in, out;
  static std::vector<int32_t> of(const MatArg& lower, int64_t n) {
    if (lower.rs == 1 && lower.cs == n) return packed_map(n, true);
    if (lower.cs == 1 && lower.rs == n) return packed_map(n, false);
    return {};
  }
};

// Factors matrices b0 .. b0 + cnt - 1 (cnt <= W) in P.
template <class T>
void cholesky_compact(const CholeskyJob& job, const CompactMaps& maps, int64_t b0, int cnt, Vec<T>* P) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const int64_t n = job.a.rows;
  if (!load_packed_lanes(job.a, job.upper, b0, cnt, P, job.log, maps.in.empty() ? nullptr : maps.in.data())) return;
  if (V::any(factor_packed(P, n, b0, cnt, job.log))) return;
  const MatArg out = job.upper ? job.out.transposed() : job.out;
  if (W > 1 && cnt == W && (out.rs == 1 || out.cs == 1)) {
    T* p[W];
    for (int l = 0; l < W; ++l) p[l] = out.ptr<T>(b0 + l);
    if (maps.out.empty()) store_packed_blocked(P, n, p, out.rs, out.cs);
    else store_packed_lines(P, n, maps.out.data(), p);
    return;
  }
  const T* pt = reinterpret_cast<const T*>(P);
  for (int l = 0; l < cnt; ++l) {
    T* d = out.ptr<T>(b0 + l);
    if (out.rs == 1) {  // write the destination in memory order
      for (int64_t k = 0; k < n; ++k)
        for (int64_t i = 0; i < n; ++i) d[i + k * out.cs] = k <= i ? pt[packed(i, k) * W + l] : T(0);
    } else {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < n; ++k) d[i * out.rs + k * out.cs] = k <= i ? pt[packed(i, k) * W + l] : T(0);
    }
  }
}

// ---- a few matrices at a time, in L1 --------------------------------------------

// Where the output is column-contiguous, each thread factors its run of
// consecutive matrices where they lie, two at a time, with vectors along the
// columns: memory is streamed in order and each matrix stays in L1 while it
// is factored, where the compact kernel below gathers W matrices 8 KB apart
// by lines and stalls on those loads.

// Lane l of x in every lane; the first lane of x; x with lane l set to s.
#ifdef SINEW_LINALG_AVX512
inline Vec<double> bcast_lane(Vec<double> x, int64_t l) { return {_mm512_permutexvar_pd(_mm512_set1_epi64(l), x.v)}; }
inline Vec<float> bcast_lane(Vec<float> x, int64_t l) {
  return {_mm512_permutexvar_ps(_mm512_set1_epi32(static_cast<int>(l)), x.v)};
}
inline double first_lane(Vec<double> x) { return _mm512_cvtsd_f64(x.v); }
inline float first_lane(Vec<float> x) { return _mm512_cvtss_f32(x.v); }
inline Vec<double> with_lane(Vec<double> x, int64_t l, double s) {
  return {_mm512_mask_broadcastsd_pd(x.v, static_cast<__mmask8>(1u << l), _mm_set_sd(s))};
}
inline Vec<float> with_lane(Vec<float> x, int64_t l, float s) {
  return {_mm512_mask_broadcastss_ps(x.v, static_cast<__mmask16>(1u << l), _mm_set_ss(s))};
}
#else
template <class T> inline Vec<T> bcast_lane(Vec<T> x, int64_t) { return x; }
template <class T> inline T first_lane(Vec<T> x) { return x.v; }
template <class T> inline Vec<T> with_lane(Vec<T>, int64_t, T s) { return {s}; }
#endif

// One factorization in potrf_l1: its first pivot that is not positive, and
// the block [bad_r0, n) x [bad_j0, bad_j1) whose load met a NaN or an
// infinity (bad_j0 -1: none); nothing of the matrix is stored after that.
template <class T> struct L1State {
  Pivot<T> pivot;
  int64_t bad_j0 = -1, bad_j1 = 0, bad_r0 = 0;
};

// Rows [r0, r0 + rows) (rows <= R W) of the P columns at j0 of M lower
// Cholesky factorizations in progress: updated by the columns left of j0
// with the R x P blocks in registers, then, when the block holds the
// diagonal (diag: the rows j0 .. j0 + P - 1 in the block's first W, or P
// where W is 1), factored column by column with the pivots taken from the
// registers, the M chains of pivots (square root, reciprocal, scaling)
// interleaved, else solved against the factored diagonal block (inv + m P:
// the reciprocal pivots of matrix m). A pivot that is not positive is
// recorded in st[m] (its first) and replaced by 1. The entries on and below
// the diagonal are checked as they are first loaded: a matrix with a NaN or
// an infinity among them stores nothing more (st[m].bad_*), so that what
// has not been read is still the input. Full vectors are moved unmasked, so
// that loads of what was just stored are forwarded. Lanes above the
// diagonal carry scratch.
template <class T, int M, int P, int R>
inline void chol_block(const Mat<T>* A, int64_t j0, int64_t r0, int64_t rows, bool diag, T* inv, L1State<T>* st) {
  using V = Vec<T>;
  constexpr int W = V::W;
  // Locals, not A's fields: vector stores may alias anything, A included.
  T* base[M];
  #pragma GCC unroll 16
  for (int m = 0; m < M; ++m) base[m] = A[m].p;
  const int64_t ldm = A[0].ld;
  const auto at = [&](int m, int64_t i, int64_t j) -> T& { return base[m][i + j * ldm]; };
  const auto col = [&](int m, int64_t j) { return base[m] + j * ldm; };
  int c[R];
  #pragma GCC unroll 16
  for (int v = 0; v < R; ++v) c[v] = static_cast<int>(std::clamp<int64_t>(rows - v * W, 0, W));
  const auto ld = [&](const T* p, int v) { return c[v] == W ? V::load(p + v * W) : V::load_n(p + v * W, c[v]); };
  // Every loop over m, q, v, p is unrolled by pragma: left to itself gcc
  // kept a[][][] on the stack and stored each accumulator on every k (a
  // f64 32x32 matrix hot in cache took 0.74 us; 0.54 unrolled).
  V a[M][P][R];
  #pragma GCC unroll 16
  for (int m = 0; m < M; ++m)
    #pragma GCC unroll 16
    for (int q = 0; q < P; ++q)
      #pragma GCC unroll 16
      for (int v = 0; v < R; ++v) a[m][q][v] = ld(col(m, j0 + q) + r0, v);
  {
    static constexpr T kLane[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    static_assert(W <= 16);
    const V lane = V::load(kLane), big = V::set1(std::numeric_limits<T>::max());
    #pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
      if (st[m].bad_j0 >= 0) continue;
      typename V::Mask bad = V::not_(V::all_lanes());
      #pragma GCC unroll 16
      for (int q = 0; q < P; ++q)
        #pragma GCC unroll 16
        for (int v = 0; v < R; ++v)  // lanes of rows r0 + v W + l >= j0 + q
          bad = bad | ((lane >= V::set1(static_cast<T>(j0 + q - r0 - v * W))) & V::not_(abs(a[m][q][v]) <= big));
      if (V::any(bad)) st[m] = {st[m].pivot, j0, j0 + P, r0};
    }
  }
  for (int64_t k = 0; k < j0; ++k)
    #pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
      const T* xk = col(m, k) + r0;
      V x[R];
      #pragma GCC unroll 16
      for (int v = 0; v < R; ++v) x[v] = ld(xk, v);
      #pragma GCC unroll 16
      for (int q = 0; q < P; ++q) {
        const V b = V::set1(at(m, j0 + q, k));
        #pragma GCC unroll 16
        for (int v = 0; v < R; ++v) a[m][q][v] = fnma(x[v], b, a[m][q][v]);
      }
    }
  // Row j0 + q: lane lq of vector vq (0 where W > 1). The diagonal block
  // keeps its columns u_p unscaled, with rd[p] = 1 / pivot p, and updates
  // column q by u_p u_p(q) / pivot p: the chain from one pivot to the next
  // is a division, with the square root and the scaling beside it.
  constexpr int64_t zero = 0;
  T rd[M][P];
  #pragma GCC unroll 16
  for (int q = 0; q < P; ++q)
    #pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
      const int vq = W == 1 ? std::min(q, R - 1) : 0;
      const int64_t lq = W == 1 ? zero : j0 - r0 + q;
      #pragma GCC unroll 16
      for (int p = 0; p < q; ++p) {
        const V l = diag ? bcast_lane(a[m][p][vq], lq) * V::set1(rd[m][p]) : V::set1(at(m, j0 + q, j0 + p));
        #pragma GCC unroll 16
        for (int v = 0; v < R; ++v) a[m][q][v] = fnma(a[m][p][v], l, a[m][q][v]);
      }
      T* cq = col(m, j0 + q) + r0;
      const bool keep = st[m].bad_j0 < 0;
      if (!diag) {
        const V s = V::set1(inv[m * P + q]);
        #pragma GCC unroll 16
        for (int v = 0; v < R; ++v) {
          a[m][q][v] = a[m][q][v] * s;
          if (!keep) continue;
          if (c[v] == W) a[m][q][v].store(cq + v * W);
          else a[m][q][v].store_n(cq + v * W, c[v]);
        }
        continue;
      }
      T d = first_lane(bcast_lane(a[m][q][vq], lq));
      if (!(d > T(0))) {
        if (st[m].pivot.index < 0) st[m].pivot = {j0 + q, d};
        d = T(1);
      }
      rd[m][q] = T(1) / d;
      const T r = std::sqrt(d);
      inv[m * P + q] = T(1) / r;
      const V s = V::set1(inv[m * P + q]);
      #pragma GCC unroll 16
      for (int v = 0; v < R && keep; ++v) {
        V l = a[m][q][v] * s;
        if (v == vq) l = with_lane(l, lq, r);
        if (c[v] == W) l.store(cq + v * W);
        else l.store_n(cq + v * W, c[v]);
      }
    }
}

// Rows [r0, r0 + rows) of panel j0 below its diagonal block (rows <= 4 W,
// P <= 4) by chol_block with as few vectors as they need.
template <class T, int P>
inline void chol_rows(const Mat<T>& A, int64_t j0, int64_t r0, int64_t rows, T* inv, L1State<T>* st) {
  constexpr int W = Vec<T>::W;
  switch ((rows + W - 1) / W) {
    case 1: return chol_block<T, 1, P, 1>(&A, j0, r0, rows, false, inv, st);
    case 2: return chol_block<T, 1, P, 2>(&A, j0, r0, rows, false, inv, st);
    case 3: return chol_block<T, 1, P, 3>(&A, j0, r0, rows, false, inv, st);
    default: return chol_block<T, 1, P, 4>(&A, j0, r0, rows, false, inv, st);
  }
}

// Lower Cholesky of M small matrices (n <= kCompactCholMax, M <= 2), in
// place, left-looking by panels of 4 columns: first the W rows that hold
// the panel's diagonal block, of all M matrices at once, so that their
// chains of pivots overlap, then the rows below, matrix by matrix, 4 W at a
// time. The strictly upper parts become scratch. st[m]: the first pivot of
// matrix m that is not positive (index -1: none; the matrix is then left
// garbage), and where a NaN or an infinity was met (see chol_block).
// Meanwhile the `bytes` at each of the npf addresses pf are prefetched for
// writing, a share per panel: a burst of prefetches stalls on the line fill
// buffers, and from the next matrices only, not prefetched, the loads stall
// on memory (the hardware prefetcher alone halves the speed in f64).
template <class T, int M>
void potrf_l1(const Mat<T>* A, L1State<T>* st, const char* const* pf = nullptr, int npf = 0, int64_t bytes = 0) {
  constexpr int W = Vec<T>::W;
  constexpr int P = 4;
  constexpr int64_t Rows = 4 * W;  // of each chol_rows
  const int64_t n = A[0].n;
  T inv[M * P];
  for (int m = 0; m < M; ++m) st[m] = {};
  for (int64_t j0 = 0; j0 < n;) {
    const bool wide = n - j0 >= P;
    const int64_t base = j0 - j0 % W;
    // W == 1: the diagonal block is P rows of P scalars.
    const int64_t drows = std::min<int64_t>(n - base, W == 1 && wide ? P : W);
    if (wide) chol_block<T, M, P, (W == 1 ? P : 1)>(A, j0, base, drows, true, inv, st);
    else chol_block<T, M, 1, 1>(A, j0, base, drows, true, inv, st);
    for (int64_t r0 = base + drows; r0 < n; r0 += Rows)
      for (int m = 0; m < M; ++m) {
        const int64_t rows = std::min(Rows, n - r0);
        if (wide) chol_rows<T, P>(A[m], j0, r0, rows, inv + m * P, st + m);
        else chol_rows<T, 1>(A[m], j0, r0, rows, inv + m, st + m);
      }
    const int64_t j1 = j0 + (wide ? P : 1);
    for (int e = 0; e < npf; ++e)
      for (int64_t o = bytes * j0 / n / 64 * 64; o < bytes * j1 / n; o += 64) __builtin_prefetch(pf[e] + o, 1, 3);
    j0 = j1;
  }
}

// Matrices [b0, b1) of src factored in dst where they lie (both read as
// lower; factors_in_out holds), two at a time.
template <class T>
void cholesky_in_l1(const CholeskyJob& job, const MatArg& src, const MatArg& dst, int64_t b0, int64_t b1) {
  const int64_t n = job.a.rows;
  const int64_t bytes = static_cast<int64_t>(sizeof(T)) * ((n - 1) * dst.cs + n);
  Mat<T> A[2];
  L1State<T> st[2];
  for (int64_t b = b0; b < b1; b += 2) {
    const int m = static_cast<int>(std::min<int64_t>(2, b1 - b));
    for (int i = 0; i < m; ++i) {
      A[i] = {dst.ptr<T>(b + i), n, n, dst.cs};
      if (src.ptr<T>(b + i) != A[i].p) load_lower(src, b + i, A[i], false);
    }
    // The next two matrices, brought in while these are factored.
    const char* next[2];
    int npf = 0;
    for (int64_t e = b + 2; e < std::min(b + 4, b1); ++e) next[npf++] = reinterpret_cast<const char*>(dst.ptr<T>(e));
    if (m == 2) potrf_l1<T, 2>(A, st, next, npf, bytes);
    else potrf_l1<T, 1>(A, st, next, npf, bytes);
    for (int i = 0; i < m; ++i) {
      if (st[i].bad_j0 >= 0) {
        // The first non-finite entry by rows, among those not yet overwritten.
        [&] {
          for (int64_t r = 0; r < n; ++r)
            for (int64_t k = st[i].bad_j0; k <= r; ++k)
              if (const T x = A[i](r, k); (k >= st[i].bad_j1 || r >= st[i].bad_r0) && !std::isfinite(x)) {
                job.log->record(
                    {b + i, FailKind::kNonFinite, job.upper ? k : r, job.upper ? r : k, static_cast<double>(x)});
                return;
              }
        }();
        continue;
      }
      if (st[i].pivot.index >= 0) {
        job.log->record({b + i, FailKind::kNotPositiveDefinite, st[i].pivot.index, 0,
                         static_cast<double>(st[i].pivot.value)});
        continue;
      }
      for (int64_t j = 1; j < n; ++j) std::fill(A[i].col(j), A[i].col(j) + j, T(0));
    }
  }
}

// Whether matrix b's lower factor can be formed in dst (the output read as
// lower) itself: dst is column-contiguous and either holds src in the same
// layout (factoring in place) or does not overlap it. Then no workspace is
// needed and nothing is copied back.
template <class T> bool factors_in_out(const MatArg& src, const MatArg& dst, int64_t b, int64_t n) {
  if (dst.rs != 1 || dst.cs < n) return false;
  const auto s = reinterpret_cast<uintptr_t>(src.ptr<T>(b)), d = reinterpret_cast<uintptr_t>(dst.ptr<T>(b));
  if (s == d) return src.rs == 1 && src.cs == dst.cs;
  const auto span = [&](uintptr_t p, int64_t rs, int64_t cs) {
    return p + static_cast<uintptr_t>(((n - 1) * (rs + cs) + 1) * static_cast<int64_t>(sizeof(T)));
  };
  return span(s, src.rs, src.cs) <= d || span(d, 1, dst.cs) <= s;
}

template <class T> void cholesky_job(const CholeskyJob& job) {
  const int64_t n = job.a.rows, count = job.a.batch();
  if (n == 0 || count == 0) return;
  using V = Vec<T>;
  constexpr int W = V::W;
  // Both read as lower: the transposes of upper operands.
  const MatArg src = job.upper ? job.a.transposed() : job.a, dst = job.upper ? job.out.transposed() : job.out;
  if (n <= kCompactCholMax && count >= 2) {
    // A column-contiguous output: runs of consecutive matrices factored
    // where they lie, two at a time (cholesky_in_l1); else the compact kernel.
    bool direct = true;
    for (int64_t b = 0; b < count && direct; ++b) direct = factors_in_out<T>(src, dst, b, n);
    if (direct) {
      const int64_t tasks = std::max<int64_t>(std::min<int64_t>(count, job.threads), (count + kL1Run - 1) / kL1Run);
      ThreadPool::global().parallel_for(tasks, job.threads, [&](int64_t t, int) {
        cholesky_in_l1<T>(job, src, dst, count * t / tasks, count * (t + 1) / tasks);
      });
      return;
    }
    // Tasks are runs of about kCompactRun consecutive groups, so that each
    // thread reads and writes memory in order.
    const int64_t groups = (count + W - 1) / W;
    const int64_t tasks =
        std::max<int64_t>(std::min<int64_t>(groups, job.threads), (groups + kCompactRun - 1) / kCompactRun);
    const auto group_size = [&](int64_t g) { return static_cast<int>(std::min<int64_t>(W, count - g * W)); };
    CompactMaps maps;
    if (W > 1) {
      maps.in = CompactMaps::of(job.upper ? job.a.transposed() : job.a, n);
      maps.out = CompactMaps::of(job.upper ? job.out.transposed() : job.out, n);
    }
    PerWorker<Buffer<V>> bufs(job.threads);
    ThreadPool::global().parallel_for(tasks, job.threads, [&](int64_t t, int w) {
      V* P = bufs[w].get(static_cast<size_t>(packed(n, 0)));
      const int64_t g1 = groups * (t + 1) / tasks;
      for (int64_t g = groups * t / tasks; g < g1; ++g) cholesky_compact<T>(job, maps, g * W, group_size(g), P);
    });
    return;
  }
  PerWorker<Buffer<T>> bufs(job.threads);
  for_each_matrix(count, job.threads, [&](int64_t b, int w, int threads) {
    const bool direct = factors_in_out<T>(src, dst, b, n);
    Mat<T> A;
    if (direct) {
      A = {dst.ptr<T>(b), n, n, dst.cs};
    } else {
      T* cur = bufs[w].get(carve_size<T>(n, n));
      A = carve<T>(cur, n, n);
    }
    Failure f;
    bool bad;
    if (direct && src.ptr<T>(b) == A.p) bad = find_nonfinite(A, true, &f);
    else bad = load_lower_checked(src, b, A, &f);
    if (bad) {
      if (job.upper) std::swap(f.i, f.j);
      f.batch = b;
      job.log->record(f);
      return;
    }
    Pivot<T> p = potrf(A, threads);
    if (p.index >= 0) {
      job.log->record({b, FailKind::kNotPositiveDefinite, p.index, 0, static_cast<double>(p.value)});
      return;
    }
    for (int64_t j = 1; j < n; ++j) std::fill(A.col(j), A.col(j) + j, T(0));
    if (!direct) store(A, dst, b);
  });
}

// Loads a triangular operand as a lower-triangular L (the transpose of an
// upper one), checking its triangle and diagonal; false and *f on failure.
template <class T> bool load_triangle(const MatArg& a, int64_t b, Mat<T> L, bool upper, bool unit, Failure* f) {
  load_lower(a, b, L, upper);
  if (unit)
    for (int64_t j = 0; j < L.n; ++j) L(j, j) = T(1);
  if (find_nonfinite(L, true, f)) {
    if (upper) std::swap(f->i, f->j);
    return false;
  }
  for (int64_t j = 0; j < L.n; ++j)
    if (L(j, j) == T(0)) {
      *f = {b, FailKind::kZeroDiagonal, j, j, 0.0};
      return false;
    }
  return true;
}

template <class T> void trsm_job(const TrsmJob& job) {
  const int64_t n = job.a.rows, k = job.b.cols, count = job.a.batch();
  if (count == 0 || k == 0) return;
  PerWorker<Buffer<T>> bufs(job.threads);
  for_each_matrix(count, job.threads, [&](int64_t b, int w, int threads) {
    T* cur = bufs[w].get(carve_size<T>(n, n) + carve_size<T>(n, k));
    Mat<T> L = carve<T>(cur, n, n), X = carve<T>(cur, n, k);
    Failure f;
    bool ok = load_triangle(job.a, b, L, job.upper, job.unit, &f);
    if (ok) {
      f.operand = "b";
      load(job.b, b, X);
      ok = !find_nonfinite(X, false, &f);
    } else {
      f.operand = "a";
    }
    if (!ok) {
      if (job.right) std::swap(f.i, f.j);  // positions in the caller's (untransposed) operand
      f.batch = b;
      job.log->record(f);
      return;
    }
    trsm_left(L, X, job.upper, job.unit, threads);
    store(X, job.x, b);
  });
}

template <class T> void cholesky_solve_job(const CholSolveJob& job) {
  const int64_t n = job.factor.rows, k = job.b.cols, count = job.factor.batch();
  if (count == 0 || k == 0) return;
  PerWorker<Buffer<T>> bufs(job.threads);
  for_each_matrix(count, job.threads, [&](int64_t b, int w, int threads) {
    T* cur = bufs[w].get(carve_size<T>(n, n) + carve_size<T>(n, k));
    Mat<T> L = carve<T>(cur, n, n), X = carve<T>(cur, n, k);
    Failure f;
    bool ok = load_triangle(job.factor, b, L, job.upper, false, &f);
    if (ok) {
      f.operand = "b";
      load(job.b, b, X);
      ok = !find_nonfinite(X, false, &f);
    } else {
      f.operand = "factor";
    }
    if (!ok) {
      f.batch = b;
      job.log->record(f);
      return;
    }
    trsm_left(L, X, false, false, threads);
    trsm_left(L, X, true, false, threads);
    store(X, job.x, b);
  });
}

}  // namespace sinew::linalg::detail::SINEW_LINALG_ISA
