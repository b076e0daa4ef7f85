// tensor: dtypes, narrow-float conversions against the formats' definitions,
// strided views.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "sinew/core/error.h"
#include "sinew/tensor/tensor_view.h"

namespace sinew {
namespace {

TEST(DType, SizesNamesAndParsing) {
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF8E4M3FN), 1u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  for (DType t : kAllDTypes) EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  EXPECT_EQ(parse_dtype("bf16"), DType::kBF16);
  try {
    parse_dtype("float12");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("float12"));
  }
}

// Decodes by the format's definition: sign, exponent with bias, mantissa.
double decode_ref(uint32_t bits, int ebits, int mbits, bool fn) {
  int bias = (1 << (ebits - 1)) - 1;
  uint32_t sign = bits >> (ebits + mbits) & 1;
  uint32_t e = bits >> mbits & ((1u << ebits) - 1);
  uint32_t m = bits & ((1u << mbits) - 1);
  double v;
  if (fn) {
    if (e == (1u << ebits) - 1 && m == (1u << mbits) - 1) return NAN;
  } else if (e == (1u << ebits) - 1) {
    return m ? NAN : (sign ? -INFINITY : INFINITY);
  }
  if (e == 0) v = std::ldexp(static_cast<double>(m), 1 - bias - mbits);
  else v = std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -mbits), static_cast<int>(e) - bias);
  return sign ? -v : v;
}

TEST(DType, Fp8AndHalfDecodeExhaustively) {
  for (uint32_t b = 0; b < 256; ++b) {
    double want = decode_ref(b, 4, 3, true);
    double got = e4m3fn_to_f32(static_cast<uint8_t>(b));
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(got)) << b;
    else EXPECT_EQ(got, want) << "e4m3fn " << b;
    want = decode_ref(b, 5, 2, false);
    got = e5m2_to_f32(static_cast<uint8_t>(b));
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(got)) << b;
    else EXPECT_EQ(got, want) << "e5m2 " << b;
  }
  for (uint32_t b = 0; b < 65536; ++b) {
    double want = decode_ref(b, 5, 10, false);
    double got = f16_to_f32(static_cast<uint16_t>(b));
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(got));
    else ASSERT_EQ(got, want) << "f16 " << b;
  }
}

TEST(DType, EncodeRoundTripsEveryCode) {
  for (uint32_t b = 0; b < 256; ++b) {
    float v = e4m3fn_to_f32(static_cast<uint8_t>(b));
    if (!std::isnan(v) && !(v == 0 && std::signbit(v))) EXPECT_EQ(f32_to_e4m3fn(v), b) << b;
    v = e5m2_to_f32(static_cast<uint8_t>(b));
    if (!std::isnan(v) && !(v == 0 && std::signbit(v))) EXPECT_EQ(f32_to_e5m2(v), b) << b;
  }
  for (uint32_t b = 0; b < 65536; ++b) {
    float v = f16_to_f32(static_cast<uint16_t>(b));
    if (!std::isnan(v)) ASSERT_EQ(f32_to_f16(v), b);
    v = bf16_to_f32(static_cast<uint16_t>(b));
    if (!std::isnan(v)) ASSERT_EQ(f32_to_bf16(v), b);
  }
  EXPECT_EQ(e4m3fn_to_f32(f32_to_e4m3fn(1e6f)), 448.0f) << "e4m3fn saturates";
  EXPECT_TRUE(std::isinf(e5m2_to_f32(f32_to_e5m2(1e6f)))) << "e5m2 overflows to inf";
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), f32_to_bf16(1.0f)) << "ties to even";
}

TEST(TensorView, StridedCopiesAndValidation) {
  std::vector<int32_t> m(4 * 6);
  for (int i = 0; i < 24; ++i) m[i] = i;
  TensorView t(m.data(), DType::kI32, {3, 2}, {6, 2});  // every other column of 3 rows
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.numel(), 6);
  std::vector<int32_t> packed(6);
  t.copy_to_contiguous(packed.data());
  EXPECT_EQ(packed, (std::vector<int32_t>{0, 2, 6, 8, 12, 14}));
  for (auto& v : packed) v = -v;
  t.copy_from_contiguous(packed.data());
  EXPECT_EQ(m[8], -8);
  EXPECT_EQ(m[9], 9);
  EXPECT_THROW(TensorView(m.data(), DType::kI32, {2, 2}, {1}), InvalidArgument);
  EXPECT_THROW(TensorView(nullptr, DType::kI32, {2}), InvalidArgument);
  EXPECT_NO_THROW(TensorView(nullptr, DType::kI32, {0}));
  EXPECT_TRUE(TensorView(m.data(), DType::kI32, {2, 1, 3}, {3, 7, 1}).is_contiguous());
}

}  // namespace
}  // namespace sinew
