#include "sinew/kernels/formats.h"

#include <array>
#include <bit>
#include <limits>

namespace sinew::kernels {
namespace {

using detail::f32_bits;
using detail::f32_from_bits;

// Value of a small float with the given field widths, computed from the
// definition (used to build the decode tables at compile time).
constexpr float small_float_value(uint32_t v, int ebits, int mbits, int bias) {
  const uint32_t man = v & ((1u << mbits) - 1);
  const uint32_t exp = (v >> mbits) & ((1u << ebits) - 1);
  const bool neg = (v >> (ebits + mbits)) & 1;
  // 2^(e - mbits) * (implicit + man), exact in f32 for these widths.
  const int e = exp == 0 ? 1 - bias : static_cast<int>(exp) - bias;
  const float sig = static_cast<float>(exp == 0 ? man : (1u << mbits) | man);
  float p = 1.0f;
  for (int i = 0; i < (e - mbits > 0 ? e - mbits : mbits - e); ++i) p *= 2.0f;
  const float mag = e - mbits >= 0 ? sig * p : sig / p;
  return neg ? -mag : mag;
}

constexpr std::array<float, 256> make_e4m3fn_table() {
  std::array<float, 256> t{};
  for (uint32_t v = 0; v < 256; ++v)
    t[v] = (v & 0x7f) == 0x7f ? std::numeric_limits<float>::quiet_NaN() : small_float_value(v, 4, 3, 7);
  return t;
}

constexpr std::array<float, 256> make_e5m2_table() {
  std::array<float, 256> t{};
  for (uint32_t v = 0; v < 256; ++v) {
    const uint32_t mag = v & 0x7f;
    if (mag == 0x7c) t[v] = (v & 0x80) ? -std::numeric_limits<float>::infinity()
                                       : std::numeric_limits<float>::infinity();
    else if (mag > 0x7c) t[v] = std::numeric_limits<float>::quiet_NaN();
    else t[v] = small_float_value(v, 5, 2, 15);
  }
  return t;
}

constexpr std::array<float, 16> make_e2m1_table() {
  std::array<float, 16> t{};
  for (uint32_t v = 0; v < 16; ++v) t[v] = small_float_value(v, 2, 1, 1);
  return t;
}

constexpr auto kE4M3Table = make_e4m3fn_table();
constexpr auto kE5M2Table = make_e5m2_table();
constexpr auto kE2M1Table = make_e2m1_table();

// Magnitude code of a finite non-negative float (bits u) in a format with
// kMbits mantissa bits and exponent bias kBias, rounded to nearest even. The
// code may lie past the format's largest finite value; callers clamp.
template <int kMbits, int kBias>
uint32_t round_magnitude(uint32_t u) {
  constexpr int kMinExp = 1 - kBias;  // exponent of the smallest normal
  constexpr uint32_t kMinNormal = static_cast<uint32_t>(kMinExp + 127) << 23;
  if (u < kMinNormal) {
    // Adding 2^(kMinExp - kMbits + 23) makes the f32 adder round at the
    // format's subnormal quantum; the low bits are then the code (a carry
    // into the smallest normal comes out right too).
    constexpr uint32_t kMagic = static_cast<uint32_t>(kMinExp - kMbits + 23 + 127) << 23;
    return f32_bits(f32_from_bits(u) + f32_from_bits(kMagic)) - kMagic;
  }
  constexpr int kShift = 23 - kMbits;
  const uint32_t odd = (u >> kShift) & 1u;
  u += (1u << (kShift - 1)) - 1u + odd;
  return (u >> kShift) - (static_cast<uint32_t>(127 - kBias) << kMbits);
}

}  // namespace

float decode_e4m3fn(uint8_t v) { return kE4M3Table[v]; }

uint8_t encode_e4m3fn(float f, Overflow overflow) {
  uint32_t u = f32_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  u &= 0x7fffffffu;
  const bool sat = overflow == Overflow::kSaturate;
  if (u > 0x7f800000u) return sign | 0x7f;
  if (u == 0x7f800000u) return sign | (sat ? 0x7e : 0x7f);
  const uint32_t c = round_magnitude<3, 7>(u);
  if (c > 0x7e) return sign | (sat ? 0x7e : 0x7f);  // 0x7f would be NaN
  return static_cast<uint8_t>(sign | c);
}

float decode_e5m2(uint8_t v) { return kE5M2Table[v]; }

uint8_t encode_e5m2(float f, Overflow overflow) {
  uint32_t u = f32_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  u &= 0x7fffffffu;
  const bool sat = overflow == Overflow::kSaturate;
  if (u > 0x7f800000u) return sign | 0x7f;
  if (u == 0x7f800000u) return sign | (sat ? 0x7b : 0x7c);
  const uint32_t c = round_magnitude<2, 15>(u);
  if (c > 0x7b) return sign | (sat ? 0x7b : 0x7c);
  return static_cast<uint8_t>(sign | c);
}

float decode_e2m1(uint8_t nibble) { return kE2M1Table[nibble & 0xf]; }

uint8_t encode_e2m1(float f) {
  uint32_t u = f32_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 28) & 0x8u);
  u &= 0x7fffffffu;
  if (u >= 0x7f800000u) return sign | 0x7;
  const uint32_t c = round_magnitude<1, 1>(u);
  return static_cast<uint8_t>(sign | (c > 0x7 ? 0x7 : c));
}

float decode_e8m0(uint8_t v) {
  if (v == kE8M0NaN) return std::numeric_limits<float>::quiet_NaN();
  // 2^-127 is an f32 subnormal: build it from its mantissa bit.
  return v == 0 ? f32_from_bits(0x00400000u) : f32_from_bits(static_cast<uint32_t>(v) << 23);
}

uint8_t encode_e8m0(float f) {
  const uint32_t u = f32_bits(f);
  uint32_t exp = (u >> 23) & 0xffu;
  if (exp == 0xff) return kE8M0NaN;
  // Round on the mantissa: its top bit (guard) says >= 1.5 * 2^e, a tie
  // rounding up for normal inputs (the implicit bit is the kept LSB).
  const bool guard = u & 0x400000u;
  const bool rest = u & 0x3fffffu;
  const bool lsb = exp > 0;
  if (guard && (rest || lsb) && exp < 0xfe) ++exp;
  return static_cast<uint8_t>(exp);
}

}  // namespace sinew::kernels
