// Batches of small Cholesky factorizations done where the matrices lie, a
// few at a time in L1. Included through isa_begin.h only, after
// cholesky_compact_impl.h.
#pragma once

namespace sinew::linalg::detail::SINEW_LINALG_ISA {

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

}  // namespace sinew::linalg::detail::SINEW_LINALG_ISA
