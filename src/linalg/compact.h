// Loading and storing the compact layout: Vec<T>::W matrices interleaved so
// that element (i, j) of all of them is one vector (lane l = matrix b0 + l).
// Small-matrix kernels then run W factorizations at once with no shuffles.
// Included through isa_begin.h only.
#pragma once

namespace sinew::linalg::detail::SINEW_LINALG_ISA {

// M (column-major, leading dimension ldm, in Vecs) <- matrices b0 .. b0+cnt-1
// of a; the lanes past cnt get the identity. With `trans` a is read
// transposed (M is a.cols x a.rows).
template <class T>
void load_lanes(const MatArg& a, int64_t b0, int cnt, Vec<T>* M, int64_t ldm, bool trans = false) {
  constexpr int W = Vec<T>::W;
  const int64_t rows = trans ? a.cols : a.rows, cols = trans ? a.rows : a.cols;
  const int64_t rs = trans ? a.cs : a.rs, cs = trans ? a.rs : a.cs;
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
