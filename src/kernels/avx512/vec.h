// AVX-512 vector traits for the tile templates (tile/*.h): one zmm of f32
// or f64 with mask registers for ragged edges. Compiled only into this
// folder's sources, which carry the AVX-512 flags.
#pragma once

// GCC 12 flags the _mm512_undefined_* inside its own intrinsics headers as
// (maybe) uninitialized wherever they inline (GCC PR 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>

namespace sinew::kernels::avx512 {

struct F32 {
  using T = float;
  using reg = __m512;
  using mask = __mmask16;
  static constexpr int W = 16;
  static constexpr int kRegs = 32;

  static mask first(int n) { return n >= W ? mask(0xffff) : mask((1u << n) - 1); }
  static reg zero() { return _mm512_setzero_ps(); }
  static reg set1(T v) { return _mm512_set1_ps(v); }
  static reg load(const T* p) { return _mm512_loadu_ps(p); }
  static reg load(const T* p, mask m) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(T* p, reg v) { _mm512_storeu_ps(p, v); }
  static void store(T* p, reg v, mask m) { _mm512_mask_storeu_ps(p, m, v); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg div(reg a, reg b) { return _mm512_div_ps(a, b); }
  // b where either is NaN (so max(c, x) and min(c, x) keep a NaN x).
  static reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
  static reg min(reg a, reg b) { return _mm512_min_ps(a, b); }
  static reg abs(reg a) { return _mm512_abs_ps(a); }
  static reg neg(reg a) { return _mm512_xor_ps(a, _mm512_set1_ps(-0.0f)); }
  static mask lt(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static mask isnan(reg a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
  static bool any(mask m) { return m != 0; }
  static reg select(mask m, reg if_true, reg if_false) { return _mm512_mask_blend_ps(m, if_false, if_true); }
  static reg round(reg a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // a * 2^n for integral n.
  static reg scale2(reg a, reg n) { return _mm512_scalef_ps(a, n); }
  static T sum(reg a) { return _mm512_reduce_add_ps(a); }

  // Narrow stores, rounding to nearest even like the scalar conversions in
  // tensor/dtype.h (bf16 NaNs become quiet NaNs).
  static void store_bf16(uint16_t* p, reg v, mask m) {
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    r = _mm512_mask_blend_epi32(isnan(v), r, q);
    _mm512_mask_storeu_epi16(p, m, _mm512_castsi256_si512(_mm512_cvtepi32_epi16(r)));
  }
  static void store_f16(uint16_t* p, reg v, mask m) {
    __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_mask_storeu_epi16(p, m, _mm512_castsi256_si512(h));
  }
  static reg load_bf16(const uint16_t* p, mask m) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static reg load_f16(const uint16_t* p, mask m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
};

struct F64 {
  using T = double;
  using reg = __m512d;
  using mask = __mmask8;
  static constexpr int W = 8;
  static constexpr int kRegs = 32;

  static mask first(int n) { return n >= W ? mask(0xff) : mask((1u << n) - 1); }
  static reg zero() { return _mm512_setzero_pd(); }
  static reg set1(T v) { return _mm512_set1_pd(v); }
  static reg load(const T* p) { return _mm512_loadu_pd(p); }
  static reg load(const T* p, mask m) { return _mm512_maskz_loadu_pd(m, p); }
  static void store(T* p, reg v) { _mm512_storeu_pd(p, v); }
  static void store(T* p, reg v, mask m) { _mm512_mask_storeu_pd(p, m, v); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_pd(a, b, c); }
  static reg add(reg a, reg b) { return _mm512_add_pd(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_pd(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_pd(a, b); }
  static reg div(reg a, reg b) { return _mm512_div_pd(a, b); }
  static reg max(reg a, reg b) { return _mm512_max_pd(a, b); }
  static reg min(reg a, reg b) { return _mm512_min_pd(a, b); }
  static reg abs(reg a) { return _mm512_abs_pd(a); }
  static reg neg(reg a) { return _mm512_xor_pd(a, _mm512_set1_pd(-0.0)); }
  static mask lt(reg a, reg b) { return _mm512_cmp_pd_mask(a, b, _CMP_LT_OQ); }
  static mask isnan(reg a) { return _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q); }
  static bool any(mask m) { return m != 0; }
  static reg select(mask m, reg if_true, reg if_false) { return _mm512_mask_blend_pd(m, if_false, if_true); }
  static reg round(reg a) { return _mm512_roundscale_pd(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static reg scale2(reg a, reg n) { return _mm512_scalef_pd(a, n); }
  static T sum(reg a) { return _mm512_reduce_add_pd(a); }
};

}  // namespace sinew::kernels::avx512
