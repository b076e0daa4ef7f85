// AVX-512 GEMV kernels. Each step decodes weights of NR rows into zmm
// registers and multiplies them into the M x NR accumulators, so the
// weights are read once for all rows of x. With one row of x (the decode)
// the decode instructions bound the time, with more the FMAs. Decoding per
// format:
//  - bf16: zero-extend and shift into the f32 high half;
//  - e5m2: it is the top byte of an f16, converted by vcvtph2ps;
//  - e4m3fn through f16: exponent and mantissa moved into f16 position (an
//    exponent bias off by 8, folded into the final scale) and vcvtph2ps, 32
//    at a time; the NaN code is patched in only when a step holds one. For
//    one row of x, a 64-code step without zero, subnormal or NaN codes
//    instead stays in its register: per 16 codes, shifts that move the
//    sign, exponent and mantissa of one code of each dword into f32
//    position and a ternlog that ORs 112 into the exponent (the same 2^-8
//    of the value), against x transposed to match (Fmt::lane_code).
//  - NVFP4 for one row of x: see nvfp4_block (4-byte lanes of 8 weights of
//    one block, vpsrld + vpermps per 16, the block scales once per 256), or
//    with VNNI nvfp4_q16_block (x in 16-bit fixed point, vpsrlw + vpermw
//    per 32 weights into vpdpwssd).
//  - NVFP4 for more rows: the 8 bytes of a block broadcast to every qword,
//    shifted so each dword's low nibble is one element (vpermps reads only
//    those 4 bits), looked up in a 16-entry f32 table and scaled by the
//    block's e4m3 scale. The shift yields the nibbles in the order (0, 8, 1,
//    9, ...), so x comes pre-permuted (GemvArgs::x_nibble_order).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/gemv_kernels.h"
#include "sinew/kernels/formats.h"

namespace sinew::kernels::gemv_detail {
namespace {

// Bytes ahead of the current position that each weight row is prefetched
// (measured best among 1, 2 and 4 KiB; without it NVFP4 runs at half speed).
constexpr int64_t kPrefetchBytes = 2048;

struct Tables {
  alignas(64) float e4m3[256];
  alignas(64) float e2m1[16];
  Tables() {
    for (int i = 0; i < 256; ++i) e4m3[i] = decode_e4m3fn(static_cast<uint8_t>(i));
    for (int i = 0; i < 16; ++i) e2m1[i] = decode_e2m1(static_cast<uint8_t>(i));
  }
};
const Tables& tables() {
  static const Tables t;
  return t;
}

// The masked (maskz) forms of the widening intrinsics stand in for the plain
// ones, whose GCC 12 definitions start from an "undefined" register and
// trip -Wmaybe-uninitialized once inlined.
constexpr __mmask16 kAll = 0xffff;

__mmask16 low_mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }
__mmask64 low_mask64(int64_t n) { return n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1; }

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
  static constexpr int kVec = 4;
  static constexpr int64_t kBytesPer16 = 16;
  static constexpr float kPost = 256.0f;  // both decodes give 2^-8 of the value
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
  // 32 codes through f16.
  static void load_32(const Ctx& c, const uint8_t* p, __m512& lo, __m512& hi) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m512i h = to_f16(_mm512_cvtepi8_epi16(b));
    lo = _mm512_maskz_cvtph_ps(kAll, _mm512_maskz_extracti64x4_epi64(0xf, h, 0));
    hi = _mm512_maskz_cvtph_ps(kAll, _mm512_maskz_extracti64x4_epi64(0xf, h, 1));
    const __mmask32 nan =
        _mm256_cmpeq_epi8_mask(_mm256_or_si256(b, _mm256_set1_epi8(static_cast<char>(0x80))), _mm256_set1_epi8(-1));
    if (nan) {
      lo = _mm512_mask_mov_ps(lo, static_cast<__mmask16>(nan), c.nan);
      hi = _mm512_mask_mov_ps(hi, static_cast<__mmask16>(nan >> 16), c.nan);
    }
  }
  // Whether the 64 codes in b may hold one with exponent 0 (zero,
  // subnormal) or NaN: after adding 1, NaN (0x7f, 0xff) wraps to 0x80 or
  // 0x00 and exponent 0 becomes 0x01-0x08 (or 0x81-0x88), so all have bits
  // 4-6 clear. So do 0x08-0x0e, exponent 1 (the smallest normals), which
  // take the f16 route too, as correct as the other. Two uops and a test
  // of the mask, against four and two mask uops for the exact test, which
  // cost a fifth of the time (measured).
  static bool special(__m512i b) {
    return _mm512_testn_epi8_mask(_mm512_add_epi8(b, _mm512_set1_epi8(1)), _mm512_set1_epi8(0x70)) != 0;
  }
  // Code J of every dword lane of 64 codes in a register, for one row of x
  // (x transposed to match: GemvArgs::x_transposed): shifted left so its
  // sign lands in bit 31, then arithmetically right by 4, which puts
  // exponent and mantissa in bits 20-26 (sign copies in 27-30); the
  // ternlog keeps sign, exponent and mantissa and sets bits 27-29, adding
  // 112 to the exponent (2^-8 of the value, as through f16). Right only for
  // exponents 1-15 short of NaN (see special). Shifts and the ternlog, with
  // no widening shuffle.
  template <int J>
  static __m512 lane_code(__m512i q) {
    const __m512i sign_high = J == 3 ? q : _mm512_maskz_slli_epi32(kAll, q, 24 - 8 * J);
    return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_maskz_srai_epi32(kAll, sign_high, 4),
                                                         _mm512_set1_epi32(static_cast<int>(0x87f00000u)),
                                                         _mm512_set1_epi32(0x38000000), 0xea));  // (a & b) | c
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

// Rows n0 + r * gap (r < NR) of y for all M rows of x.
template <WeightFormat F, int M, int NR>
inline void block(const GemvArgs& a, const typename Fmt<F>::Ctx& ctx, int64_t n0, int64_t gap) {
  using D = Fmt<F>;
  constexpr int64_t kSteps = 64 / D::kBytesPer16;  // 16-element steps per 64 weight bytes
  __m512 acc[M][NR];
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_setzero_ps();
  const uint8_t* w[NR];
  const uint8_t* s[NR];
  for (int r = 0; r < NR; ++r) {
    w[r] = a.w + (n0 + r * gap) * a.ldw;
    s[r] = a.block_scale ? a.block_scale + (n0 + r * gap) * a.ld_scale : nullptr;
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
      if constexpr (M == 1 && F == WeightFormat::kE4M3) {
        // Each row's 64 codes in one register, decoded there against the
        // transposed x; a step holding a special code takes the f16 route
        // against x as it is.
        __m512i q[NR];
        bool special[NR];
        for (int r = 0; r < NR; ++r) {
          q[r] = _mm512_loadu_si512(w[r] + k);
          special[r] = D::special(q[r]);
        }
        const float* xt = a.x_transposed + k;
        // Unrolled, or GCC keeps acc in memory across the branch.
#pragma GCC unroll 4
        for (int r = 0; r < NR; ++r) {
          if (!special[r]) {
            acc[0][r] = _mm512_fmadd_ps(D::template lane_code<0>(q[r]), _mm512_load_ps(xt), acc[0][r]);
            acc[0][r] = _mm512_fmadd_ps(D::template lane_code<1>(q[r]), _mm512_load_ps(xt + 16), acc[0][r]);
            acc[0][r] = _mm512_fmadd_ps(D::template lane_code<2>(q[r]), _mm512_load_ps(xt + 32), acc[0][r]);
            acc[0][r] = _mm512_fmadd_ps(D::template lane_code<3>(q[r]), _mm512_load_ps(xt + 48), acc[0][r]);
          } else {
            for (int h = 0; h < 2; ++h) {
              __m512 lo, hi;
              D::load_32(ctx, w[r] + k + 32 * h, lo, hi);
              acc[0][r] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x + k + 32 * h), acc[0][r]);
              acc[0][r] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + k + 32 * h + 16), acc[0][r]);
            }
          }
        }
      } else {
        // The FMAs bound more rows of x; 32 weights of each row at a time
        // through f16 keep the fewest registers live.
        for (int h = 0; h < D::kVec / 2; ++h) {
          __m512 lo[NR], hi[NR];
          for (int r = 0; r < NR; ++r) D::load_32(ctx, w[r] + k + 32 * h, lo[r], hi[r]);
          fma_step(lo, k + 32 * h);
          fma_step(hi, k + 32 * h + 16);
        }
      }
    }
  };
  const int64_t kfull = a.k / 16 * 16;
  int64_t k = 0;
  // Each row's prefetch runs on into the next row of its stream (see run).
  const int64_t row_bytes = a.k * D::kBytesPer16 / 16;
  for (; k + 16 * kSteps <= kfull; k += 16 * kSteps) {
    const int64_t ahead = k / 16 * D::kBytesPer16 + kPrefetchBytes;
    for (int r = 0; r < NR; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(ahead < row_bytes ? w[r] + ahead
                                                                   : w[r] + a.ldw + (ahead - row_bytes)),
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
    for (int r = 0; r < NR; ++r) a.y[i * a.ldy + n0 + r * gap] = sum(acc[i][r]) * D::kPost;
}

// Whether any of the n e4m3fn codes at s is NaN (0x7f or 0xff).
bool any_nan_code(const uint8_t* s, int64_t n) {
  const __m512i high = _mm512_set1_epi8(static_cast<char>(0x80)), ones = _mm512_set1_epi8(-1);
  for (int64_t i = 0; i < n; i += 64) {
    const __mmask64 in = low_mask64(n - i);
    if (_mm512_mask_cmpeq_epi8_mask(in, _mm512_or_si512(_mm512_maskz_loadu_epi8(in, s + i), high), ones)) return true;
  }
  return false;
}

// The NR weight rows of an NVFP4 pass (rows n0 + r * gap): their weights,
// block scale codes and accumulators, shared by both one-row kernels.
template <int NR>
struct Nvfp4Rows {
  const uint8_t* w[NR];
  const uint8_t* s[NR];
  __m512 acc[NR];
  int64_t row_bytes, blocks;

  [[gnu::always_inline]] Nvfp4Rows(const GemvArgs& a, int64_t n0, int64_t gap)
      : row_bytes(a.k / 2), blocks((a.k + 15) / 16) {
    for (int r = 0; r < NR; ++r) {
      w[r] = a.w + (n0 + r * gap) * a.ldw;
      s[r] = a.block_scale + (n0 + r * gap) * a.ld_scale;
      acc[r] = _mm512_setzero_ps();
    }
  }
  // Each row's prefetch runs on into the next row of its stream (see run).
  [[gnu::always_inline]] void prefetch(const GemvArgs& a, int64_t c) const {
    const int64_t ahead = c * 128 + kPrefetchBytes;
    for (int r = 0; r < NR; ++r) {
      const uint8_t* p = ahead < row_bytes ? w[r] + ahead : w[r] + a.ldw + (ahead - row_bytes);
      _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + 64), _MM_HINT_T0);
    }
  }
  // y, times `post`; a row with a NaN scale code is NaN, as its dequantized weights would be.
  void finish(const GemvArgs& a, int64_t n0, int64_t gap, float post) const {
    for (int r = 0; r < NR; ++r)
      a.y[n0 + r * gap] = any_nan_code(s[r], blocks) ? std::numeric_limits<float>::quiet_NaN() : sum(acc[r]) * post;
  }
};

// The 16 block scales of a step: e4m3 codes moved into f16 position (2^-8
// of their value) and widened.
[[gnu::always_inline]] inline __m512 nvfp4_scales(__m128i sb) {
  return _mm512_maskz_cvtph_ps(kAll, _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(sb), 7),
                                                      _mm256_set1_epi16(static_cast<short>(0xbfff))));
}

// Each of half h's 8 block scales over two dword lanes.
[[gnu::always_inline]] inline __m512i nvfp4_spread(int h) {
  return h == 0 ? _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0)
                : _mm512_set_epi32(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
}

// NVFP4 for one row of x (the decode), rows n0 + r * gap (r < NR). A step
// reads 128 bytes of a row, two 64-byte halves of 8 blocks; dword lane l of
// a half holds weights 8l..8l+7, all of block l/2, and vector j of the
// half's decoded weights their j-th (x comes transposed to match:
// GemvArgs::x_transposed). The 16 block scales of a step are e4m3 codes
// moved into f16 position (2^-8 of their value, as for e4m3 weights) and
// widened by vcvtph2ps, vpermps spreads each over its two lanes, and they
// multiply each half's 8 dot products at once. A NaN scale code is looked
// for once a row, after its loop, and makes the row NaN, as its dequantized
// weights would.
template <int NR>
void nvfp4_block(const GemvArgs& a, int64_t n0, int64_t gap) {
  const __m512 values = _mm512_load_ps(tables().e2m1);
  const __m512i spread[2] = {nvfp4_spread(0), nvfp4_spread(1)};
  Nvfp4Rows<NR> rows(a, n0, gap);
  const int64_t row_bytes = rows.row_bytes, blocks = rows.blocks;
  const uint8_t* const* w = rows.w;
  const uint8_t* const* s = rows.s;
  __m512* acc = rows.acc;
  // One step of row r: its weights q[h] and scale codes sb.
  auto step = [&](int64_t c, int r, const __m512i (&q)[2], __m128i sb) {
    const __m512 scales = nvfp4_scales(sb);
    for (int h = 0; h < 2; ++h) {
      const float* x = a.x_transposed + c * 256 + h * 128;
      __m512 d[8];
      for (int j = 0; j < 8; ++j)
        d[j] = _mm512_maskz_permutexvar_ps(kAll, _mm512_maskz_srli_epi32(kAll, q[h], 4 * j), values);
      __m512 t = _mm512_mul_ps(d[0], _mm512_loadu_ps(x));
      for (int j = 1; j < 8; ++j) t = _mm512_fmadd_ps(d[j], _mm512_loadu_ps(x + 16 * j), t);
      acc[r] = _mm512_fmadd_ps(t, _mm512_maskz_permutexvar_ps(kAll, spread[h], scales), acc[r]);
    }
  };
  const int64_t full = row_bytes / 128;
  int64_t c = 0;
  for (; c < full; ++c) {
    rows.prefetch(a, c);
    // Each row's weights are loaded just before its step, not all rows'
    // first: those 8 vectors next to x's 16 (kept for all rows) spilled,
    // which cost 5-15% (measured; the lines are prefetched by now anyway).
    for (int r = 0; r < NR; ++r) {
      const __m512i q[2] = {_mm512_loadu_si512(w[r] + c * 128), _mm512_loadu_si512(w[r] + c * 128 + 64)};
      step(c, r, q, _mm_loadu_si128(reinterpret_cast<const __m128i*>(s[r] + c * 16)));
    }
  }
  if (c * 128 < row_bytes) {  // zeros past the row: +0 weights with scale 0
    const int64_t rem = row_bytes - c * 128;
    for (int r = 0; r < NR; ++r) {
      const __m512i q[2] = {_mm512_maskz_loadu_epi8(low_mask64(rem), w[r] + c * 128),
                            _mm512_maskz_loadu_epi8(rem > 64 ? low_mask64(rem - 64) : 0, w[r] + c * 128 + 64)};
      step(c, r, q, _mm_maskz_loadu_epi8(low_mask(blocks - c * 16), s[r] + c * 16));
    }
  }
  rows.finish(a, n0, gap, 256.0f);
}

// NVFP4 for one row of x in 16-bit fixed point (GemvArgs::x_q16), on a CPU
// with AVX-512 VNNI. A step reads 128 bytes of a row as two 64-byte halves
// of 8 blocks. Word w of a half holds weights 4w..4w+3; shifted right by 4s
// its low 5 bits index a 32-entry table of twice the e2m1 values (the
// second 16 repeat the first, so the next nibble's low bit does not
// matter), and vpermw decodes 32 weights (4w + s) at once, against 3 uops
// per 16 on the f32 route. vpdpwssd multiplies them by x's int16 pairs and
// sums each pair into a dword lane: lane d gathers weights 8d..8d+7, all
// of block d/2, so each half's 16 lanes take the block scales spread over
// two lanes each (as nvfp4_block) times the chunk's x scale, converted to
// f32 once per step. 11008 x 4096 weights in L3: 40 against 32 G weights/s
// on one thread, 77 against 62 on two; from DRAM both read the same
// 16 GB/s.
[[gnu::target("avx512vnni"), gnu::always_inline]] inline __m512 nvfp4_q16_half(__m512i q, const int16_t* x,
                                                                              __m512i table) {
  __m512i acc = _mm512_madd_epi16(_mm512_permutexvar_epi16(q, table), _mm512_load_si512(x));
  acc = _mm512_dpwssd_epi32(acc, _mm512_permutexvar_epi16(_mm512_srli_epi16(q, 4), table), _mm512_load_si512(x + 32));
  acc = _mm512_dpwssd_epi32(acc, _mm512_permutexvar_epi16(_mm512_srli_epi16(q, 8), table), _mm512_load_si512(x + 64));
  acc = _mm512_dpwssd_epi32(acc, _mm512_permutexvar_epi16(_mm512_srli_epi16(q, 12), table), _mm512_load_si512(x + 96));
  return _mm512_maskz_cvtepi32_ps(kAll, acc);
}

// Twice the e2m1 values (code 8, -0, is 0), for 5-bit indices.
alignas(64) constexpr int16_t kTwiceE2m1[32] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
                                                0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

template <int NR>
[[gnu::target("avx512vnni")]] void nvfp4_q16_block(const GemvArgs& a, int64_t n0, int64_t gap) {
  const __m512i table = _mm512_load_si512(kTwiceE2m1);
  const __m512i spread[2] = {nvfp4_spread(0), nvfp4_spread(1)};
  Nvfp4Rows<NR> rows(a, n0, gap);
  const int64_t row_bytes = rows.row_bytes, blocks = rows.blocks;
  const uint8_t* const* w = rows.w;
  const uint8_t* const* s = rows.s;
  __m512* acc = rows.acc;
  const int64_t steps = (row_bytes + 127) / 128;
  for (int64_t c = 0; c < steps; ++c) {
    const bool full = (c + 1) * 128 <= row_bytes;
    rows.prefetch(a, c);
    const __m512 xs = _mm512_set1_ps(a.x_q16_scale[c]);
    const int16_t* x = a.x_q16 + c * 256;
    const int64_t rem = row_bytes - c * 128;  // past the row: weight code 0 (+0) with scale code 0
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      __m512i q0, q1;
      __m128i sb;
      if (full) {
        q0 = _mm512_loadu_si512(w[r] + c * 128);
        q1 = _mm512_loadu_si512(w[r] + c * 128 + 64);
        sb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s[r] + c * 16));
      } else {
        q0 = _mm512_maskz_loadu_epi8(low_mask64(rem), w[r] + c * 128);
        q1 = _mm512_maskz_loadu_epi8(rem > 64 ? low_mask64(rem - 64) : 0, w[r] + c * 128 + 64);
        sb = _mm_maskz_loadu_epi8(low_mask(blocks - c * 16), s[r] + c * 16);
      }
      const __m512 scales = _mm512_mul_ps(nvfp4_scales(sb), xs);
      acc[r] = _mm512_fmadd_ps(nvfp4_q16_half(q0, x, table), _mm512_maskz_permutexvar_ps(kAll, spread[0], scales),
                               acc[r]);
      acc[r] = _mm512_fmadd_ps(nvfp4_q16_half(q1, x + 128, table),
                               _mm512_maskz_permutexvar_ps(kAll, spread[1], scales), acc[r]);
    }
  }
  // Twice the e2m1 values, scale codes at 2^-8 of their value: 256 / 2.
  rows.finish(a, n0, gap, 128.0f);
}

// As many weight rows at once as keep M * NR accumulators within 16 registers.
template <int M>
constexpr int kRowsAtOnce = std::clamp(16 / M, 1, 4);

// The NR rows a block reads at once come from NR equal parts of [n0, n1),
// so that each part is one sequential stream through memory: NR adjacent
// short rows (NVFP4 rows of 4096 weights are 2 KiB) interleave within a
// few pages, and streamed so, read about a quarter slower from DRAM.
template <WeightFormat F, int M>
void run(const GemvArgs& a, int64_t n0, int64_t n1) {
  constexpr int NR = kRowsAtOnce<M>;
  const int64_t part = (n1 - n0) / NR, rest = n0 + NR * part;
  if constexpr (F == WeightFormat::kNVFP4 && M == 1) {
    if (a.x_q16) {
      for (int64_t n = n0; n < n0 + part; ++n) nvfp4_q16_block<NR>(a, n, part);
      for (int64_t n = rest; n < n1; ++n) nvfp4_q16_block<1>(a, n, 0);
      return;
    }
    for (int64_t n = n0; n < n0 + part; ++n) nvfp4_block<NR>(a, n, part);
    for (int64_t n = rest; n < n1; ++n) nvfp4_block<1>(a, n, 0);
  } else {
    const typename Fmt<F>::Ctx ctx;
    for (int64_t n = n0; n < n0 + part; ++n) block<F, M, NR>(a, ctx, n, part);
    for (int64_t n = rest; n < n1; ++n) block<F, M, 1>(a, ctx, n, 0);
  }
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

bool nvfp4_quantize_x(const float* x, int64_t k, int16_t* xq, float* xs) {
  // Output word 32s + 2d + t of a half from its element 8d + 4t + s, read
  // from the half's 128 words in two registers (vpermt2w: 7-bit indices).
  alignas(64) int16_t order[4][32];
  for (int sh = 0; sh < 4; ++sh)
    for (int d = 0; d < 16; ++d)
      for (int t = 0; t < 2; ++t) order[sh][2 * d + t] = static_cast<int16_t>(8 * d + 4 * t + sh);
  const int64_t chunks = (k + kKStep - 1) / kKStep;
  for (int64_t c = 0; c < chunks; ++c) {
    __m512 v[16];
    __m512 amax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int i = 0; i < 16; ++i) {
      const int64_t at = c * kKStep + 16 * i;
      v[i] = _mm512_maskz_loadu_ps(at >= k ? 0 : low_mask(std::min<int64_t>(16, k - at)), x + at);
      bad |= _mm512_fpclass_ps_mask(v[i], 0x99);  // NaN or infinity
      amax = _mm512_maskz_max_ps(kAll, amax, _mm512_abs_ps(v[i]));
    }
    if (bad) return false;
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, amax);
    const float m = *std::max_element(lanes, lanes + 16);
    int16_t* out = xq + c * kKStep;
    if (m == 0.0f) {
      std::memset(out, 0, kKStep * sizeof(int16_t));
      xs[c] = 0.0f;
      continue;
    }
    int ex;
    std::frexp(m, &ex);  // m < 2^ex, so |x| * 2^(15 - ex) < 2^15
    if (ex < -111) return false;  // 2^(15 - ex) would not be a float
    const __m512 up = _mm512_set1_ps(std::ldexp(1.0f, 15 - ex));
    xs[c] = std::ldexp(1.0f, ex - 15);
    for (int h = 0; h < 2; ++h) {
      alignas(64) int16_t words[128];
      for (int i = 0; i < 8; ++i)  // round to nearest even; a value that rounds to 2^15 saturates
        _mm256_store_si256(reinterpret_cast<__m256i*>(words + 16 * i),
                           _mm512_maskz_cvtsepi32_epi16(kAll, _mm512_maskz_cvtps_epi32(kAll, _mm512_mul_ps(v[8 * h + i], up))));
      const __m512i w01 = _mm512_load_si512(words), w23 = _mm512_load_si512(words + 32);
      const __m512i w45 = _mm512_load_si512(words + 64), w67 = _mm512_load_si512(words + 96);
      for (int sh = 0; sh < 4; ++sh) {
        // vpermt2w reads 6 index bits: elements 0..63 from w01:w23, 64..127 from w45:w67.
        const __m512i idx = _mm512_load_si512(order[sh]);
        const __m512i from_low = _mm512_permutex2var_epi16(w01, idx, w23);
        const __m512i from_high = _mm512_permutex2var_epi16(w45, idx, w67);
        const __mmask32 high = _mm512_cmpge_epi16_mask(idx, _mm512_set1_epi16(64));
        _mm512_store_si512(out + h * 128 + 32 * sh, _mm512_mask_mov_epi16(from_low, high, from_high));
      }
    }
  }
  return true;
}

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
