// scaled_mm for every recipe against an f64 GEMM of the dequantized
// operands, the recipe detection, sentinels around the output, and every
// validation error (type and text).
#include "sinew/kernels/scaled_mm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels_testing.h"
#include "sinew/core/error.h"
#include "sinew/kernels/quantize.h"
#include "sinew/tensor/dtype.h"

namespace sinew::kernels {
namespace {

using testing::expect_invalid;
using testing::PaddedRows;
using testing::reference_dot;

TensorView transposed(const TensorView& t) {
  if (t.dim() != 2) return t;
  return TensorView(t.data(), t.dtype(), {t.shape()[1], t.shape()[0]}, {t.strides()[1], t.strides()[0]});
}

// A [rows, K] matrix quantized with owned storage.
struct Operand {
  std::vector<float> x;
  std::vector<uint8_t> data, scale;
  QuantizedMatrix q;

  Operand(int64_t rows, int64_t k, DType elem, ScaleRecipe r, ScaleLayout layout, bool two_level, uint32_t seed)
      : x(testing::random_matrix(rows, k, seed, 4.0f)) {
    const ScaleSpec spec = scale_spec(r, layout, rows, k);
    int64_t extent = 1;
    for (size_t i = 0; i < spec.shape.size(); ++i) extent += (spec.shape[i] - 1) * spec.strides[i];
    const int64_t dc = elem == DType::kU8 ? k / 2 : k;
    data.resize(static_cast<size_t>(rows * dc));
    scale.resize(static_cast<size_t>(std::max<int64_t>(extent, 1)) * dtype_size(spec.dtype));
    const TensorView xv(x.data(), DType::kF32, {rows, k});
    q = {TensorView(data.data(), elem, {rows, dc}), TensorView(scale.data(), spec.dtype, spec.shape, spec.strides), r,
         layout, two_level ? nvfp4_global_scale(xv) : 1.0f};
    quantize(xv, q);
  }
  std::vector<float> dequantized() const {
    std::vector<float> v(static_cast<size_t>(q.rows() * q.cols()));
    dequantize(q, TensorView(v.data(), DType::kF32, {q.rows(), q.cols()}));
    return v;
  }
};

struct Recipe {
  ScaleRecipe a, b;
  DType ea, eb;
  ScaleLayout layout = ScaleLayout::kRowMajor;
  bool two_level = false;
};

// Runs scaled_mm(a, w^T) and compares with the f64 GEMM of the dequantized
// operands; the out buffer has sentinel columns on each side of every row.
void check(const Recipe& rc, int64_t m, int64_t n, int64_t k, DType out_dtype, bool bias = false, int threads = 0) {
  SCOPED_TRACE(std::string(scale_recipe_name(rc.a)) + " x " + scale_recipe_name(rc.b) + " " +
               std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " out " +
               dtype_name(out_dtype));
  const Operand a(m, k, rc.ea, rc.a, rc.layout, rc.two_level, 1), w(n, k, rc.eb, rc.b, rc.layout, rc.two_level, 2);
  const TensorView b = transposed(w.q.data);
  const bool block_scaled = rc.a == ScaleRecipe::kMX || rc.a == ScaleRecipe::kNVFP4;
  const TensorView scale_b = block_scaled ? w.q.scale : transposed(w.q.scale);
  EXPECT_EQ(scaled_mm_recipe(a.q.data, b, a.q.scale, scale_b, rc.layout).a, rc.a);
  EXPECT_EQ(scaled_mm_recipe(a.q.data, b, a.q.scale, scale_b, rc.layout).b, rc.b);

  std::vector<uint16_t> bias_v(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) bias_v[j] = f32_to_bf16(static_cast<float>(j % 7) - 3.0f);
  ScaledMmOptions o;
  o.scale_layout = rc.layout;
  o.threads = threads;
  if (bias) o.bias = TensorView(bias_v.data(), DType::kBF16, {n});
  if (rc.two_level) {
    o.global_scale_a = a.q.global_scale;
    o.global_scale_b = w.q.global_scale;
  }
  PaddedRows out(out_dtype, m, n, 3);
  scaled_mm(a.q.data, b, a.q.scale, scale_b, out.view(), o);

  const auto da = a.dequantized(), dw = w.dequantized();
  for (int64_t i = 0; i < m; ++i) {
    ASSERT_TRUE(out.sentinels_intact(i));
    for (int64_t j = 0; j < n; ++j) {
      auto [ref, mag] = reference_dot(da.data() + i * k, dw.data() + j * k, k);
      if (bias) ref += bf16_to_f32(bias_v[j]);
      const double got = out.get(i, j);
      const double tol = 1e-5 * mag + (out_dtype == DType::kBF16 ? std::ldexp(std::fabs(ref), -8) : 0.0) + 1e-30;
      ASSERT_NEAR(got, ref, tol) << "at " << i << "," << j;
    }
  }
}

using R = ScaleRecipe;
constexpr DType kE4 = DType::kF8E4M3FN, kE5 = DType::kF8E5M2, kFp4 = DType::kU8;

TEST(ScaledMm, Tensorwise) {
  check({R::kTensorwise, R::kTensorwise, kE4, kE4}, 37, 48, 256, DType::kF32);
  check({R::kTensorwise, R::kTensorwise, kE4, kE5}, 5, 32, 64, DType::kBF16);
  check({R::kTensorwise, R::kTensorwise, kE5, kE4}, 1, 16, 1040, DType::kF32, false, 1);  // three K panels
}

TEST(ScaledMm, RowwiseWithBf16OutAndBias) {
  check({R::kRowwise, R::kRowwise, kE4, kE4}, 37, 48, 256, DType::kBF16);
  check({R::kRowwise, R::kRowwise, kE4, kE5}, 8, 64, 96, DType::kBF16, true);
}

TEST(ScaledMm, BlockwiseDeepSeekPairs) {
  // K = 272: a partial last 128-block; M and N: partial 128x128 tiles.
  check({R::kBlock1x128, R::kBlock128x128, kE4, kE4}, 130, 144, 272, DType::kF32);
  check({R::kBlock128x128, R::kBlock1x128, kE4, kE4}, 131, 144, 272, DType::kBF16);
  check({R::kBlock1x128, R::kBlock1x128, kE4, kE4}, 20, 32, 400, DType::kF32);
}

TEST(ScaledMm, Mxfp8) {
  for (ScaleLayout l : {ScaleLayout::kRowMajor, ScaleLayout::kSwizzled}) {
    check({R::kMX, R::kMX, kE4, kE4, l}, 33, 48, 192, DType::kF32);
    check({R::kMX, R::kMX, kE5, kE4, l}, 3, 16, 64, DType::kBF16, true);
  }
}

TEST(ScaledMm, Mxfp4) {
  for (ScaleLayout l : {ScaleLayout::kRowMajor, ScaleLayout::kSwizzled})
    check({R::kMX, R::kMX, kFp4, kFp4, l}, 33, 48, 192, DType::kF32);
}

TEST(ScaledMm, Nvfp4SingleAndTwoLevel) {
  for (ScaleLayout l : {ScaleLayout::kRowMajor, ScaleLayout::kSwizzled}) {
    check({R::kNVFP4, R::kNVFP4, kFp4, kFp4, l}, 17, 32, 160, DType::kF32);
    check({R::kNVFP4, R::kNVFP4, kFp4, kFp4, l, true}, 17, 32, 160, DType::kBF16, true);
  }
}

TEST(ScaledMm, EmptyShapes) {
  std::vector<uint8_t> a(64), b(64);
  float s = 1.0f;
  std::vector<float> out(4 * 16, 7.0f);
  const TensorView sv(&s, DType::kF32, {1});
  // K = 0 gives zeros.
  scaled_mm(TensorView(a.data(), kE4, {4, 0}), TensorView(b.data(), kE4, {0, 16}, {1, 0}), sv, sv,
            TensorView(out.data(), DType::kF32, {4, 16}));
  for (float v : out) EXPECT_EQ(v, 0.0f);
  // M = 0 writes nothing.
  scaled_mm(TensorView(a.data(), kE4, {0, 16}), TensorView(b.data(), kE4, {16, 16}, {1, 16}), sv, sv,
            TensorView(out.data(), DType::kF32, {0, 16}));
}

TEST(ScaledMm, ValidationErrorsSayWhatWasExpected) {
  const int64_t m = 32, n = 48, k = 64;
  std::vector<uint8_t> abuf(m * k * 2), bbuf(n * k * 2);
  std::vector<float> sa(m * 8, 1.0f), sb(n * 8, 1.0f), outf(m * n);
  std::vector<uint16_t> outh(m * n), bias(n);
  const TensorView a(abuf.data(), kE4, {m, k}), b(bbuf.data(), kE4, {k, n}, {1, k});
  const TensorView s1(sa.data(), DType::kF32, {1}), s1b(sb.data(), DType::kF32, {1});
  const TensorView out(outf.data(), DType::kF32, {m, n}), outb(outh.data(), DType::kBF16, {m, n});
  auto call = [&](const TensorView& a_, const TensorView& b_, const TensorView& sa_, const TensorView& sb_,
                  const TensorView& out_, const ScaledMmOptions& o = {}) { scaled_mm(a_, b_, sa_, sb_, out_, o); };

  expect_invalid([&] { call(TensorView(abuf.data(), kE4, {m * k}), b, s1, s1b, out); },
                 "invalid argument 'mat1': got float8_e4m3fn[2048]");
  expect_invalid([&] { call(TensorView(abuf.data(), kE4, {m * k}), b, s1, s1b, out); }, "mat1 must be a matrix");
  expect_invalid([&] { call(a, TensorView(bbuf.data(), kE4, {k * n}), s1, s1b, out); }, "mat2 must be a matrix");
  expect_invalid([&] { call(a, TensorView(bbuf.data(), kE4, {k + 16, n}, {1, k + 16}), s1, s1b, out); },
                 "got shapes 32x64 and 80x48, expected shapes that can be multiplied (mat1 and mat2 shapes cannot be "
                 "multiplied)");
  expect_invalid([&] { call(TensorView(outf.data(), DType::kF32, {m, k}), b, s1, s1b, out); },
                 "a Float8 or Float4_x2 matrix");
  // Rowwise scale_b given as [N, 1]: no configuration matches.
  expect_invalid([&] {
    call(a, b, TensorView(sa.data(), DType::kF32, {m, 1}), TensorView(sb.data(), DType::kF32, {n, 1}), outb);
  }, "- For RowWise scaling, a and b should be float8, scales should be float, scale_a should be (32, 1) and "
     "scale_b should be (1, 48), and both should be contiguous.");
  expect_invalid([&] {
    call(a, b, TensorView(sa.data(), DType::kF32, {m, 1}), TensorView(sb.data(), DType::kF32, {n, 1}), outb);
  }, "got an invalid scaling configuration: a.dtype()=float8_e4m3fn, scale_a.dtype()=float32, scale_a.size()=[32, 1], "
     "scale_a.stride()=[1, 1], b.dtype()=float8_e4m3fn, scale_b.dtype()=float32, scale_b.size()=[48, 1] and "
     "scale_b.stride()=[1, 1]");
  expect_invalid([&] { call(a, b, TensorView(sa.data(), DType::kF32, {2}), s1b, out); },
                 "- For BlockWise 1x128 scaling, a and b should be float8, scales should be float, scale_a should be "
                 "(32, 1) and scale_b should be (1, 48), and both should be outer-dim-major.");
  expect_invalid([&] { call(a, b, TensorView(abuf.data(), DType::kU8, {7}), s1b, out); },
                 "- For Blockwise 1x32 scaling, a and b should be float8 or float4 (packed 2x), scales should be "
                 "float8_e8m0fnu (uint8), scale_a should have 64 (float8) / 128 (float4) elements and scale_b should "
                 "have 96 (float8) / 192 (float4) elements, row-major (scale_layout kRowMajor)");
  expect_invalid([&] {
    ScaledMmOptions o;
    o.scale_layout = ScaleLayout::kSwizzled;
    call(a, b, TensorView(abuf.data(), DType::kU8, {7}), s1b, out, o);
  }, "scale_a should have 512 (float8) / 512 (float4) elements and scale_b should have 512 (float8) / 512 (float4) "
     "elements, swizzled (scale_layout kSwizzled)");
  expect_invalid([&] {
    ScaledMmOptions o;
    o.bias = TensorView(bias.data(), DType::kBF16, {n - 1});
    call(a, b, s1, s1b, outb, o);
  }, "Bias must be size 48 but got 47");
  expect_invalid([&] {
    call(TensorView(abuf.data(), kE4, {m, 40}), TensorView(bbuf.data(), kE4, {40, n}, {1, 40}), s1, s1b, out);
  }, "expected trailing dimension of mat1 to be divisible by 16 but got mat1 shape: (32x40)");
  expect_invalid([&] {
    call(a, TensorView(bbuf.data(), kE4, {k, 40}, {1, k}), s1, s1b, TensorView(outf.data(), DType::kF32, {m, 40}));
  }, "mat2 shape (64x40) must be divisible by 16");
  expect_invalid([&] {
    call(TensorView(abuf.data(), kE5, {m, k}), TensorView(bbuf.data(), kE5, {k, n}, {1, k}), s1, s1b, out);
  }, "Multiplication of two Float8_e5m2 matrices is not supported");
  // MX with an fp8 a and an fp4 b.
  expect_invalid([&] {
    call(a, TensorView(bbuf.data(), kFp4, {k, n}, {1, k}), TensorView(abuf.data(), DType::kU8, {m * 2}),
         TensorView(bbuf.data(), DType::kU8, {n * 4}), out);
  }, "got float8_e4m3fn and float4_e2m1fn_x2 (uint8), expected both fp8 or both fp4");
  expect_invalid([&] {
    call(TensorView(abuf.data(), kE4, {m, 48}), TensorView(bbuf.data(), kE4, {48, n}, {1, 48}),
         TensorView(abuf.data(), DType::kU8, {m * 2}), TensorView(bbuf.data(), DType::kU8, {n * 2}), out);
  }, "invalid argument 'K': got 48, expected a multiple of 32 for MX block scaling");
  expect_invalid([&] { call(a, b, s1, s1b, TensorView(outf.data(), DType::kF32, {n, m})); },
                 "expected a [32, 48] matrix");
  expect_invalid([&] { call(a, b, s1, s1b, TensorView(outh.data(), DType::kF16, {m, n})); },
                 "expected float32 or bfloat16 (sinew's scaled_mm has no float16 or float8 output)");
  expect_invalid([&] {
    ScaledMmOptions o;
    o.bias = TensorView(bias.data(), DType::kBF16, {n});
    call(a, b, s1, s1b, out, o);
  }, "Bias is not supported when out_dtype is set to Float32");
  expect_invalid([&] {
    ScaledMmOptions o;
    o.bias = TensorView(sa.data(), DType::kF32, {n});
    call(a, b, s1, s1b, outb, o);
  }, "Bias must be BFloat16 to compute BFloat16 output, but got float32");
  expect_invalid([&] {
    call(a, b, TensorView(sa.data(), DType::kF32, {m, 1}), TensorView(sb.data(), DType::kF32, {1, n}), out);
  }, "Only bf16 high precision output types are supported for row-wise scaling.");
  expect_invalid([&] { call(TensorView(abuf.data(), kE4, {m, k}, {1, m}), b, s1, s1b, out); },
                 "expected a row-major matrix, stride(1) == 1 (Only multiplication of row-major and column-major "
                 "matrices is supported)");
  expect_invalid([&] { call(a, TensorView(bbuf.data(), kE4, {k, n}), s1, s1b, out); },
                 "expected a column-major matrix, stride(0) == 1");
  expect_invalid([&] {
    ScaledMmOptions o;
    o.global_scale_a = 2.0f;
    call(a, b, s1, s1b, out, o);
  }, "invalid argument 'global_scale_b': got no value, expected a value (For two-level-scaled NVFP4");
  expect_invalid([&] {
    ScaledMmOptions o;
    o.global_scale_a = o.global_scale_b = 2.0f;
    call(a, b, s1, s1b, out, o);
  }, "got tensorwise, expected NVFP4 scaling (global scales belong to two-level NVFP4 only)");
}

}  // namespace
}  // namespace sinew::kernels
