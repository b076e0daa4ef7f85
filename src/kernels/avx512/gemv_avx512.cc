// AVX-512 GEMV kernels. Each step decodes weights of NR rows into zmm
// registers and multiplies them into the M x NR accumulators, so the
// weights are read once for all rows of x. Decoding per format:
//  - bf16: zero-extend and shift into the f32 high half;
//  - e5m2: it is the top byte of an f16, converted by vcvtph2ps;
//  - e4m3fn: sign, exponent and mantissa moved into f16 position (an
//    exponent bias off by 8, folded into the final scale) and vcvtph2ps, 32
//    at a time; the NaN code is patched in only when a step holds one;
//  - NVFP4: the 8 bytes of a block broadcast to every qword,
//    shifted so each dword's low nibble is one element (vpermps reads only
//    those 4 bits), looked up in a 16-entry f32 table and scaled by the
//    block's e4m3 scale. The shift yields the nibbles in the order (0, 8, 1,
//    9, ...), so x comes pre-permuted (GemvArgs::x_nibble_order).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/gemv_kernels.h"
#include "sinew/kernels/formats.h"

namespace sinew::kernels::gemv_detail {
namespace {

// Bytes ahead of the current position that each weight row is prefetched
// (measured best among 1, 2 and 4 KiB; without it NVFP4 runs at half speed).
constexpr int64_t kPrefetchBytes = 1024;

struct ScaleTable {
  alignas(64) float e4m3[256];
  alignas(64) float e2m1[16];
  ScaleTable() {
    for (int i = 0; i < 256; ++i) e4m3[i] = decode_e4m3fn(static_cast<uint8_t>(i));
    for (int i = 0; i < 16; ++i) e2m1[i] = decode_e2m1(static_cast<uint8_t>(i));
  }
};
const ScaleTable& tables() {
  static const ScaleTable t;
  return t;
}

// The masked (maskz) forms of the widening intrinsics stand in for the plain
// ones, whose GCC 12 definitions start from an "undefined" register and
// trip -Wmaybe-uninitialized once inlined.
constexpr __mmask16 kAll = 0xffff;

__mmask16 low_mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

float sum(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_maskz_extractf32x8_ps(0xff, v, 0), _mm512_maskz_extractf32x8_ps(0xff, v, 1));
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

template <WeightFormat F>
struct Fmt;

template <>
struct Fmt<WeightFormat::kF32> {
  static constexpr int kVec = 1;  // 16-element vectors decoded per main-loop step
  static constexpr int64_t kBytesPer16 = 64;
  static constexpr float kPost = 1.0f;
  struct Ctx {};
  static __m512 load(const Ctx&, const uint8_t* w, const uint8_t*, int64_t k) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(w) + k);
  }
  static __m512 load_tail(const Ctx&, const uint8_t* w, const uint8_t*, int64_t k, int64_t rem) {
    return _mm512_maskz_loadu_ps(low_mask(rem), reinterpret_cast<const float*>(w) + k);
  }
};

template <>
struct Fmt<WeightFormat::kBF16> {
  static constexpr int kVec = 1;
  static constexpr int64_t kBytesPer16 = 32;
  static constexpr float kPost = 1.0f;
  struct Ctx {};
  static __m512 widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, h), 16));
  }
  static __m512 load(const Ctx&, const uint8_t* w, const uint8_t*, int64_t k) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2 * k)));
  }
  static __m512 load_tail(const Ctx&, const uint8_t* w, const uint8_t*, int64_t k, int64_t rem) {
    return widen(_mm256_maskz_loadu_epi16(low_mask(rem), w + 2 * k));
  }
};

template <>
struct Fmt<WeightFormat::kE5M2> {
  static constexpr int kVec = 1;
  static constexpr int64_t kBytesPer16 = 16;
  static constexpr float kPost = 1.0f;
  struct Ctx {};
  static __m512 widen(__m128i b) {
    return _mm512_maskz_cvtph_ps(kAll, _mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8));
  }
  static __m512 load(const Ctx&, const uint8_t* w, const uint8_t*, int64_t k) {
    return widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + k)));
  }
  static __m512 load_tail(const Ctx&, const uint8_t* w, const uint8_t*, int64_t k, int64_t rem) {
    return widen(_mm_maskz_loadu_epi8(low_mask(rem), w + k));
  }
};

template <>
struct Fmt<WeightFormat::kE4M3> {
  static constexpr int kVec = 2;
  static constexpr int64_t kBytesPer16 = 16;
  static constexpr float kPost = 256.0f;  // the f16 exponent bias is 8 above e4m3fn's
  struct Ctx {
    __m512 nan = _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN());
  };
  // Sign-extended and shifted by 7, a byte's sign lands in bit 15 and a copy
  // in bit 14, which the mask clears; exponent and mantissa fill bits 7-13.
  static __m256i to_f16(__m256i sign_extended) {
    return _mm256_and_si256(_mm256_slli_epi16(sign_extended, 7), _mm256_set1_epi16(static_cast<short>(0xbfff)));
  }
  static __m512i to_f16(__m512i sign_extended) {
    return _mm512_and_si512(_mm512_slli_epi16(sign_extended, 7), _mm512_set1_epi16(static_cast<short>(0xbfff)));
  }
  // Lanes holding 0x7f or 0xff.
  static __mmask16 nans(__m128i b) {
    return _mm_cmpeq_epi8_mask(_mm_or_si128(b, _mm_set1_epi8(static_cast<char>(0x80))), _mm_set1_epi8(-1));
  }
  static __m512 widen(const Ctx& c, __m128i b) {
    const __m512 v = _mm512_maskz_cvtph_ps(kAll, to_f16(_mm256_cvtepi8_epi16(b)));
    const __mmask16 nan = nans(b);
    return nan ? _mm512_mask_mov_ps(v, nan, c.nan) : v;
  }
  static __m512 load(const Ctx& c, const uint8_t* w, const uint8_t*, int64_t k) {
    return widen(c, _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + k)));
  }
  static __m512 load_tail(const Ctx& c, const uint8_t* w, const uint8_t*, int64_t k, int64_t rem) {
    return widen(c, _mm_maskz_loadu_epi8(low_mask(rem), w + k));
  }
  static void load_n(const Ctx& c, const uint8_t* w, const uint8_t*, int64_t k, __m512 (&out)[kVec]) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k));
    const __m512i h = to_f16(_mm512_cvtepi8_epi16(b));
    out[0] = _mm512_maskz_cvtph_ps(kAll, _mm512_maskz_extracti64x4_epi64(0xf, h, 0));
    out[1] = _mm512_maskz_cvtph_ps(kAll, _mm512_maskz_extracti64x4_epi64(0xf, h, 1));
    const __mmask32 nan =
        _mm256_cmpeq_epi8_mask(_mm256_or_si256(b, _mm256_set1_epi8(static_cast<char>(0x80))), _mm256_set1_epi8(-1));
    if (nan) {
      out[0] = _mm512_mask_mov_ps(out[0], static_cast<__mmask16>(nan), c.nan);
      out[1] = _mm512_mask_mov_ps(out[1], static_cast<__mmask16>(nan >> 16), c.nan);
    }
  }
};

template <>
struct Fmt<WeightFormat::kNVFP4> {
  static constexpr int kVec = 1;
  static constexpr int64_t kBytesPer16 = 8;
  static constexpr float kPost = 1.0f;
  struct Ctx {
    __m512 values = _mm512_load_ps(tables().e2m1);
    __m512i shifts = _mm512_set_epi64(28, 24, 20, 16, 12, 8, 4, 0);
    const float* scales = tables().e4m3;
  };
  static __m512 decode(const Ctx& c, __m512i q, const uint8_t* s, int64_t k) {
    const __m512 v = _mm512_maskz_permutexvar_ps(kAll, _mm512_maskz_srlv_epi64(0xff, q, c.shifts), c.values);
    return _mm512_mul_ps(v, _mm512_set1_ps(c.scales[s[k / 16]]));
  }
  static __m512 load(const Ctx& c, const uint8_t* w, const uint8_t* s, int64_t k) {
    long long q;
    std::memcpy(&q, w + k / 2, 8);
    return decode(c, _mm512_set1_epi64(q), s, k);
  }
  static __m512 load_tail(const Ctx& c, const uint8_t* w, const uint8_t* s, int64_t k, int64_t rem) {
    return decode(c, _mm512_maskz_broadcastq_epi64(0xff, _mm_maskz_loadu_epi8(low_mask(rem / 2), w + k / 2)), s, k);
  }
};

// Rows [n0, n0 + NR) of y for all M rows of x.
template <WeightFormat F, int M, int NR>
inline void block(const GemvArgs& a, const typename Fmt<F>::Ctx& ctx, int64_t n0) {
  using D = Fmt<F>;
  constexpr int64_t kSteps = 64 / D::kBytesPer16;  // 16-element steps per 64 weight bytes
  __m512 acc[M][NR];
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_setzero_ps();
  const uint8_t* w[NR];
  const uint8_t* s[NR];
  for (int r = 0; r < NR; ++r) {
    w[r] = a.w + (n0 + r) * a.ldw;
    s[r] = a.block_scale ? a.block_scale + (n0 + r) * a.ld_scale : nullptr;
  }
  const float* x = F == WeightFormat::kNVFP4 ? a.x_nibble_order : a.x;
  auto fma_step = [&](const __m512 (&wv)[NR], int64_t k) {
    for (int i = 0; i < M; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * a.ldx + k);
      for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_fmadd_ps(wv[r], xv, acc[i][r]);
    }
  };
  auto step = [&](int64_t k) {
    __m512 wv[NR];
    for (int r = 0; r < NR; ++r) wv[r] = D::load(ctx, w[r], s[r], k);
    fma_step(wv, k);
  };
  auto wide_step = [&](int64_t k) {
    if constexpr (D::kVec == 1) {
      step(k);
    } else {
      __m512 wv[NR][D::kVec];
      for (int r = 0; r < NR; ++r) D::load_n(ctx, w[r], s[r], k, wv[r]);
      for (int v = 0; v < D::kVec; ++v) {
        __m512 one[NR];
        for (int r = 0; r < NR; ++r) one[r] = wv[r][v];
        fma_step(one, k + 16 * v);
      }
    }
  };
  const int64_t kfull = a.k / 16 * 16;
  int64_t k = 0;
  // Each row's prefetch runs on into the same row of the next block, so
  // short rows (2 KiB of NVFP4) stream as well as long ones.
  const int64_t row_bytes = a.k * D::kBytesPer16 / 16;
  for (; k + 16 * kSteps <= kfull; k += 16 * kSteps) {
    const int64_t ahead = k / 16 * D::kBytesPer16 + kPrefetchBytes;
    for (int r = 0; r < NR; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(ahead < row_bytes ? w[r] + ahead
                                                                   : w[r] + NR * a.ldw + (ahead - row_bytes)),
                   _MM_HINT_T0);
    for (int64_t u = 0; u < kSteps; u += D::kVec) wide_step(k + 16 * u);
  }
  for (; k < kfull; k += 16) step(k);
  if (k < a.k) {
    __m512 wv[NR];
    for (int r = 0; r < NR; ++r) wv[r] = D::load_tail(ctx, w[r], s[r], k, a.k - k);
    fma_step(wv, k);
  }
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < NR; ++r) a.y[i * a.ldy + n0 + r] = sum(acc[i][r]) * D::kPost;
}

// As many weight rows at once as keep M * NR accumulators within 16 registers.
template <int M>
constexpr int kRowsAtOnce = std::clamp(16 / M, 1, 4);

template <WeightFormat F, int M>
void run(const GemvArgs& a, int64_t n0, int64_t n1) {
  constexpr int NR = kRowsAtOnce<M>;
  const typename Fmt<F>::Ctx ctx;
  int64_t n = n0;
  for (; n + NR <= n1; n += NR) block<F, M, NR>(a, ctx, n);
  for (; n < n1; ++n) block<F, M, 1>(a, ctx, n);
}

template <int M>
GemvKernel kernel_for(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32: return run<WeightFormat::kF32, M>;
    case WeightFormat::kBF16: return run<WeightFormat::kBF16, M>;
    case WeightFormat::kE4M3: return run<WeightFormat::kE4M3, M>;
    case WeightFormat::kE5M2: return run<WeightFormat::kE5M2, M>;
    case WeightFormat::kNVFP4: return run<WeightFormat::kNVFP4, M>;
  }
  return nullptr;
}

}  // namespace

GemvKernel gemv_avx512_kernel(WeightFormat format, int m) {
  switch (m) {
    case 1: return kernel_for<1>(format);
    case 2: return kernel_for<2>(format);
    case 3: return kernel_for<3>(format);
    case 4: return kernel_for<4>(format);
    case 5: return kernel_for<5>(format);
    case 6: return kernel_for<6>(format);
    case 7: return kernel_for<7>(format);
    case 8: return kernel_for<8>(format);
    default: return nullptr;
  }
}

}  // namespace sinew::kernels::gemv_detail
