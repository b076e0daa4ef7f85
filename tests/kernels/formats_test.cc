// Encode/decode tables of e4m3fn, e5m2, e2m1 and e8m0 against the formats'
// definitions (OCP FP8 / MX specs, PyTorch's casts): every code decoded, and
// the encoders checked on a dense sweep of f32 bit patterns against a
// reference that rounds by searching the value table.
#include "sinew/kernels/formats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "sinew/tensor/dtype.h"

namespace sinew::kernels {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A value of a sign/exponent/mantissa format straight from its definition.
double definition(uint32_t code, int ebits, int mbits, int bias) {
  const uint32_t man = code & ((1u << mbits) - 1);
  const uint32_t exp = (code >> mbits) & ((1u << ebits) - 1);
  const double sign = (code >> (ebits + mbits)) & 1 ? -1.0 : 1.0;
  if (exp == 0) return sign * std::ldexp(static_cast<double>(man) / (1 << mbits), 1 - bias);
  return sign * std::ldexp(1.0 + static_cast<double>(man) / (1 << mbits), static_cast<int>(exp) - bias);
}

void expect_same(float got, double want, uint32_t code) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << "code 0x" << std::hex << code;
  } else {
    EXPECT_EQ(got, static_cast<float>(want)) << "code 0x" << std::hex << code;
    EXPECT_EQ(std::signbit(got), std::signbit(want)) << "code 0x" << std::hex << code;
  }
}

// Reference round-to-nearest-even over a format's finite non-negative codes
// (magnitudes ascending, consecutive codes). `beyond` is the magnitude code
// just past the largest finite one and its value: rounding there means
// overflow. Returns the magnitude code, possibly `beyond`.
struct Ladder {
  std::vector<std::pair<double, uint32_t>> steps;  // (value, code), ascending, plus the overflow step
  uint32_t round(double a) const {
    const size_t hi = static_cast<size_t>(
        std::lower_bound(steps.begin(), steps.end(), a, [](const auto& s, double v) { return s.first < v; }) -
        steps.begin());
    if (hi == steps.size()) return steps.back().second;
    if (hi == 0 || steps[hi].first == a) return steps[hi].second;
    const auto& lo = steps[hi - 1];
    const auto& up = steps[hi];
    const double dl = a - lo.first, du = up.first - a;
    if (dl < du) return lo.second;
    if (du < dl) return up.second;
    return (lo.second & 1) == 0 ? lo.second : up.second;
  }
};

Ladder ladder(int ebits, int mbits, int bias, uint32_t max_code) {
  Ladder l;
  for (uint32_t c = 0; c <= max_code; ++c) l.steps.push_back({definition(c, ebits, mbits, bias), c});
  // The next code's value as if the format went on: rounding to it overflows.
  l.steps.push_back({definition(max_code + 1, ebits, mbits, bias), max_code + 1});
  return l;
}

// f32 bit patterns: every one with the low 12 bits clear, both signs, plus
// the midpoints and their neighbours of the format's values.
std::vector<float> sweep(const Ladder& l) {
  std::vector<float> v;
  for (uint64_t u = 0; u < (1ull << 32); u += 1u << 12) v.push_back(from_bits(static_cast<uint32_t>(u)));
  for (size_t i = 0; i + 1 < l.steps.size(); ++i) {
    const float mid = static_cast<float>((l.steps[i].first + l.steps[i + 1].first) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      v.push_back(f);
      v.push_back(-f);
    }
  }
  return v;
}

// The saturating and the casting 8-bit codes of f by the ladder of a
// format whose largest finite magnitude code is max_code: saturation stops
// there, a cast goes on to the next code; NaN is 0x7f either way.
std::pair<uint8_t, uint8_t> expected_codes(const Ladder& l, float f, uint32_t max_code) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const uint8_t nan = sign | 0x7f;
  if (std::isnan(f)) return {nan, nan};
  const uint32_t c = l.round(std::fabs(static_cast<double>(f)));
  return {static_cast<uint8_t>(sign | std::min<uint32_t>(c, max_code)), static_cast<uint8_t>(sign | c)};
}

TEST(Formats, E4M3FNDecodesEveryCodeByDefinition) {
  for (uint32_t c = 0; c < 256; ++c) {
    const double want = (c & 0x7f) == 0x7f ? std::nan("") : definition(c, 4, 3, 7);
    expect_same(decode_e4m3fn(static_cast<uint8_t>(c)), want, c);
    expect_same(e4m3fn_to_f32(static_cast<uint8_t>(c)), want, c);  // dtype.h agrees
  }
  EXPECT_EQ(decode_e4m3fn(0x7e), 448.0f);
  EXPECT_EQ(decode_e4m3fn(0x01), std::ldexp(1.0f, -9));
}

TEST(Formats, E4M3FNEncodesToNearestEvenSaturatingOrAsPyTorchCasts) {
  const Ladder l = ladder(4, 3, 7, 0x7e);
  for (float f : sweep(l)) {
    const auto [sat, cast] = expected_codes(l, f, 0x7e);  // one past 0x7e is the NaN code
    ASSERT_EQ(encode_e4m3fn(f, Overflow::kSaturate), sat) << f;
    ASSERT_EQ(encode_e4m3fn(f, Overflow::kCast), cast) << f;
    if (!std::isnan(f)) ASSERT_EQ(f32_to_e4m3fn(f), sat) << f;  // dtype.h's saturating cast agrees
  }
  EXPECT_EQ(encode_e4m3fn(464.0f, Overflow::kCast), 0x7e);  // tie to the even 448
  EXPECT_EQ(encode_e4m3fn(465.0f, Overflow::kCast), 0x7f);  // PyTorch: NaN
  EXPECT_EQ(encode_e4m3fn(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(encode_e4m3fn(std::numeric_limits<float>::infinity(), Overflow::kCast), 0x7f);
}

TEST(Formats, E5M2DecodesEveryCodeByDefinition) {
  for (uint32_t c = 0; c < 256; ++c) {
    const uint32_t mag = c & 0x7f;
    double want = definition(c, 5, 2, 15);
    if (mag == 0x7c) want = (c & 0x80) ? -INFINITY : INFINITY;
    if (mag > 0x7c) want = std::nan("");
    expect_same(decode_e5m2(static_cast<uint8_t>(c)), want, c);
    expect_same(e5m2_to_f32(static_cast<uint8_t>(c)), want, c);
  }
  EXPECT_EQ(decode_e5m2(0x7b), 57344.0f);
}

TEST(Formats, E5M2EncodesToNearestEvenWithInfOrSaturation) {
  const Ladder l = ladder(5, 2, 15, 0x7b);
  for (float f : sweep(l)) {
    const auto [sat, cast] = expected_codes(l, f, 0x7b);  // 0x7c is inf
    ASSERT_EQ(encode_e5m2(f, Overflow::kSaturate), sat) << f;
    ASSERT_EQ(encode_e5m2(f, Overflow::kCast), cast) << f;
    if (!std::isnan(f)) ASSERT_EQ(f32_to_e5m2(f), cast) << f;
  }
  EXPECT_EQ(encode_e5m2(61440.0f, Overflow::kCast), 0x7c);  // the tie goes to the even code: inf
  EXPECT_EQ(encode_e5m2(INFINITY, Overflow::kSaturate), 0x7b);
}

TEST(Formats, E2M1DecodesEveryCodeByDefinition) {
  const float values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint32_t c = 0; c < 16; ++c) {
    expect_same(decode_e2m1(static_cast<uint8_t>(c)), definition(c, 2, 1, 1), c);
    EXPECT_EQ(decode_e2m1(static_cast<uint8_t>(c)), c & 8 ? -values[c & 7] : values[c & 7]);
    EXPECT_EQ(decode_e2m1(static_cast<uint8_t>(c | 0xf0)), decode_e2m1(static_cast<uint8_t>(c)));  // low bits only
  }
}

TEST(Formats, E2M1EncodesToNearestEvenAndSaturates) {
  const Ladder l = ladder(2, 1, 1, 0x7);
  for (float f : sweep(l)) {
    const uint8_t sign = std::signbit(f) ? 0x8 : 0;
    const uint8_t want =
        std::isnan(f) ? sign | 0x7 : sign | static_cast<uint8_t>(std::min<uint32_t>(l.round(std::fabs(f)), 0x7));
    ASSERT_EQ(encode_e2m1(f), want) << f;
  }
  EXPECT_EQ(encode_e2m1(0.25f), 0x0);  // tie to even 0
  EXPECT_EQ(encode_e2m1(0.75f), 0x2);  // tie to even 1.0
  EXPECT_EQ(encode_e2m1(5.0f), 0x6);   // tie to even 4
  EXPECT_EQ(encode_e2m1(-100.0f), 0xf);
}

TEST(Formats, E2M1PairsPackLowNibbleFirst) {
  const uint8_t packed[2] = {0x2b, 0xf7};  // elements -1.5, 1.0, 6.0, -6.0
  EXPECT_EQ(e2m1_at(packed, 0), -1.5f);
  EXPECT_EQ(e2m1_at(packed, 1), 1.0f);
  EXPECT_EQ(e2m1_at(packed, 2), 6.0f);
  EXPECT_EQ(e2m1_at(packed, 3), -6.0f);
}

TEST(Formats, E8M0DecodesEveryCodeAsAPowerOfTwo) {
  for (uint32_t c = 0; c < 255; ++c) EXPECT_EQ(decode_e8m0(static_cast<uint8_t>(c)), std::ldexp(1.0f, int(c) - 127));
  EXPECT_TRUE(std::isnan(decode_e8m0(0xff)));
}

TEST(Formats, E8M0EncodesAsPyTorchCastsFloat8E8M0fnu) {
  // The definition: the significand (1.m, or 0.m for f32 subnormals) rounds
  // to an integer, ties to even, carrying into the exponent; clamp to 254.
  auto want = [](float f) -> uint8_t {
    if (!std::isfinite(f)) return 0xff;
    const double a = std::fabs(static_cast<double>(f));
    if (a < std::ldexp(1.0, -126)) {  // subnormal or zero: 0.m * 2^-126
      const double s = a / std::ldexp(1.0, -126);
      return s > 0.5 ? 1 : 0;
    }
    int e;
    const double s = std::frexp(a, &e) * 2;  // [1, 2)
    const int code = (e - 1) + 127 + (s >= 1.5 ? 1 : 0);
    return static_cast<uint8_t>(std::min(code, 254));
  };
  for (uint64_t u = 0; u < (1ull << 32); u += 1u << 12) {
    const float f = from_bits(static_cast<uint32_t>(u));
    ASSERT_EQ(encode_e8m0(f), want(f)) << f << " bits " << std::hex << u;
  }
  for (int e = -126; e < 128; ++e)
    for (double s : {1.0, 1.25, 1.4999, 1.5, 1.5001, 1.99}) {
      const float f = static_cast<float>(std::ldexp(s, e));
      ASSERT_EQ(encode_e8m0(f), want(f)) << f;
    }
  EXPECT_EQ(encode_e8m0(1.0f), 127);
  EXPECT_EQ(encode_e8m0(-4.0f), 129);
  EXPECT_EQ(encode_e8m0(1.5f), 128);
  EXPECT_EQ(encode_e8m0(from_bits(0x00400000)), 0);  // 2^-127 exactly
  EXPECT_EQ(encode_e8m0(0.0f), 0);
  EXPECT_EQ(encode_e8m0(std::ldexp(1.9f, 127)), 254);
  EXPECT_EQ(encode_e8m0(std::nanf("")), 0xff);
  EXPECT_EQ(encode_e8m0(-INFINITY), 0xff);
  for (uint32_t c = 0; c < 255; ++c) EXPECT_EQ(encode_e8m0(decode_e8m0(static_cast<uint8_t>(c))), c);
}

}  // namespace
}  // namespace sinew::kernels
