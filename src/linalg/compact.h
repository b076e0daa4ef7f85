// Loading and storing the compact layout: Vec<T>::W matrices interleaved so
// that element (i, j) of all of them is one vector (lane l = matrix b0 + l).
// Small-matrix kernels then run W factorizations at once with no shuffles.
// Included through isa_begin.h only.
#pragma once

namespace sinew::linalg::detail::SINEW_LINALG_ISA {

// r[t] <- the W x W block r transposed: lane l of r[t] = lane t of r[l].
// Butterfly stages swap off-diagonal blocks of h x h, h = W/2 .. 1.
#ifdef SINEW_LINALG_AVX512
// One butterfly stage: lane k of the new r[i] is r[i + h][k - h] where k & h,
// else r[i][k]; of the new r[i + h], r[i + h][k] where k & h, else r[i][k + h].
// The permutation indices are compile-time constants (indices of the second
// source have bit log2(W) set).
template <int h> inline void transpose_stage(Vec<double>* r) {
  auto lo = [](int k) -> int64_t { return k & h ? 8 + k - h : k; };
  auto hi = [](int k) -> int64_t { return k & h ? 8 + k : k + h; };
  const __m512i il = _mm512_set_epi64(lo(7), lo(6), lo(5), lo(4), lo(3), lo(2), lo(1), lo(0));
  const __m512i ih = _mm512_set_epi64(hi(7), hi(6), hi(5), hi(4), hi(3), hi(2), hi(1), hi(0));
  for (int i = 0; i < 8; ++i)
    if (!(i & h)) {
      const __m512d a = r[i].v, b = r[i + h].v;
      r[i].v = _mm512_permutex2var_pd(a, il, b);
      r[i + h].v = _mm512_permutex2var_pd(a, ih, b);
    }
}
template <int h> inline void transpose_stage(Vec<float>* r) {
  auto lo = [](int k) { return k & h ? 16 + k - h : k; };
  auto hi = [](int k) { return k & h ? 16 + k : k + h; };
  const __m512i il = _mm512_set_epi32(lo(15), lo(14), lo(13), lo(12), lo(11), lo(10), lo(9), lo(8), lo(7), lo(6),
                                      lo(5), lo(4), lo(3), lo(2), lo(1), lo(0));
  const __m512i ih = _mm512_set_epi32(hi(15), hi(14), hi(13), hi(12), hi(11), hi(10), hi(9), hi(8), hi(7), hi(6),
                                      hi(5), hi(4), hi(3), hi(2), hi(1), hi(0));
  for (int i = 0; i < 16; ++i)
    if (!(i & h)) {
      const __m512 a = r[i].v, b = r[i + h].v;
      r[i].v = _mm512_permutex2var_ps(a, il, b);
      r[i + h].v = _mm512_permutex2var_ps(a, ih, b);
    }
}
inline void transpose_block(Vec<double>* r) {
  transpose_stage<4>(r);
  transpose_stage<2>(r);
  transpose_stage<1>(r);
}
inline void transpose_block(Vec<float>* r) {
  transpose_stage<8>(r);
  transpose_stage<4>(r);
  transpose_stage<2>(r);
  transpose_stage<1>(r);
}
#else
template <class T> inline void transpose_block(Vec<T>*) {
  static_assert(Vec<T>::W == 1, "transpose_block needs a W x W transpose for this ISA");
}
#endif

// Moves the contiguous runs of W full matrices p[l] (rows x cols, strides
// rs, cs, one of them 1) to or from the compact M (ld ldm), W x W blocks at
// a time through transpose_block: each matrix is read or written in memory
// order with whole vectors, where an element at a time costs W scalar loads
// and stores per vector of M. On store, lane l is scaled by scale[l] when
// given.
template <class T, bool kStore>
void move_lanes_blocked(T* const* p, int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                        std::conditional_t<kStore, const Vec<T>*, Vec<T>*> M, int64_t ldm, const T* scale) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const bool by_cols = rs == 1;
  const int64_t outer = by_cols ? cols : rows, inner = by_cols ? rows : cols, so = by_cols ? cs : rs;
  const int64_t mi = by_cols ? 1 : ldm, mo = by_cols ? ldm : 1;  // M strides along inner, outer
  const V sv = scale ? V::load(scale) : V::set1(T(1));
  V r[W];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k0 = 0; k0 < inner; k0 += W) {
      const int c = static_cast<int>(std::min<int64_t>(W, inner - k0));
      const auto m = M + o * mo + k0 * mi;
      if constexpr (kStore) {
        for (int t = 0; t < W; ++t) r[t] = t < c ? (scale ? m[t * mi] * sv : m[t * mi]) : V::zero();
        transpose_block(r);
        for (int l = 0; l < W; ++l) {
          T* d = p[l] + o * so + k0;
          if (c == W) r[l].store(d);
          else r[l].store_n(d, c);
        }
      } else {
        for (int l = 0; l < W; ++l) {
          const T* s = p[l] + o * so + k0;
          r[l] = c == W ? V::load(s) : V::load_n(s, c);
        }
        transpose_block(r);
        for (int t = 0; t < c; ++t) m[t * mi] = r[t];
      }
    }
}

// M (column-major, leading dimension ldm, in Vecs) <- matrices b0 .. b0+cnt-1
// of a; the lanes past cnt get the identity. With `trans` a is read
// transposed (M is a.cols x a.rows).
template <class T>
void load_lanes(const MatArg& a, int64_t b0, int cnt, Vec<T>* M, int64_t ldm, bool trans = false) {
  constexpr int W = Vec<T>::W;
  const int64_t rows = trans ? a.cols : a.rows, cols = trans ? a.rows : a.cols;
  const int64_t rs = trans ? a.cs : a.rs, cs = trans ? a.rs : a.cs;
  if (W > 1 && cnt == W && (rs == 1 || cs == 1)) {
    T* p[W];
    for (int l = 0; l < W; ++l) p[l] = a.ptr<T>(b0 + l);
    move_lanes_blocked<T, false>(p, rows, cols, rs, cs, M, ldm, nullptr);
    return;
  }
  T* mt = reinterpret_cast<T*>(M);
  for (int l = 0; l < W; ++l) {
    if (l < cnt) {
      const T* s = a.ptr<T>(b0 + l);
      if (cs == 1 && rs != 1) {  // walk the source in memory order
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) mt[(i + j * ldm) * W + l] = s[i * rs + j];
      } else {
        for (int64_t j = 0; j < cols; ++j)
          for (int64_t i = 0; i < rows; ++i) mt[(i + j * ldm) * W + l] = s[i * rs + j * cs];
      }
    } else {
      for (int64_t j = 0; j < cols; ++j)
        for (int64_t i = 0; i < rows; ++i) mt[(i + j * ldm) * W + l] = i == j ? T(1) : T(0);
    }
  }
}

// Matrices b0 .. b0+cnt-1 of a <- the rows x cols block of M, each lane l
// scaled by scale[l] when scale is given.
template <class T>
void store_lanes(const Vec<T>* M, int64_t ldm, int64_t rows, int64_t cols, const MatArg& a, int64_t b0, int cnt,
                 const T* scale = nullptr) {
  constexpr int W = Vec<T>::W;
  if (W > 1 && cnt == W && (a.rs == 1 || a.cs == 1)) {
    T* p[W];
    for (int l = 0; l < W; ++l) p[l] = a.ptr<T>(b0 + l);
    move_lanes_blocked<T, true>(p, rows, cols, a.rs, a.cs, M, ldm, scale);
    return;
  }
  const T* mt = reinterpret_cast<const T*>(M);
  for (int l = 0; l < cnt; ++l) {
    T* d = a.ptr<T>(b0 + l);
    const T s = scale ? scale[l] : T(1);
    if (a.cs == 1 && a.rs != 1) {  // write the destination in memory order
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) d[i * a.rs + j] = mt[(i + j * ldm) * W + l] * s;
    } else {
      for (int64_t j = 0; j < cols; ++j)
        for (int64_t i = 0; i < rows; ++i) d[i * a.rs + j * a.cs] = mt[(i + j * ldm) * W + l] * s;
    }
  }
}

// Records the first non-finite entry of each lane < cnt of the rows x cols M
// (positions reported in a's orientation, swapped when trans); true if any.
template <class T>
bool lanes_nonfinite(const Vec<T>* M, int64_t ldm, int64_t rows, int64_t cols, int64_t b0, int cnt, bool trans,
                     FailureLog* log) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const V big = V::set1(std::numeric_limits<T>::max());
  typename V::Mask bad = V::not_(V::all_lanes());
  for (int64_t j = 0; j < cols; ++j)
    for (int64_t i = 0; i < rows; ++i) bad = bad | V::not_(abs(M[i + j * ldm]) <= big);
  if (!V::any(bad)) return false;
  const T* mt = reinterpret_cast<const T*>(M);
  for (int l = 0; l < cnt; ++l) {
    if (!V::lane(bad, l)) continue;
    for (int64_t e = 0; e < rows * cols; ++e) {
      const int64_t i = e % rows, j = e / rows;
      const T x = mt[(i + j * ldm) * W + l];
      if (!std::isfinite(x)) {
        log->record({b0 + l, FailKind::kNonFinite, trans ? j : i, trans ? i : j, static_cast<double>(x)});
        break;
      }
    }
  }
  return true;
}

// Per-lane power-of-two scale that brings the largest |entry| into [0.5, 1)
// (exact, so results scale back exactly): M *= 1/s, returns s per lane.
template <class T> void scale_lanes(Vec<T>* M, int64_t ldm, int64_t rows, int64_t cols, T* s) {
  using V = Vec<T>;
  constexpr int W = V::W;
  V mx = V::zero();
  for (int64_t j = 0; j < cols; ++j)
    for (int64_t i = 0; i < rows; ++i) mx = max(mx, abs(M[i + j * ldm]));
  alignas(64) T m[W], inv[W];
  mx.store(m);
  for (int l = 0; l < W; ++l) {
    int e = 0;
    std::frexp(m[l], &e);
    s[l] = m[l] > T(0) ? std::ldexp(T(1), e) : T(1);
    inv[l] = T(1) / s[l];
  }
  const V vi = V::load(inv);
  for (int64_t j = 0; j < cols; ++j)
    for (int64_t i = 0; i < rows; ++i) M[i + j * ldm] = M[i + j * ldm] * vi;
}

}  // namespace sinew::linalg::detail::SINEW_LINALG_ISA
