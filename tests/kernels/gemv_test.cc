// GEMV for every weight format and ISA against an f64 reference from the
// dequantized weights: M in 1..8 (and past 8), K not a multiple of the
// vector width or block, strided and bf16 x / y, sentinels around y, several
// threads, NaN weights, hand-made e4m3 and NVFP4 codes (every code, zero,
// subnormal and negative scales, NaN scales), and the validation errors.
#include "sinew/kernels/gemv.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels_testing.h"
#include "sinew/core/error.h"
#include "sinew/kernels/cpu_features.h"
#include "sinew/kernels/formats.h"
#include "sinew/kernels/quantize.h"
#include "sinew/tensor/dtype.h"

namespace sinew::kernels {
namespace {

using testing::expect_invalid;
using testing::PaddedRows;
using testing::random_matrix;
using testing::reference_dot;

enum class Fmt { kF32, kBF16, kE4M3Row, kE4M3Tensor, kE5M2Row, kNVFP4 };
const char* name(Fmt f) {
  switch (f) {
    case Fmt::kF32: return "f32";
    case Fmt::kBF16: return "bf16";
    case Fmt::kE4M3Row: return "e4m3 per row";
    case Fmt::kE4M3Tensor: return "e4m3 per tensor";
    case Fmt::kE5M2Row: return "e5m2 per row";
    case Fmt::kNVFP4: return "nvfp4";
  }
  return "?";
}

// An [N, K] weight in one format, with its dequantized f32 values.
struct Weight {
  std::vector<float> f32, deq;
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> data, scale_bytes;
  std::vector<float> scale;
  GemvWeight w;

  Weight(Fmt f, int64_t n, int64_t k, uint32_t seed) : f32(random_matrix(n, k, seed)), deq(f32) {
    const TensorView x(f32.data(), DType::kF32, {n, k});
    switch (f) {
      case Fmt::kF32: w.w = x; break;
      case Fmt::kBF16:
        for (float& v : deq) {
          bf16.push_back(f32_to_bf16(v));
          v = bf16_to_f32(bf16.back());
        }
        w.w = TensorView(bf16.data(), DType::kBF16, {n, k});
        break;
      case Fmt::kE4M3Row:
      case Fmt::kE4M3Tensor:
      case Fmt::kE5M2Row: {
        const DType dt = f == Fmt::kE5M2Row ? DType::kF8E5M2 : DType::kF8E4M3FN;
        const bool row = f != Fmt::kE4M3Tensor;
        data.resize(static_cast<size_t>(n * k));
        scale.resize(static_cast<size_t>(row ? n : 1));
        QuantizedMatrix q{
            TensorView(data.data(), dt, {n, k}),
            row ? TensorView(scale.data(), DType::kF32, {n, 1}) : TensorView(scale.data(), DType::kF32, {1}),
            row ? ScaleRecipe::kRowwise : ScaleRecipe::kTensorwise};
        quantize(x, q);
        dequantize(q, TensorView(deq.data(), DType::kF32, {n, k}));
        w = GemvWeight::from(q);
        break;
      }
      case Fmt::kNVFP4: {
        const int64_t blocks = (k + 15) / 16;
        data.resize(static_cast<size_t>(n * k / 2));
        scale_bytes.resize(static_cast<size_t>(n * blocks));
        QuantizedMatrix q{TensorView(data.data(), DType::kU8, {n, k / 2}),
                          TensorView(scale_bytes.data(), DType::kF8E4M3FN, {n, blocks}), ScaleRecipe::kNVFP4,
                          ScaleLayout::kRowMajor, nvfp4_global_scale(x)};
        quantize(x, q);
        dequantize(q, TensorView(deq.data(), DType::kF32, {n, k}));
        w = GemvWeight::from(q);
        break;
      }
    }
  }
};

std::vector<GemvIsa> isas() {
  std::vector<GemvIsa> v = {GemvIsa::kPortable};
  if (gemv_has_avx512()) v.push_back(GemvIsa::kAvx512);
  return v;
}

// Whether row i of an m-row x meets NVFP4 weights in 16-bit fixed point
// (GemvOptions::nvfp4_fixed_point_x): the AVX-512 kernels with VNNI take
// that route for a pass over one row, the last of m = 1, 9, 17, ...
bool fixed_point_row(bool nvfp4, GemvIsa isa, int64_t m, int64_t i, const GemvOptions& o = {}) {
  return nvfp4 && isa == GemvIsa::kAvx512 && cpu_features().avx512_vnni && o.nvfp4_fixed_point_x && m % 8 == 1 &&
         i == m - 1;
}

// What that rounding may cost, as gemv.h states it: each x within 2^(e-15)
// for its 256-element chunk's largest |x| in [2^(e-1), 2^e), times |w|.
double fixed_point_bound(const float* x, const double* w, int64_t k) {
  double bound = 0;
  for (int64_t c0 = 0; c0 < k; c0 += 256) {
    float amax = 0;
    for (int64_t c = c0; c < std::min(k, c0 + 256); ++c) amax = std::max(amax, std::fabs(x[c]));
    if (amax == 0) continue;
    int e;
    std::frexp(amax, &e);
    for (int64_t c = c0; c < std::min(k, c0 + 256); ++c) bound += std::fabs(w[c]) * std::ldexp(1.0, e - 15);
  }
  return bound;
}

// y = x @ W^T through gemv, compared with the f64 reference; y lives in a
// padded buffer whose gaps must stay untouched.
void check(const Weight& wt, int64_t m, int64_t n, int64_t k, GemvIsa isa, DType xdt, DType ydt, int threads = 1) {
  SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) + " x " +
               dtype_name(xdt) + " y " + dtype_name(ydt) + (isa == GemvIsa::kPortable ? " portable" : " avx512"));
  auto x = random_matrix(m, k, 99);
  std::vector<uint16_t> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    xb[i] = f32_to_bf16(x[i]);
    if (xdt == DType::kBF16) x[i] = bf16_to_f32(xb[i]);
  }
  // x strided: rows k + 5 apart.
  std::vector<float> xs(static_cast<size_t>(m * (k + 5)), NAN);
  std::vector<uint16_t> xbs(xs.size(), 0x7fc0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < k; ++c) {
      xs[i * (k + 5) + c] = x[i * k + c];
      xbs[i * (k + 5) + c] = xb[i * k + c];
    }
  const TensorView xv = xdt == DType::kF32 ? TensorView(xs.data(), DType::kF32, {m, k}, {k + 5, 1})
                                           : TensorView(xbs.data(), DType::kBF16, {m, k}, {k + 5, 1});
  PaddedRows y(ydt, m, n, 2);
  GemvOptions o;
  o.isa = isa;
  o.threads = threads;
  gemv(xv, wt.w, y.view(), o);
  for (int64_t i = 0; i < m; ++i) {
    ASSERT_TRUE(y.sentinels_intact(i));
    for (int64_t j = 0; j < n; ++j) {
      const auto [ref, mag] = reference_dot(x.data() + i * k, wt.deq.data() + j * k, k);
      const double got = y.get(i, j);
      double tol = 1e-5 * mag + (ydt == DType::kBF16 ? std::ldexp(std::fabs(ref), -8) : 0.0) + 1e-30;
      if (fixed_point_row(wt.w.w.dtype() == DType::kU8, isa, m, i)) {
        const std::vector<double> wd(wt.deq.begin() + j * k, wt.deq.begin() + (j + 1) * k);
        tol += fixed_point_bound(x.data() + i * k, wd.data(), k);
      }
      ASSERT_NEAR(got, ref, tol) << "at " << i << "," << j;
    }
  }
}

TEST(Gemv, EveryFormatEveryRowCountBothIsas) {
  for (Fmt f : {Fmt::kF32, Fmt::kBF16, Fmt::kE4M3Row, Fmt::kE4M3Tensor, Fmt::kE5M2Row, Fmt::kNVFP4}) {
    SCOPED_TRACE(name(f));
    // K past several 64-byte strides, a non-multiple of 16 where the format allows it.
    const int64_t k = f == Fmt::kNVFP4 ? 298 : 301, n = 13;
    const Weight wt(f, n, k, 7);
    for (GemvIsa isa : isas())
      for (int64_t m = 1; m <= 8; ++m) check(wt, m, n, k, isa, DType::kF32, DType::kF32);
  }
}

TEST(Gemv, ShortAndOddShapes) {
  for (Fmt f : {Fmt::kF32, Fmt::kBF16, Fmt::kE4M3Row, Fmt::kNVFP4})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{1, 2}, {5, 16}, {6, 14}, {37, 32}, {4, 130}, {3, 512}, {5, 766}}) {
      SCOPED_TRACE(name(f));
      const Weight wt(f, n, k, static_cast<uint32_t>(n * 100 + k));
      for (GemvIsa isa : isas())
        for (int64_t m : {1, 3}) check(wt, m, n, k, isa, DType::kF32, DType::kF32);
    }
}

TEST(Gemv, Bf16ActivationsAndOutputs) {
  for (Fmt f : {Fmt::kBF16, Fmt::kE4M3Row, Fmt::kNVFP4}) {
    SCOPED_TRACE(name(f));
    const Weight wt(f, 21, 96, 3);
    for (GemvIsa isa : isas()) {
      check(wt, 2, 21, 96, isa, DType::kBF16, DType::kF32);
      check(wt, 1, 21, 96, isa, DType::kF32, DType::kBF16);
      check(wt, 4, 21, 96, isa, DType::kBF16, DType::kBF16);
    }
  }
}

TEST(Gemv, MoreThanEightRowsTakesSeveralPasses) {
  // 9 and 17 rows end with a pass over one row, which NVFP4 reads in another x layout.
  for (Fmt f : {Fmt::kE4M3Row, Fmt::kNVFP4}) {
    SCOPED_TRACE(name(f));
    const Weight wt(f, 10, 288, 5);
    for (GemvIsa isa : isas())
      for (int64_t m : {9, 17}) check(wt, m, 10, 288, isa, DType::kF32, DType::kF32);
  }
}

TEST(Gemv, ThreadsSplitTheRows) {
  // 320 rows of 1024 f32: enough bytes for several tasks per thread.
  for (Fmt f : {Fmt::kF32, Fmt::kNVFP4}) {
    const Weight wt(f, 320, 1024, 9);
    for (GemvIsa isa : isas()) check(wt, 2, 320, 1024, isa, DType::kF32, DType::kF32, 2);
  }
}

TEST(Gemv, NaNWeightsPropagate) {
  // e4m3fn's NaN codes (0x7f, 0xff) go through the fast decode too.
  const int64_t n = 3, k = 40;
  std::vector<uint8_t> w(static_cast<size_t>(n * k), 0x38);  // 1.0
  w[5] = 0x7f;
  w[k + 33] = 0xff;
  const std::vector<float> x(static_cast<size_t>(k), 1.0f);
  for (GemvIsa isa : isas()) {
    std::vector<float> y(n);
    GemvOptions o;
    o.isa = isa;
    gemv(TensorView(const_cast<float*>(x.data()), DType::kF32, {1, k}),
         {TensorView(w.data(), DType::kF8E4M3FN, {n, k})}, TensorView(y.data(), DType::kF32, {1, n}), o);
    EXPECT_TRUE(std::isnan(y[0]));
    EXPECT_TRUE(std::isnan(y[1]));
    EXPECT_EQ(y[2], 40.0f);
  }
}

// y = x @ W^T for weights given as f64 values (NaN allowed), with the
// tolerance of check(): the gemv of every ISA and the row counts 1, 3 and 8.
void check_against(const GemvWeight& w, const std::vector<double>& deq, int64_t n, int64_t k) {
  for (GemvIsa isa : isas())
    for (int64_t m : {1, 3, 8}) {
      SCOPED_TRACE("m " + std::to_string(m) + (isa == GemvIsa::kPortable ? " portable" : " avx512"));
      const auto x = random_matrix(m, k, 17);
      std::vector<float> y(static_cast<size_t>(m * n));
      GemvOptions o;
      o.isa = isa;
      gemv(TensorView(const_cast<float*>(x.data()), DType::kF32, {m, k}), w, TensorView(y.data(), DType::kF32, {m, n}),
           o);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double ref = 0, mag = 0;
          for (int64_t c = 0; c < k; ++c) {
            ref += x[i * k + c] * deq[j * k + c];
            mag += std::fabs(x[i * k + c] * deq[j * k + c]);
          }
          const double bound =
              fixed_point_row(w.w.dtype() == DType::kU8, isa, m, i) ? fixed_point_bound(x.data() + i * k, deq.data() + j * k, k) : 0.0;
          if (std::isnan(ref)) EXPECT_TRUE(std::isnan(y[i * n + j])) << "at " << i << "," << j;
          else EXPECT_NEAR(y[i * n + j], ref, 1e-5 * mag + bound + 1e-30) << "at " << i << "," << j;
        }
    }
}

TEST(Gemv, E4m3EveryCode) {
  // The AVX-512 kernel decodes 64 codes at once by bit moves, except in a
  // 64-code step holding a zero, subnormal or NaN code, or one of exponent
  // 1 and mantissa below 7 (its cheap test flags those too): row 0 has
  // none; row 1 is mostly subnormal in its first two steps; rows 2 and 3
  // have none but for one or two planted codes (zeros, NaN), so that a
  // missed one would be decoded by bit moves.
  const int64_t n = 4, k = 200;
  std::mt19937 rng(11);
  std::vector<uint8_t> w(static_cast<size_t>(n * k));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < k; ++c) {
      uint8_t v = static_cast<uint8_t>(rng());
      if ((v & 0x7f) == 0x7f || (j != 1 && (static_cast<uint8_t>(v + 1) & 0x70) == 0)) v = 0x38;
      w[j * k + c] = v;
    }
  for (int64_t c = 0; c < k; ++c)
    if (w[k + c] & 0x78 && c < 128) w[k + c] &= 0x87;  // row 1: steps 0 and 1 mostly subnormal
  w[2 * k + 64] = 0x00;
  w[2 * k + 130] = 0x80;  // row 2: zeros in steps 1 and 2
  w[3 * k + 70] = 0xff;   // row 3: NaN in step 1
  std::vector<float> scale = {0.25f, -1.5f, 3.0f, 1.0f};
  std::vector<double> deq(w.size());
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < k; ++c) deq[j * k + c] = static_cast<double>(decode_e4m3fn(w[j * k + c])) * scale[j];
  check_against({TensorView(w.data(), DType::kF8E4M3FN, {n, k}), TensorView(scale.data(), DType::kF32, {n})}, deq, n,
                k);
}

TEST(Gemv, Nvfp4EveryCodeAndScale) {
  // All 16 e2m1 codes; block scales with zero, subnormal, negative and the
  // largest codes; K past one 256-weight step and not a multiple of it (or
  // of 16) in the second shape; a NaN scale code in the last row.
  for (int64_t k : {400, 942}) {
    SCOPED_TRACE("k " + std::to_string(k));
    const int64_t n = 6, blocks = (k + 15) / 16;
    std::mt19937 rng(static_cast<uint32_t>(k));
    std::vector<uint8_t> w(static_cast<size_t>(n * k / 2)), s(static_cast<size_t>(n * blocks));
    for (auto& v : w) v = static_cast<uint8_t>(rng());
    const uint8_t codes[] = {0x00, 0x80, 0x01, 0x07, 0x38, 0xb8, 0x7e, 0xfe, 0x45, 0xc2};
    for (auto& v : s) v = codes[rng() % std::size(codes)];
    s[(n - 1) * blocks + blocks / 2] = 0x7f;
    const float global = -0.75f;
    std::vector<double> deq(static_cast<size_t>(n * k));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < k; ++c)
        deq[j * k + c] = static_cast<double>(e2m1_at(w.data() + j * k / 2, c)) *
                         decode_e4m3fn(s[j * blocks + c / 16]) * global;
    check_against({TensorView(w.data(), DType::kU8, {n, k / 2}), TensorView(s.data(), DType::kF8E4M3FN, {n, blocks}),
                   global},
                  deq, n, k);
  }
}

// One row of x against NVFP4 weights in 16-bit fixed point: chunks of very
// different magnitude keep their own scales (one scale for the row would
// lose the small chunk and exceed the bound), a value just below a power
// of two saturates, nvfp4_fixed_point_x = false meets the f32 tolerance,
// x with an infinity or NaN, or all below 2^-112, takes the f32 route.
TEST(Gemv, Nvfp4FixedPointX) {
  const int64_t n = 9, k = 1000;  // 4 chunks, the last one partial
  const Weight wt(Fmt::kNVFP4, n, k, 21);
  auto x = random_matrix(1, k, 5);
  for (int64_t c = 0; c < 256; ++c) x[c] *= 1e-3f;
  for (int64_t c = 256; c < 512; ++c) x[c] *= 1e3f;
  x[600] = std::nextafter(1.0f, 0.0f) * 8;  // rounds to 2^15 at its chunk's scale
  for (int64_t c = 512; c < 768; ++c) x[c] = std::clamp(x[c], -7.0f, 7.0f);
  auto run = [&](const std::vector<float>& xv, bool fixed) {
    std::vector<float> y(static_cast<size_t>(n));
    GemvOptions o;
    o.nvfp4_fixed_point_x = fixed;
    gemv(TensorView(const_cast<float*>(xv.data()), DType::kF32, {1, k}), wt.w, TensorView(y.data(), DType::kF32, {1, n}),
         o);
    return y;
  };
  auto reference = [&](const std::vector<float>& xv, int64_t j, double* mag) {
    double ref = 0;
    *mag = 0;
    for (int64_t c = 0; c < k; ++c) {
      ref += static_cast<double>(xv[c]) * wt.deq[j * k + c];
      *mag += std::fabs(static_cast<double>(xv[c]) * wt.deq[j * k + c]);
    }
    return ref;
  };
  const auto fixed = run(x, true), exact = run(x, false);
  for (int64_t j = 0; j < n; ++j) {
    double mag;
    const double ref = reference(x, j, &mag);
    const std::vector<double> wd(wt.deq.begin() + j * k, wt.deq.begin() + (j + 1) * k);
    EXPECT_NEAR(fixed[j], ref, 1e-5 * mag + fixed_point_bound(x.data(), wd.data(), k)) << "row " << j;
    EXPECT_NEAR(exact[j], ref, 1e-5 * mag) << "row " << j;
  }
  // All below 2^-112: the f32 route, within its own tolerance.
  std::vector<float> tiny(x);
  for (float& v : tiny) v = std::ldexp(v, -130);
  const auto t = run(tiny, true);
  for (int64_t j = 0; j < n; ++j) {
    double mag;
    const double ref = reference(tiny, j, &mag);
    EXPECT_NEAR(t[j], ref, 1e-5 * mag + 1e-45) << "row " << j;
  }
  // Non-finite x: the same results as the f32 route.
  for (float bad : {INFINITY, NAN}) {
    std::vector<float> xb(x);
    xb[700] = bad;
    const auto a = run(xb, true), b = run(xb, false);
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_FALSE(std::isfinite(a[j])) << "row " << j;
      EXPECT_EQ(std::isnan(a[j]), std::isnan(b[j])) << "row " << j;
      if (!std::isnan(b[j])) EXPECT_EQ(a[j], b[j]) << "row " << j;
    }
  }
}

TEST(Gemv, EmptyShapes) {
  std::vector<float> w(16, 1.0f), x(16, 1.0f), y(4, 5.0f);
  gemv(TensorView(x.data(), DType::kF32, {0, 4}), {TensorView(w.data(), DType::kF32, {4, 4})},
       TensorView(y.data(), DType::kF32, {0, 4}));
  EXPECT_EQ(y[0], 5.0f);
  gemv(TensorView(x.data(), DType::kF32, {1, 0}), {TensorView(w.data(), DType::kF32, {4, 0})},
       TensorView(y.data(), DType::kF32, {1, 4}));
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

TEST(Gemv, ValidationErrorsSayWhatWasExpected) {
  std::vector<float> w(64 * 4, 1.0f), x(64, 1.0f), y(64), s(8, 1.0f);
  std::vector<uint8_t> q(64 * 4);
  const TensorView xv(x.data(), DType::kF32, {1, 32}), yv(y.data(), DType::kF32, {1, 4});
  expect_invalid([&] { gemv(xv, {TensorView(w.data(), DType::kI32, {4, 32})}, yv); },
                 "invalid argument 'weight.w': got int32[4, 32] strides [32, 1] cpu, expected float32, bfloat16, "
                 "float8_e4m3fn, float8_e5m2 or uint8 (NVFP4 e2m1 pairs) weights");
  expect_invalid([&] { gemv(xv, {TensorView(w.data(), DType::kF32, {128})}, yv); }, "expected a 2-D [N, K] weight");
  expect_invalid(
      [&] {
        gemv(xv, {TensorView(w.data(), DType::kF32, {4, 32}, {1, 4})}, yv);
      },
      "expected unit stride along K (rows may be strided)");
  expect_invalid(
      [&] { gemv(TensorView(x.data(), DType::kF32, {1, 16}), {TensorView(w.data(), DType::kF32, {4, 32})}, yv); },
                 "invalid argument 'x': got float32[1, 16] strides [16, 1] cpu, expected float32 or bfloat16 [1, 32]");
  expect_invalid(
      [&] { gemv(xv, {TensorView(w.data(), DType::kF32, {4, 32})}, TensorView(y.data(), DType::kF64, {1, 4})); },
                 "invalid argument 'y': got float64[1, 4] strides [4, 1] cpu, expected float32 or bfloat16 [1, 4]");
  expect_invalid([&] {
    gemv(xv, {TensorView(w.data(), DType::kF32, {4, 32}), TensorView(s.data(), DType::kF32, {4})}, yv);
  }, "expected no scale for float32 weights");
  expect_invalid([&] {
    gemv(xv, {TensorView(q.data(), DType::kF8E4M3FN, {4, 32}), TensorView(s.data(), DType::kF32, {3})}, yv);
  }, "expected float32 with 4 elements (per row) or 1 (per tensor)");
  expect_invalid([&] { gemv(xv, {TensorView(q.data(), DType::kU8, {4, 16})}, yv); },
                 "invalid argument 'weight.scale': got none, expected float8_e4m3fn [4, 2] NVFP4 block scales");
  expect_invalid([&] {
    gemv(xv, {TensorView(q.data(), DType::kU8, {4, 16}), TensorView(q.data(), DType::kF8E4M3FN, {4, 2}), NAN}, yv);
  }, "invalid argument 'weight.global_scale': got nan, expected a finite f32");
  if (!gemv_has_avx512()) {
    GemvOptions o;
    o.isa = GemvIsa::kAvx512;
    expect_invalid([&] { gemv(xv, {TensorView(w.data(), DType::kF32, {4, 32})}, yv, o); }, "lacks AVX-512");
  }
  // GemvWeight::from takes only what the kernels stream.
  std::vector<float> sc(4 * 1);
  expect_invalid([&] {
    GemvWeight::from({TensorView(q.data(), DType::kF8E4M3FN, {4, 32}), TensorView(sc.data(), DType::kF32, {4, 1}),
                      ScaleRecipe::kBlock1x128});
  }, "expected fp8 with tensorwise or rowwise scales, or NVFP4 with row-major scales");
}

}  // namespace
}  // namespace sinew::kernels
