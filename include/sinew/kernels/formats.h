// Narrow float storage formats of the low-precision GEMMs, held in uint8
// (DType::kU8) views or the fp8 dtypes: e4m3fn and e5m2 (OCP FP8), e2m1
// (OCP MX FP4, two per byte as PyTorch's float4_e2m1fn_x2: element 2i in the
// low nibble) and e8m0 (OCP MX scale, PyTorch's float8_e8m0fnu).
//
// Encoders round to nearest, ties to even. Overflow follows the format:
// e4m3fn and e5m2 can either behave as PyTorch's .to() cast (e4m3fn: NaN;
// e5m2: inf) or saturate to the largest finite value (OCP "saturation
// mode", what quantizers use after their clamp). e2m1 has no inf or NaN and
// always saturates to ±6. These are the bit-exact scalar conversions; the
// quantize and GEMV kernels use vectorised equivalents.
#pragma once

#include <cstdint>
#include <cstring>

namespace sinew::kernels {

inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE5M2Max = 57344.0f;
inline constexpr float kE2M1Max = 6.0f;
// Exponent of the largest power of two each element format holds (emax in
// the OCP MX spec): block scales put a block's amax at this binade.
inline constexpr int kE4M3Emax = 8;
inline constexpr int kE5M2Emax = 15;
inline constexpr int kE2M1Emax = 2;
inline constexpr uint8_t kE8M0NaN = 0xFF;
inline constexpr int kE8M0Bias = 127;

enum class Overflow : uint8_t {
  kSaturate,  // clamp to ±max finite (infinities too); NaN stays NaN
  kCast,      // PyTorch's cast: e4m3fn -> NaN, e5m2 -> inf
};

// --- e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; no inf; S.1111.111 is NaN
float decode_e4m3fn(uint8_t v);
uint8_t encode_e4m3fn(float f, Overflow overflow = Overflow::kSaturate);

// --- e5m2: 1 sign, 5 exponent (bias 15), 2 mantissa; IEEE-like inf and NaN
float decode_e5m2(uint8_t v);
uint8_t encode_e5m2(float f, Overflow overflow = Overflow::kSaturate);

// --- e2m1: 1 sign, 2 exponent (bias 1), 1 mantissa; ±{0, .5, 1, 1.5, 2, 3, 4, 6}.
// Works on the low 4 bits. NaN has no encoding: it saturates like inf (the
// quantizers carry a NaN block in its scale instead).
float decode_e2m1(uint8_t nibble);
uint8_t encode_e2m1(float f);
// Element i of a packed e2m1 row (low nibble first).
inline float e2m1_at(const uint8_t* packed, int64_t i) {
  return decode_e2m1(static_cast<uint8_t>(packed[i >> 1] >> ((i & 1) * 4)));
}

// --- e8m0: 8 exponent bits (bias 127), value 2^(v-127), 0xFF is NaN.
float decode_e8m0(uint8_t v);
// PyTorch's float8_e8m0fnu cast: rounds the f32 significand to an integer
// (1.5 * 2^e and above go up, ties to even counting the implicit bit, so
// f32 subnormals round as 0.m * 2^-126), clamped to [2^-127, 2^127]; the sign
// is ignored; NaN and inf give 0xFF.
uint8_t encode_e8m0(float f);

namespace detail {
inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

}  // namespace sinew::kernels
