// AVX2 vector traits for the tile templates (tile/*.h): one ymm of f32 or
// f64. AVX2 has no mask registers, so a mask is a lane vector (for blends
// and masked loads) plus the lane count it was made from (for the narrow
// stores, which have no masked 16-bit form).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace sinew::kernels::avx2 {

struct Mask {
  __m256i v;
  int n;  // lanes [0, n) when made by first(); W otherwise
};

struct F32 {
  using T = float;
  using reg = __m256;
  using mask = Mask;
  static constexpr int W = 8;
  static constexpr int kRegs = 16;

  static mask first(int n) {
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return {_mm256_cmpgt_epi32(_mm256_set1_epi32(n), iota), n < W ? n : W};
  }
  static reg zero() { return _mm256_setzero_ps(); }
  static reg set1(T v) { return _mm256_set1_ps(v); }
  static reg load(const T* p) { return _mm256_loadu_ps(p); }
  static reg load(const T* p, mask m) { return _mm256_maskload_ps(p, m.v); }
  static void store(T* p, reg v) { _mm256_storeu_ps(p, v); }
  static void store(T* p, reg v, mask m) { _mm256_maskstore_ps(p, m.v, v); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg div(reg a, reg b) { return _mm256_div_ps(a, b); }
  // b where either is NaN (so max(c, x) and min(c, x) keep a NaN x).
  static reg max(reg a, reg b) { return _mm256_max_ps(a, b); }
  static reg min(reg a, reg b) { return _mm256_min_ps(a, b); }
  static reg abs(reg a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  static reg neg(reg a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
  static mask lt(reg a, reg b) { return {_mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_LT_OQ)), W}; }
  static mask isnan(reg a) { return {_mm256_castps_si256(_mm256_cmp_ps(a, a, _CMP_UNORD_Q)), W}; }
  static bool any(mask m) { return _mm256_movemask_ps(_mm256_castsi256_ps(m.v)) != 0; }
  static reg select(mask m, reg if_true, reg if_false) {
    return _mm256_blendv_ps(if_false, if_true, _mm256_castsi256_ps(m.v));
  }
  static reg round(reg a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // a * 2^n for integral n in [-126, 127].
  static reg scale2(reg a, reg n) {
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(a, _mm256_castsi256_ps(e));
  }
  static T sum(reg a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  // Narrow stores and loads, rounding like tensor/dtype.h.
  static void store_bf16(uint16_t* p, reg v, mask m) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    r = _mm256_blendv_epi8(r, q, isnan(v).v);
    store_u16(p, r, m.n);
  }
  static void store_f16(uint16_t* p, reg v, mask m) {
    alignas(16) uint16_t h[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(h), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    std::memcpy(p, h, sizeof(uint16_t) * m.n);
  }
  static reg load_bf16(const uint16_t* p, mask m) {
    alignas(16) uint16_t h[8] = {};
    std::memcpy(h, p, sizeof(uint16_t) * m.n);
    const __m256i w = _mm256_cvtepu16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static reg load_f16(const uint16_t* p, mask m) {
    alignas(16) uint16_t h[8] = {};
    std::memcpy(h, p, sizeof(uint16_t) * m.n);
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
  }

 private:
  static void store_u16(uint16_t* p, __m256i lanes32, int n) {
    alignas(32) uint32_t w[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(w), lanes32);
    for (int l = 0; l < n; ++l) p[l] = static_cast<uint16_t>(w[l]);
  }
};

struct F64 {
  using T = double;
  using reg = __m256d;
  using mask = Mask;
  static constexpr int W = 4;
  static constexpr int kRegs = 16;

  static mask first(int n) {
    const __m256i iota = _mm256_setr_epi64x(0, 1, 2, 3);
    return {_mm256_cmpgt_epi64(_mm256_set1_epi64x(n), iota), n < W ? n : W};
  }
  static reg zero() { return _mm256_setzero_pd(); }
  static reg set1(T v) { return _mm256_set1_pd(v); }
  static reg load(const T* p) { return _mm256_loadu_pd(p); }
  static reg load(const T* p, mask m) { return _mm256_maskload_pd(p, m.v); }
  static void store(T* p, reg v) { _mm256_storeu_pd(p, v); }
  static void store(T* p, reg v, mask m) { _mm256_maskstore_pd(p, m.v, v); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_pd(a, b, c); }
  static reg add(reg a, reg b) { return _mm256_add_pd(a, b); }
  static reg sub(reg a, reg b) { return _mm256_sub_pd(a, b); }
  static reg mul(reg a, reg b) { return _mm256_mul_pd(a, b); }
  static reg div(reg a, reg b) { return _mm256_div_pd(a, b); }
  static reg max(reg a, reg b) { return _mm256_max_pd(a, b); }
  static reg min(reg a, reg b) { return _mm256_min_pd(a, b); }
  static reg abs(reg a) { return _mm256_andnot_pd(_mm256_set1_pd(-0.0), a); }
  static reg neg(reg a) { return _mm256_xor_pd(a, _mm256_set1_pd(-0.0)); }
  static mask lt(reg a, reg b) { return {_mm256_castpd_si256(_mm256_cmp_pd(a, b, _CMP_LT_OQ)), W}; }
  static mask isnan(reg a) { return {_mm256_castpd_si256(_mm256_cmp_pd(a, a, _CMP_UNORD_Q)), W}; }
  static bool any(mask m) { return _mm256_movemask_pd(_mm256_castsi256_pd(m.v)) != 0; }
  static reg select(mask m, reg if_true, reg if_false) {
    return _mm256_blendv_pd(if_false, if_true, _mm256_castsi256_pd(m.v));
  }
  static T sum(reg a) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
  }
};

}  // namespace sinew::kernels::avx2
