// Vec<T>: the ISA's widest vector of T with the few operations the linalg
// templates use, and the column kernels built on it. In the generic copy a
// Vec is one scalar, so the same templates compile to plain scalar code.
// Included through isa_begin.h only.
#pragma once

namespace sinew::linalg::detail::SINEW_LINALG_ISA {

template <class T> struct Vec;

// GCC does not apply `#pragma GCC target` to functions defined inside a
// class body, so the AVX-512 Vec members carry the attribute themselves.

#ifdef SINEW_LINALG_AVX512

struct Mask16 {
  __mmask16 m;
  SINEW_LINALG_TARGET friend Mask16 operator&(Mask16 a, Mask16 b) { return {static_cast<__mmask16>(a.m & b.m)}; }
  SINEW_LINALG_TARGET friend Mask16 operator|(Mask16 a, Mask16 b) { return {static_cast<__mmask16>(a.m | b.m)}; }
};

template <> struct Vec<double> {
  using Scalar = double;
  static constexpr int W = 8;
  using Mask = Mask16;
  __m512d v;
  SINEW_LINALG_TARGET static __mmask8 first(int n) { return static_cast<__mmask8>((1u << n) - 1); }
  SINEW_LINALG_TARGET static Vec load(const double* p) { return {_mm512_loadu_pd(p)}; }
  SINEW_LINALG_TARGET static Vec load_n(const double* p, int n) { return {_mm512_maskz_loadu_pd(first(n), p)}; }
  SINEW_LINALG_TARGET void store(double* p) const { _mm512_storeu_pd(p, v); }
  SINEW_LINALG_TARGET void store_n(double* p, int n) const { _mm512_mask_storeu_pd(p, first(n), v); }
  SINEW_LINALG_TARGET static Vec set1(double x) { return {_mm512_set1_pd(x)}; }
  SINEW_LINALG_TARGET static Vec zero() { return {_mm512_setzero_pd()}; }
  SINEW_LINALG_TARGET friend Vec operator+(Vec a, Vec b) { return {_mm512_add_pd(a.v, b.v)}; }
  SINEW_LINALG_TARGET friend Vec operator-(Vec a, Vec b) { return {_mm512_sub_pd(a.v, b.v)}; }
  SINEW_LINALG_TARGET friend Vec operator*(Vec a, Vec b) { return {_mm512_mul_pd(a.v, b.v)}; }
  SINEW_LINALG_TARGET friend Vec operator/(Vec a, Vec b) { return {_mm512_div_pd(a.v, b.v)}; }
  SINEW_LINALG_TARGET friend Vec operator-(Vec a) { return {_mm512_xor_pd(a.v, _mm512_set1_pd(-0.0))}; }
  SINEW_LINALG_TARGET friend Vec fma(Vec a, Vec b, Vec c) { return {_mm512_fmadd_pd(a.v, b.v, c.v)}; }
  SINEW_LINALG_TARGET friend Vec fnma(Vec a, Vec b, Vec c) { return {_mm512_fnmadd_pd(a.v, b.v, c.v)}; }
  SINEW_LINALG_TARGET friend Vec sqrt(Vec a) { return {_mm512_sqrt_pd(a.v)}; }
  // 1 / a and 1 / √a to a relative 2⁻¹⁴ (Newton steps refine them).
  SINEW_LINALG_TARGET friend Vec rcp_approx(Vec a) { return {_mm512_rcp14_pd(a.v)}; }
  SINEW_LINALG_TARGET friend Vec rsqrt_approx(Vec a) { return {_mm512_rsqrt14_pd(a.v)}; }
  SINEW_LINALG_TARGET friend Vec abs(Vec a) { return {_mm512_abs_pd(a.v)}; }
  SINEW_LINALG_TARGET friend Vec max(Vec a, Vec b) { return {_mm512_max_pd(a.v, b.v)}; }
  SINEW_LINALG_TARGET friend Vec min(Vec a, Vec b) { return {_mm512_min_pd(a.v, b.v)}; }
  // Copies the sign of s onto |a|.
  SINEW_LINALG_TARGET friend Vec copysign(Vec a, Vec s) {
    const __m512d sign = _mm512_set1_pd(-0.0);
    return {_mm512_or_pd(_mm512_andnot_pd(sign, a.v), _mm512_and_pd(sign, s.v))};
  }
  SINEW_LINALG_TARGET friend double reduce_add(Vec a) { return _mm512_reduce_add_pd(a.v); }
  SINEW_LINALG_TARGET friend Mask operator<(Vec a, Vec b) { return {_mm512_cmp_pd_mask(a.v, b.v, _CMP_LT_OQ)}; }
  SINEW_LINALG_TARGET friend Mask operator<=(Vec a, Vec b) { return {_mm512_cmp_pd_mask(a.v, b.v, _CMP_LE_OQ)}; }
  SINEW_LINALG_TARGET friend Mask operator>(Vec a, Vec b) { return {_mm512_cmp_pd_mask(a.v, b.v, _CMP_GT_OQ)}; }
  SINEW_LINALG_TARGET friend Mask operator>=(Vec a, Vec b) { return {_mm512_cmp_pd_mask(a.v, b.v, _CMP_GE_OQ)}; }
  // m ? a : b, lane by lane.
  SINEW_LINALG_TARGET friend Vec select(Mask m, Vec a, Vec b) { return {_mm512_mask_blend_pd(static_cast<__mmask8>(m.m), b.v, a.v)}; }
  SINEW_LINALG_TARGET static Mask all_lanes() { return {0xff}; }
  SINEW_LINALG_TARGET static Mask not_(Mask m) { return {static_cast<__mmask16>(~m.m & 0xff)}; }
  SINEW_LINALG_TARGET static bool any(Mask m) { return (m.m & 0xff) != 0; }
  SINEW_LINALG_TARGET static bool lane(Mask m, int l) { return (m.m >> l) & 1; }
};

template <> struct Vec<float> {
  using Scalar = float;
  static constexpr int W = 16;
  using Mask = Mask16;
  __m512 v;
  SINEW_LINALG_TARGET static __mmask16 first(int n) { return static_cast<__mmask16>((1u << n) - 1); }
  SINEW_LINALG_TARGET static Vec load(const float* p) { return {_mm512_loadu_ps(p)}; }
  SINEW_LINALG_TARGET static Vec load_n(const float* p, int n) { return {_mm512_maskz_loadu_ps(first(n), p)}; }
  SINEW_LINALG_TARGET void store(float* p) const { _mm512_storeu_ps(p, v); }
  SINEW_LINALG_TARGET void store_n(float* p, int n) const { _mm512_mask_storeu_ps(p, first(n), v); }
  SINEW_LINALG_TARGET static Vec set1(float x) { return {_mm512_set1_ps(x)}; }
  SINEW_LINALG_TARGET static Vec zero() { return {_mm512_setzero_ps()}; }
  SINEW_LINALG_TARGET friend Vec operator+(Vec a, Vec b) { return {_mm512_add_ps(a.v, b.v)}; }
  SINEW_LINALG_TARGET friend Vec operator-(Vec a, Vec b) { return {_mm512_sub_ps(a.v, b.v)}; }
  SINEW_LINALG_TARGET friend Vec operator*(Vec a, Vec b) { return {_mm512_mul_ps(a.v, b.v)}; }
  SINEW_LINALG_TARGET friend Vec operator/(Vec a, Vec b) { return {_mm512_div_ps(a.v, b.v)}; }
  SINEW_LINALG_TARGET friend Vec operator-(Vec a) { return {_mm512_xor_ps(a.v, _mm512_set1_ps(-0.0f))}; }
  SINEW_LINALG_TARGET friend Vec fma(Vec a, Vec b, Vec c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  SINEW_LINALG_TARGET friend Vec fnma(Vec a, Vec b, Vec c) { return {_mm512_fnmadd_ps(a.v, b.v, c.v)}; }
  SINEW_LINALG_TARGET friend Vec sqrt(Vec a) { return {_mm512_sqrt_ps(a.v)}; }
  SINEW_LINALG_TARGET friend Vec rcp_approx(Vec a) { return {_mm512_rcp14_ps(a.v)}; }
  SINEW_LINALG_TARGET friend Vec rsqrt_approx(Vec a) { return {_mm512_rsqrt14_ps(a.v)}; }
  SINEW_LINALG_TARGET friend Vec abs(Vec a) { return {_mm512_abs_ps(a.v)}; }
  SINEW_LINALG_TARGET friend Vec max(Vec a, Vec b) { return {_mm512_max_ps(a.v, b.v)}; }
  SINEW_LINALG_TARGET friend Vec min(Vec a, Vec b) { return {_mm512_min_ps(a.v, b.v)}; }
  SINEW_LINALG_TARGET friend Vec copysign(Vec a, Vec s) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    return {_mm512_or_ps(_mm512_andnot_ps(sign, a.v), _mm512_and_ps(sign, s.v))};
  }
  SINEW_LINALG_TARGET friend float reduce_add(Vec a) { return _mm512_reduce_add_ps(a.v); }
  SINEW_LINALG_TARGET friend Mask operator<(Vec a, Vec b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ)}; }
  SINEW_LINALG_TARGET friend Mask operator<=(Vec a, Vec b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_LE_OQ)}; }
  SINEW_LINALG_TARGET friend Mask operator>(Vec a, Vec b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ)}; }
  SINEW_LINALG_TARGET friend Mask operator>=(Vec a, Vec b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_GE_OQ)}; }
  SINEW_LINALG_TARGET friend Vec select(Mask m, Vec a, Vec b) { return {_mm512_mask_blend_ps(m.m, b.v, a.v)}; }
  SINEW_LINALG_TARGET static Mask all_lanes() { return {0xffff}; }
  SINEW_LINALG_TARGET static Mask not_(Mask m) { return {static_cast<__mmask16>(~m.m)}; }
  SINEW_LINALG_TARGET static bool any(Mask m) { return m.m != 0; }
  SINEW_LINALG_TARGET static bool lane(Mask m, int l) { return (m.m >> l) & 1; }
};

#else

struct MaskBool {
  bool m;
  friend MaskBool operator&(MaskBool a, MaskBool b) { return {a.m && b.m}; }
  friend MaskBool operator|(MaskBool a, MaskBool b) { return {a.m || b.m}; }
};

template <class T> struct Vec {
  using Scalar = T;
  static constexpr int W = 1;
  using Mask = MaskBool;
  T v;
  static Vec load(const T* p) { return {*p}; }
  static Vec load_n(const T* p, int n) { return {n > 0 ? *p : T(0)}; }
  void store(T* p) const { *p = v; }
  void store_n(T* p, int n) const {
    if (n > 0) *p = v;
  }
  static Vec set1(T x) { return {x}; }
  static Vec zero() { return {T(0)}; }
  friend Vec operator+(Vec a, Vec b) { return {a.v + b.v}; }
  friend Vec operator-(Vec a, Vec b) { return {a.v - b.v}; }
  friend Vec operator*(Vec a, Vec b) { return {a.v * b.v}; }
  friend Vec operator/(Vec a, Vec b) { return {a.v / b.v}; }
  friend Vec operator-(Vec a) { return {-a.v}; }
  friend Vec fma(Vec a, Vec b, Vec c) { return {a.v * b.v + c.v}; }
  friend Vec fnma(Vec a, Vec b, Vec c) { return {c.v - a.v * b.v}; }
  friend Vec sqrt(Vec a) { return {std::sqrt(a.v)}; }
  friend Vec rcp_approx(Vec a) { return {T(1) / a.v}; }
  friend Vec rsqrt_approx(Vec a) { return {T(1) / std::sqrt(a.v)}; }
  friend Vec abs(Vec a) { return {std::abs(a.v)}; }
  friend Vec max(Vec a, Vec b) { return {a.v > b.v ? a.v : b.v}; }
  friend Vec min(Vec a, Vec b) { return {a.v < b.v ? a.v : b.v}; }
  friend Vec copysign(Vec a, Vec s) { return {std::copysign(a.v, s.v)}; }
  friend T reduce_add(Vec a) { return a.v; }
  friend Mask operator<(Vec a, Vec b) { return {a.v < b.v}; }
  friend Mask operator<=(Vec a, Vec b) { return {a.v <= b.v}; }
  friend Mask operator>(Vec a, Vec b) { return {a.v > b.v}; }
  friend Mask operator>=(Vec a, Vec b) { return {a.v >= b.v}; }
  friend Vec select(Mask m, Vec a, Vec b) { return m.m ? a : b; }
  static Mask all_lanes() { return {true}; }
  static Mask not_(Mask m) { return {!m.m}; }
  static bool any(Mask m) { return m.m; }
  static bool lane(Mask m, int) { return m.m; }
};

#endif

// 1 / a and 1 / √a from the approximations (2⁻¹⁴) by Newton steps: two
// give full double precision (a few ulps), one float's.
template <class P>
[[gnu::always_inline]] inline P newton_rcp(P a) {
  using T = typename P::Scalar;
  P y = rcp_approx(a);
  const P one = P::set1(T(1));
  for (int k = 0; k < (sizeof(T) == 8 ? 2 : 1); ++k) y = fma(y, fnma(a, y, one), y);
  return y;
}
template <class P>
[[gnu::always_inline]] inline P newton_rsqrt(P a) {
  using T = typename P::Scalar;
  P y = rsqrt_approx(a);
  const P half = P::set1(T(0.5)), three_halves = P::set1(T(1.5));
  for (int k = 0; k < (sizeof(T) == 8 ? 2 : 1); ++k) y = y * fnma(half * a, y * y, three_halves);
  return y;
}

// ---- column kernels on contiguous arrays ----------------------------------

template <class T> inline T dot(int64_t n, const T* x, const T* y) {
  using V = Vec<T>;
  constexpr int W = V::W;
  V a0 = V::zero(), a1 = V::zero(), a2 = V::zero(), a3 = V::zero();
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    a0 = fma(V::load(x + i), V::load(y + i), a0);
    a1 = fma(V::load(x + i + W), V::load(y + i + W), a1);
    a2 = fma(V::load(x + i + 2 * W), V::load(y + i + 2 * W), a2);
    a3 = fma(V::load(x + i + 3 * W), V::load(y + i + 3 * W), a3);
  }
  for (; i + W <= n; i += W) a0 = fma(V::load(x + i), V::load(y + i), a0);
  if (i < n) {
    const int r = static_cast<int>(n - i);
    a1 = fma(V::load_n(x + i, r), V::load_n(y + i, r), a1);
  }
  return reduce_add((a0 + a1) + (a2 + a3));
}

// y += a x
template <class T> inline void axpy(int64_t n, T a, const T* x, T* y) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const V va = V::set1(a);
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    fma(va, V::load(x + i), V::load(y + i)).store(y + i);
    fma(va, V::load(x + i + W), V::load(y + i + W)).store(y + i + W);
  }
  for (; i + W <= n; i += W) fma(va, V::load(x + i), V::load(y + i)).store(y + i);
  if (i < n) {
    const int r = static_cast<int>(n - i);
    fma(va, V::load_n(x + i, r), V::load_n(y + i, r)).store_n(y + i, r);
  }
}

template <class T> inline void scal(int64_t n, T a, T* x) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const V va = V::set1(a);
  int64_t i = 0;
  for (; i + W <= n; i += W) (va * V::load(x + i)).store(x + i);
  if (i < n) {
    const int r = static_cast<int>(n - i);
    (va * V::load_n(x + i, r)).store_n(x + i, r);
  }
}

// (x, y) <- (c x - s y, s x + c y)
template <class T> inline void rot(int64_t n, T* x, T* y, T c, T s) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const V vc = V::set1(c), vs = V::set1(s);
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    V a = V::load(x + i), b = V::load(y + i);
    fnma(vs, b, vc * a).store(x + i);
    fma(vs, a, vc * b).store(y + i);
  }
  if (i < n) {
    const int r = static_cast<int>(n - i);
    V a = V::load_n(x + i, r), b = V::load_n(y + i, r);
    fnma(vs, b, vc * a).store_n(x + i, r);
    fma(vs, a, vc * b).store_n(y + i, r);
  }
}

// max |x_i|
template <class T> inline T amax(int64_t n, const T* x) {
  using V = Vec<T>;
  constexpr int W = V::W;
  V m = V::zero();
  int64_t i = 0;
  for (; i + W <= n; i += W) m = max(m, abs(V::load(x + i)));
  if (i < n) m = max(m, abs(V::load_n(x + i, static_cast<int>(n - i))));
  alignas(64) T lanes[W];
  m.store(lanes);
  T r = 0;
  for (int l = 0; l < W; ++l) r = std::max(r, lanes[l]);
  return r;
}

// ‖x‖₂ without overflow or harmful underflow.
template <class T> inline T nrm2(int64_t n, const T* x) {
  const T ss = dot(n, x, x);
  const T lo = std::sqrt(std::numeric_limits<T>::min()) / std::numeric_limits<T>::epsilon();
  const T hi = std::sqrt(std::numeric_limits<T>::max()) / T(4);
  if (ss > lo * lo && ss < hi * hi) return std::sqrt(ss);
  const T m = amax(n, x);
  if (m == T(0) || !std::isfinite(m)) return m;
  T acc = 0;
  const T inv = T(1) / m;
  for (int64_t i = 0; i < n; ++i) {
    const T t = x[i] * inv;
    acc += t * t;
  }
  return m * std::sqrt(acc);
}

}  // namespace sinew::linalg::detail::SINEW_LINALG_ISA
