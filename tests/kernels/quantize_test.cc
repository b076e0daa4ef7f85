// Quantize -> dequantize for every recipe: scales against their definitions,
// elements within the format's rounding bound, the swizzled layout against
// torchao's to_blocked, NaN and zero blocks, bf16 input, sentinel bytes
// around every output, and the validation errors.
#include "sinew/kernels/quantize.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/kernels_testing.h"
#include "sinew/core/error.h"
#include "sinew/kernels/formats.h"
#include "sinew/tensor/dtype.h"

namespace sinew::kernels {
namespace {

using testing::expect_invalid;
using testing::kGuard;
using testing::kSentinel;
using testing::random_matrix;

// A buffer with sentinel bytes on both sides.
struct Guarded {
  std::vector<uint8_t> bytes;
  explicit Guarded(size_t n) : bytes(n + 2 * kGuard, kSentinel) {}
  void* data() { return bytes.data() + kGuard; }
  bool intact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (bytes[i] != kSentinel || bytes[bytes.size() - 1 - i] != kSentinel) return false;
    return true;
  }
};


struct Elem {
  DType dtype;
  float max;
  int mbits, emin;  // mantissa bits, exponent of the smallest normal
};
const Elem kE4M3{DType::kF8E4M3FN, 448.0f, 3, -6};
const Elem kE5M2{DType::kF8E5M2, 57344.0f, 2, -14};
const Elem kE2M1{DType::kU8, 6.0f, 1, 0};

float decode(const Elem& e, const uint8_t* data, int64_t i) {
  if (e.dtype == DType::kU8) return e2m1_at(data, i);
  return e.dtype == DType::kF8E4M3FN ? decode_e4m3fn(data[i]) : decode_e5m2(data[i]);
}

// Everything one quantize call needs, with guarded storage.
struct Case {
  ScaleRecipe recipe;
  ScaleLayout layout = ScaleLayout::kRowMajor;
  Elem elem;
  int64_t rows, cols;
  Guarded data, scale;
  ScaleSpec spec;
  float global = 1.0f;

  Case(ScaleRecipe r, ScaleLayout l, Elem e, int64_t rows_, int64_t cols_)
      : recipe(r), layout(l), elem(e), rows(rows_), cols(cols_),
        data(static_cast<size_t>(rows_ * (e.dtype == DType::kU8 ? cols_ / 2 : cols_))),
        scale(0), spec(scale_spec(r, l, rows_, cols_)) {
    int64_t extent = 1;  // elements the strided scale view spans
    for (size_t i = 0; i < spec.shape.size(); ++i) extent += (spec.shape[i] - 1) * spec.strides[i];
    scale = Guarded(static_cast<size_t>(extent) * dtype_size(spec.dtype));
  }
  QuantizedMatrix q() {
    const int64_t dc = elem.dtype == DType::kU8 ? cols / 2 : cols;
    return {TensorView(data.data(), elem.dtype, {rows, dc}),
            TensorView(scale.data(), spec.dtype, spec.shape, spec.strides), recipe, layout, global};
  }
  const uint8_t* bytes() { return static_cast<const uint8_t*>(data.data()); }
  const uint8_t* row(int64_t r) { return bytes() + r * (elem.dtype == DType::kU8 ? cols / 2 : cols); }
  // The scale entry of (r, block) read straight from the row-major spec
  // (swizzled layouts are compared separately, against to_blocked).
  float scale_at(int64_t r, int64_t c) {
    const ScaleBlock b = scale_block(recipe);
    const int64_t i0 = b.rows ? r / b.rows : 0, i1 = b.cols ? c / b.cols : 0;
    int64_t off = 0;
    if (spec.shape.size() == 2) off = i0 * spec.strides[0] + i1 * spec.strides[1];
    const uint8_t* p = static_cast<const uint8_t*>(scale.data());
    if (recipe == ScaleRecipe::kMX) return decode_e8m0(p[off]);
    if (recipe == ScaleRecipe::kNVFP4) return decode_e4m3fn(p[off]) * global;
    float f;
    std::memcpy(&f, p + off * 4, 4);
    return f;
  }
};

// The rounding error bound of one element: half a unit in the last place at
// its binade (or at the subnormal quantum), plus what saturation clips.
double bound(const Elem& e, double x, double scale) {
  const double a = std::fabs(x);
  return std::ldexp(a, -(e.mbits + 1)) + std::ldexp(scale, e.emin - e.mbits - 1) +
         std::max(0.0, a - e.max * scale) + 1e-6 * a + 1e-30;  // + f32 rounding of the scaling
}

double block_amax(const std::vector<float>& x, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  double m = 0;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) m = std::max(m, std::fabs(static_cast<double>(x[r * cols + c])));
  return m;
}

// Quantizes x, checks the scales against the recipe's definition, each
// element against the rounding bound, dequantize against the elements, and
// the sentinels.
void check_round_trip(Case& c, const std::vector<float>& x) {
  TensorView xv(const_cast<float*>(x.data()), DType::kF32, {c.rows, c.cols});
  if (c.recipe == ScaleRecipe::kNVFP4) c.global = nvfp4_global_scale(xv);
  const QuantizedMatrix q = c.q();
  quantize(xv, q);
  ASSERT_TRUE(c.data.intact());
  ASSERT_TRUE(c.scale.intact());

  const ScaleBlock b = scale_block(c.recipe);
  const int64_t br = b.rows ? b.rows : c.rows, bc = b.cols ? b.cols : c.cols;
  for (int64_t r0 = 0; r0 < c.rows; r0 += std::max<int64_t>(br, 1))
    for (int64_t c0 = 0; c0 < c.cols; c0 += std::max<int64_t>(bc, 1)) {
      const int64_t r1 = std::min(c.rows, r0 + br), c1 = std::min(c.cols, c0 + bc);
      const double amax = block_amax(x, c.cols, r0, r1, c0, c1);
      const float s = c.scale_at(r0, c0);
      if (c.recipe == ScaleRecipe::kMX) {
        const int e = amax > 0 ? std::ilogb(amax) : -127;
        const int emax = c.elem.dtype == DType::kU8 ? 2 : c.elem.dtype == DType::kF8E4M3FN ? 8 : 15;
        ASSERT_EQ(s, std::ldexp(1.0f, std::max(e - emax, -127))) << r0 << "," << c0;
      } else if (c.recipe == ScaleRecipe::kNVFP4) {
        const float bs = static_cast<float>(amax) / 6.0f / c.global;
        ASSERT_EQ(s, decode_e4m3fn(encode_e4m3fn(std::clamp(bs, 0.015625f, 448.0f))) * c.global);
      } else {
        ASSERT_FLOAT_EQ(s, static_cast<float>(std::max(amax, 1e-12) / c.elem.max)) << r0 << "," << c0;
      }
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t col = c0; col < c1; ++col) {
          const double v = x[r * c.cols + col];
          const double got = static_cast<double>(decode(c.elem, c.row(r), col)) * s;
          ASSERT_LE(std::fabs(got - v), bound(c.elem, v, s)) << "at " << r << "," << col << " x " << v;
        }
    }

  Guarded out(static_cast<size_t>(c.rows * c.cols) * 4);
  dequantize(q, TensorView(out.data(), DType::kF32, {c.rows, c.cols}));
  ASSERT_TRUE(out.intact());
  const float* o = static_cast<const float*>(out.data());
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t col = 0; col < c.cols; ++col) {
      const float want = decode(c.elem, c.row(r), col) * c.scale_at(r, col);
      ASSERT_EQ(o[r * c.cols + col], want) << r << "," << col;
    }
}

TEST(Quantize, Fp8TensorwiseRowwiseAndBlockwise) {
  for (const Elem& e : {kE4M3, kE5M2})
    for (ScaleRecipe r : {ScaleRecipe::kTensorwise, ScaleRecipe::kRowwise, ScaleRecipe::kBlock1x128,
                          ScaleRecipe::kBlock128x128})
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {7, 300}, {130, 257}, {256, 128}}) {
        SCOPED_TRACE(std::string(scale_recipe_name(r)) + " " + dtype_name(e.dtype) + " " + std::to_string(rows) +
                     "x" + std::to_string(cols));
        Case c(r, ScaleLayout::kRowMajor, e, rows, cols);
        check_round_trip(c, random_matrix(rows, cols, static_cast<uint32_t>(rows * 31 + cols), 6.0f));
      }
}

TEST(Quantize, MxAndNvfp4BlockScales) {
  for (auto [r, e] : {std::pair{ScaleRecipe::kMX, kE4M3}, std::pair{ScaleRecipe::kMX, kE5M2},
                      std::pair{ScaleRecipe::kMX, kE2M1}, std::pair{ScaleRecipe::kNVFP4, kE2M1}})
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 32}, {5, 64}, {33, 100}, {129, 256}}) {
      SCOPED_TRACE(std::string(scale_recipe_name(r)) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                   (e.dtype == DType::kU8 ? " e2m1" : dtype_name(e.dtype)));
      Case c(r, ScaleLayout::kRowMajor, e, rows, cols);
      check_round_trip(c, random_matrix(rows, cols, static_cast<uint32_t>(rows + cols), 10.0f));
    }
}

// torchao's to_blocked, literally: pad to (128, 4) tiles, view as
// (row tiles, 128, col tiles, 4), permute to (row tiles, col tiles, 128, 4),
// reshape to (-1, 4, 32, 4), transpose(1, 2), flatten.
std::vector<uint8_t> to_blocked(const std::vector<uint8_t>& m, int64_t rows, int64_t cols) {
  const int64_t rt = (rows + 127) / 128, ct = (cols + 3) / 4;
  std::vector<uint8_t> padded(static_cast<size_t>(rt * 128 * ct * 4), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) padded[r * ct * 4 + c] = m[r * cols + c];
  std::vector<uint8_t> perm;  // (rt, ct, 128, 4)
  for (int64_t a = 0; a < rt; ++a)
    for (int64_t b = 0; b < ct; ++b)
      for (int64_t i = 0; i < 128; ++i)
        for (int64_t j = 0; j < 4; ++j) perm.push_back(padded[(a * 128 + i) * ct * 4 + b * 4 + j]);
  std::vector<uint8_t> out;  // (-1, 4, 32, 4) -> (-1, 32, 4, 4)
  for (int64_t t = 0; t < rt * ct; ++t)
    for (int64_t i = 0; i < 32; ++i)
      for (int64_t g = 0; g < 4; ++g)
        for (int64_t j = 0; j < 4; ++j) out.push_back(perm[t * 512 + g * 128 + i * 4 + j]);
  return out;
}

TEST(Quantize, SwizzledScalesAreTorchaosToBlocked) {
  for (ScaleRecipe r : {ScaleRecipe::kMX, ScaleRecipe::kNVFP4})
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{3, 64}, {130, 224}, {256, 512}}) {
      const auto x = random_matrix(rows, cols, 7, 8.0f);
      TensorView xv(const_cast<float*>(x.data()), DType::kF32, {rows, cols});
      Case row_major(r, ScaleLayout::kRowMajor, kE2M1, rows, cols), swz(r, ScaleLayout::kSwizzled, kE2M1, rows, cols);
      row_major.global = swz.global = 0.5f;
      quantize(xv, row_major.q());
      std::memset(swz.scale.data(), 0x5a, static_cast<size_t>(swz.spec.numel()));  // padding must be cleared
      quantize(xv, swz.q());
      ASSERT_TRUE(swz.scale.intact());
      EXPECT_EQ(0, std::memcmp(row_major.data.data(), swz.data.data(), static_cast<size_t>(rows * cols / 2)));
      const int64_t blocks = row_major.spec.shape[1];
      std::vector<uint8_t> rm(static_cast<size_t>(rows * blocks));
      std::memcpy(rm.data(), row_major.scale.data(), rm.size());
      const auto want = to_blocked(rm, rows, blocks);
      ASSERT_EQ(static_cast<int64_t>(want.size()), swz.spec.numel());
      EXPECT_EQ(0, std::memcmp(want.data(), swz.scale.data(), want.size())) << scale_recipe_name(r);
      // Dequantizing either layout gives the same matrix.
      std::vector<float> a(static_cast<size_t>(rows * cols)), b(a.size());
      dequantize(row_major.q(), TensorView(a.data(), DType::kF32, {rows, cols}));
      dequantize(swz.q(), TensorView(b.data(), DType::kF32, {rows, cols}));
      EXPECT_EQ(a, b);
    }
}

TEST(Quantize, Bf16InputMatchesItsF32Value) {
  const int64_t rows = 9, cols = 160;
  auto x = random_matrix(rows, cols, 3, 4.0f);
  std::vector<uint16_t> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    xb[i] = f32_to_bf16(x[i]);
    x[i] = bf16_to_f32(xb[i]);
  }
  for (ScaleRecipe r : {ScaleRecipe::kRowwise, ScaleRecipe::kBlock1x128, ScaleRecipe::kMX, ScaleRecipe::kNVFP4}) {
    const Elem e = r == ScaleRecipe::kNVFP4 ? kE2M1 : kE4M3;
    Case a(r, ScaleLayout::kRowMajor, e, rows, cols), b(r, ScaleLayout::kRowMajor, e, rows, cols);
    quantize(TensorView(x.data(), DType::kF32, {rows, cols}), a.q());
    quantize(TensorView(xb.data(), DType::kBF16, {rows, cols}), b.q());
    EXPECT_EQ(a.data.bytes, b.data.bytes) << scale_recipe_name(r);
    EXPECT_EQ(a.scale.bytes, b.scale.bytes) << scale_recipe_name(r);
    // And dequantizing into bf16 rounds the f32 result.
    std::vector<float> f(x.size());
    std::vector<uint16_t> h(x.size());
    dequantize(a.q(), TensorView(f.data(), DType::kF32, {rows, cols}));
    dequantize(a.q(), TensorView(h.data(), DType::kBF16, {rows, cols}));
    for (size_t i = 0; i < f.size(); ++i) ASSERT_EQ(h[i], f32_to_bf16(f[i]));
  }
}

TEST(Quantize, StridedInputAndOutput) {
  const int64_t rows = 6, cols = 64;
  const auto x = random_matrix(rows, cols, 11, 1.0f);
  std::vector<float> xt(x.size());  // column-major copy
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) xt[c * rows + r] = x[r * cols + c];
  Case a(ScaleRecipe::kMX, ScaleLayout::kRowMajor, kE4M3, rows, cols),
      b(ScaleRecipe::kMX, ScaleLayout::kRowMajor, kE4M3, rows, cols);
  quantize(TensorView(const_cast<float*>(x.data()), DType::kF32, {rows, cols}), a.q());
  quantize(TensorView(xt.data(), DType::kF32, {rows, cols}, {1, rows}), b.q());
  EXPECT_EQ(a.data.bytes, b.data.bytes);
  std::vector<float> out(x.size() * 3, -1.0f);
  dequantize(a.q(), TensorView(out.data(), DType::kF32, {rows, cols}, {1, rows * 3}));
  std::vector<float> dense(x.size());
  dequantize(a.q(), TensorView(dense.data(), DType::kF32, {rows, cols}));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(out[c * rows * 3 + r], dense[r * cols + c]);
}

TEST(Quantize, ThreadCountDoesNotChangeTheResult) {
  const int64_t rows = 300, cols = 256;
  const auto x = random_matrix(rows, cols, 5, 1.0f);
  for (ScaleRecipe r : {ScaleRecipe::kTensorwise, ScaleRecipe::kBlock128x128, ScaleRecipe::kNVFP4}) {
    const Elem e = r == ScaleRecipe::kNVFP4 ? kE2M1 : kE4M3;
    Case a(r, ScaleLayout::kRowMajor, e, rows, cols), b(r, ScaleLayout::kRowMajor, e, rows, cols);
    quantize(TensorView(const_cast<float*>(x.data()), DType::kF32, {rows, cols}), a.q(), 1);
    quantize(TensorView(const_cast<float*>(x.data()), DType::kF32, {rows, cols}), b.q(), 2);
    EXPECT_EQ(a.data.bytes, b.data.bytes);
    EXPECT_EQ(a.scale.bytes, b.scale.bytes);
  }
}

TEST(Quantize, NaNAndZeroBlocks) {
  const int64_t rows = 2, cols = 64;
  std::vector<float> x(rows * cols, 1.0f);
  x[5] = std::nanf("");                                      // row 0, first 32-block
  for (int64_t c = 32; c < 64; ++c) x[cols + c] = 0.0f;      // row 1, second block all zero
  Case mx(ScaleRecipe::kMX, ScaleLayout::kRowMajor, kE4M3, rows, cols);
  quantize(TensorView(x.data(), DType::kF32, {rows, cols}), mx.q());
  const uint8_t* s = static_cast<const uint8_t*>(mx.scale.data());
  EXPECT_EQ(s[0], 0xff);  // NaN block
  EXPECT_EQ(s[1], 127 - 8);  // amax 1 -> 2^(0 - 8)
  EXPECT_EQ(s[3], 0);        // zero block: the smallest scale
  for (int64_t c = 32; c < 64; ++c) EXPECT_EQ(mx.bytes()[cols + c], 0);
  std::vector<float> out(x.size());
  dequantize(mx.q(), TensorView(out.data(), DType::kF32, {rows, cols}));
  for (int64_t c = 0; c < 32; ++c) EXPECT_TRUE(std::isnan(out[c]));
  for (int64_t c = 32; c < 64; ++c) EXPECT_EQ(out[c], 1.0f);

  Case nv(ScaleRecipe::kNVFP4, ScaleLayout::kRowMajor, kE2M1, rows, cols);
  quantize(TensorView(x.data(), DType::kF32, {rows, cols}), nv.q());
  dequantize(nv.q(), TensorView(out.data(), DType::kF32, {rows, cols}));
  for (int64_t c = 0; c < 16; ++c) EXPECT_TRUE(std::isnan(out[c]));
  // Single-level NVFP4 of an all-ones block: scale e4m3(1/6) = 0.171875, elements round to 6.
  for (int64_t c = 16; c < 64; ++c) EXPECT_EQ(out[c], 6 * 0.171875f);
  for (int64_t c = 32; c < 64; ++c) EXPECT_EQ(out[cols + c], 0.0f);

  Case tw(ScaleRecipe::kTensorwise, ScaleLayout::kRowMajor, kE4M3, rows, cols);
  quantize(TensorView(x.data(), DType::kF32, {rows, cols}), tw.q());
  EXPECT_TRUE(std::isnan(tw.scale_at(0, 0)));
  std::vector<float> zeros(x.size(), 0.0f);
  quantize(TensorView(zeros.data(), DType::kF32, {rows, cols}), tw.q());
  EXPECT_FLOAT_EQ(tw.scale_at(0, 0), 1e-12f / 448.0f);
  for (int64_t i = 0; i < rows * cols; ++i) EXPECT_EQ(tw.bytes()[i], 0);
}

TEST(Quantize, Nvfp4GlobalScaleIsAmaxOver448Times6) {
  std::vector<float> x = {0.5f, -2688.0f, 3.0f, 1.0f};
  EXPECT_EQ(nvfp4_global_scale(TensorView(x.data(), DType::kF32, {2, 2})), 1.0f);
  std::vector<float> z(4, 0.0f);
  EXPECT_EQ(nvfp4_global_scale(TensorView(z.data(), DType::kF32, {2, 2})), 1.0f);
  x[0] = 5376.0f;
  EXPECT_EQ(nvfp4_global_scale(TensorView(x.data(), DType::kF32, {2, 2})), 2.0f);
}

TEST(Quantize, ValidationErrorsSayWhatWasExpected) {
  std::vector<float> x(8 * 64, 1.0f);
  std::vector<uint8_t> data(8 * 64), scale(64);
  std::vector<float> fscale(64);
  const TensorView xv(x.data(), DType::kF32, {8, 64});
  // Rowwise scale of the wrong shape.
  expect_invalid([&] {
    quantize(xv, {TensorView(data.data(), DType::kF8E4M3FN, {8, 64}), TensorView(fscale.data(), DType::kF32, {8}),
                  ScaleRecipe::kRowwise});
  }, "invalid argument 'q.scale': got float32[8] strides [1] cpu, expected float32 [8, 1] (rowwise scales");
  // MX scale of the wrong dtype.
  expect_invalid([&] {
    quantize(xv, {TensorView(data.data(), DType::kF8E4M3FN, {8, 64}), TensorView(fscale.data(), DType::kF32, {8, 2}),
                  ScaleRecipe::kMX});
  }, "expected uint8 [8, 2] (MX (1x32, e8m0) scales, row-major layout, of a [8, 64] matrix)");
  // Swizzled scales need round_up(8, 128) * round_up(2, 4) entries.
  expect_invalid([&] {
    quantize(xv, {TensorView(data.data(), DType::kF8E4M3FN, {8, 64}), TensorView(scale.data(), DType::kU8, {16}),
                  ScaleRecipe::kMX, ScaleLayout::kSwizzled});
  }, "contiguous, uint8 [512] (MX (1x32, e8m0) scales, swizzled layout");
  // NVFP4 elements are uint8 e2m1 pairs.
  expect_invalid([&] {
    quantize(xv, {TensorView(data.data(), DType::kF8E4M3FN, {8, 64}),
                  TensorView(scale.data(), DType::kF8E4M3FN, {8, 4}), ScaleRecipe::kNVFP4});
  }, "expected uint8 e2m1 pairs [rows, cols / 2] for NVFP4");
  // uint8 data is e2m1, which only MX and NVFP4 scale.
  expect_invalid([&] {
    quantize(xv, {TensorView(data.data(), DType::kU8, {8, 32}), TensorView(fscale.data(), DType::kF32, {8, 1}),
                  ScaleRecipe::kRowwise});
  }, "expected float8_e4m3fn or float8_e5m2 elements for rowwise scales");
  // x must match the data's shape.
  expect_invalid([&] {
    quantize(TensorView(x.data(), DType::kF32, {8, 32}),
             {TensorView(data.data(), DType::kF8E4M3FN, {8, 64}), TensorView(fscale.data(), DType::kF32, {1}),
              ScaleRecipe::kTensorwise});
  }, "invalid argument 'x': got float32[8, 32] strides [32, 1] cpu, expected float32 or bfloat16 [8, 64]");
  // Data must have unit stride along the columns.
  expect_invalid([&] {
    quantize(xv, {TensorView(data.data(), DType::kF8E4M3FN, {8, 64}, {1, 8}),
                  TensorView(fscale.data(), DType::kF32, {1}),
                  ScaleRecipe::kTensorwise});
  }, "expected unit stride along the columns");
  // NVFP4 needs a positive global scale.
  expect_invalid([&] {
    quantize(xv, {TensorView(data.data(), DType::kU8, {8, 32}), TensorView(scale.data(), DType::kF8E4M3FN, {8, 4}),
                  ScaleRecipe::kNVFP4, ScaleLayout::kRowMajor, 0.0f});
  }, "invalid argument 'q.global_scale': got 0, expected a positive finite f32");
  // dequantize checks its output.
  expect_invalid([&] {
    dequantize({TensorView(data.data(), DType::kF8E4M3FN, {8, 64}), TensorView(fscale.data(), DType::kF32, {1}),
                ScaleRecipe::kTensorwise},
               TensorView(x.data(), DType::kF64, {8, 32}));
  }, "invalid argument 'out'");
}

}  // namespace
}  // namespace sinew::kernels
