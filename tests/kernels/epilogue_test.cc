// Epilogues: the value type, its validation, the scalar reference on
// hand-computed values, the kernels' fast fp8 conversions against
// tensor/dtype.h, and every step, activation, reduction and cast fused into
// the tile store and unfused (GEMM, then the pass) against the reference.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/kernels_testing.h"
#include "kernels/tile/scalar.h"
#include "sinew/core/error.h"

namespace sinew::kernels {
namespace {

using testing::Case;
using testing::expect_invalid;

TEST(Epilogue, KeyToStringEqualityAndHash) {
  std::vector<float> bias(64), amax(8 * 4);
  const TensorView b(bias.data(), DType::kF32, {64});
  const TensorView r(amax.data(), DType::kF32, {8, 4});
  Epilogue e1;
  e1.bias(b).activation(Activation::kGeluTanh).scale(0.5).cast(DType::kF8E4M3FN, 2.0).reduce(Reduction::kAmax, 16, r);
  EXPECT_EQ(e1.key(), "bias_row+gelu_tanh+scale+cast_float8_e4m3fn+amax16");
  EXPECT_EQ(e1.to_string(),
            "bias(row float32[64])+gelu_tanh+scale(0.5)+cast(float8_e4m3fn, 2)+amax(group 16 -> float32[8, 4])");
  EXPECT_EQ(e1.cast_dtype(), DType::kF8E4M3FN);
  Epilogue e2;
  e2.bias(b).activation(Activation::kGeluTanh).scale(0.25).cast(DType::kF8E4M3FN, 2.0).reduce(Reduction::kAmax, 16, r);
  EXPECT_EQ(e1.key(), e2.key());  // same code, different parameter
  EXPECT_EQ(e1.hash(), e2.hash());
  EXPECT_EQ(std::hash<Epilogue>{}(e1), e1.hash());
  EXPECT_FALSE(e1 == e2);
  Epilogue e3 = e1;
  EXPECT_TRUE(e3 == e1);
  Epilogue col, mat;
  col.bias(TensorView(bias.data(), DType::kF32, {8, 1})).activation(Activation::kSilu);
  mat.bias(TensorView(bias.data(), DType::kF32, {8, 8})).residual(TensorView(bias.data(), DType::kBF16, {8, 8}));
  EXPECT_EQ(col.key(), "bias_col+silu");
  EXPECT_EQ(mat.key(), "bias_matrix+residual");
  EXPECT_FALSE(col == mat);
  EXPECT_EQ(Epilogue().key(), "none");
  EXPECT_TRUE(Epilogue().empty());
  EXPECT_FALSE(Epilogue().cast_dtype().has_value());
}

TEST(Epilogue, BuilderRejectsBadSteps) {
  std::vector<float> buf(64);
  const TensorView f(buf.data(), DType::kF32, {8});
  expect_invalid([&] { Epilogue().reduce(Reduction::kSum, 3, f); }, {"'epilogue.reduce.group'", "3", "a power of two"});
  expect_invalid([&] { Epilogue().reduce(Reduction::kSum, 0, f); }, {"'epilogue.reduce.group'", "a power of two"});
  expect_invalid([&] { Epilogue().reduce(Reduction::kSum, 2, TensorView(buf.data(), DType::kBF16, {8})); },
                 {"'epilogue.reduce.out.dtype'", "bfloat16", "float32 or float64"});
  expect_invalid([&] { Epilogue().clamp(1.0, 0.0); }, {"'epilogue.clamp'", "[1, 0]", "lo <= hi"});
  expect_invalid([&] { Epilogue().cast(DType::kF32); },
                 {"'epilogue.cast.dtype'", "float32", "bfloat16, float16, float8_e4m3fn or float8_e5m2"});
  expect_invalid([&] { Epilogue().cast(DType::kBF16, INFINITY); }, {"'epilogue.cast.scale'", "inf", "a finite number"});
  expect_invalid([&] { Epilogue().cast(DType::kBF16).scale(2.0); }, {"'epilogue.scale'", "a step after cast()"});
  expect_invalid([&] { Epilogue().bias(TensorView(buf.data(), DType::kI32, {8})); },
                 {"'epilogue.bias.dtype'", "int32", "float32, float64, bfloat16 or float16"});
  expect_invalid([&] { Epilogue().bias(TensorView(buf.data(), DType::kF32, {1, 1, 2, 4})); }, {"'epilogue.bias'"});
  expect_invalid([&] { Epilogue().residual(f); }, {"'epilogue.residual'", "float32[8]", "[M, N]"});
}

// tensor/dtype.h is the definition; the kernels' fast encoders must agree bit for bit.
TEST(Epilogue, FastFp8EncodersMatchDtypeConversions) {
  auto check = [](float x) {
    ASSERT_EQ(tile::fast_f32_to_e4m3fn(x), f32_to_e4m3fn(x)) << x;
    ASSERT_EQ(tile::fast_f32_to_e5m2(x), f32_to_e5m2(x)) << x;
  };
  for (uint32_t h = 0; h < 65536; ++h) check(f16_to_f32(static_cast<uint16_t>(h)));
  for (float x : {448.0f, 464.0f, 464.1f, 480.0f, 1e9f, 57344.0f, 61439.0f, 61440.0f, 0x1p-6f, 0x1p-9f, 0x1p-10f,
                  0x1.8p-10f, 0x1p-14f, 0x1p-16f, 0x1p-17f, 0x1.8p-17f, 0.0f, -0.0f, INFINITY, -INFINITY, NAN})
    check(x), check(-x), check(std::nextafter(x, 0.0f)), check(std::nextafter(x, INFINITY));
  std::mt19937 rng(3);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t bits = (rng() & 0x807fffffu) | ((100u + rng() % 60u) << 23);  // |x| in [2^-27, 2^32)
    float x;
    std::memcpy(&x, &bits, 4);
    check(x);
  }
}

TEST(Epilogue, ReferenceAppliesStepsInOrderThenReducesThenCasts) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> values{-1, 0.5f, 2, -3, 4, -0.25f, nan, 1};
  std::vector<float> ones{1, 1, 1, 1}, out(8), sum(4), mx(2), amax(4), mean(4), lse(2);
  auto view = [](std::vector<float>& v, std::vector<int64_t> s) { return TensorView(v.data(), DType::kF32, s); };
  Epilogue e;
  e.bias(view(ones, {4})).activation(Activation::kRelu).scale(2.0).clamp(0.0, 5.0);
  e.reduce(Reduction::kSum, 2, view(sum, {2, 2})).reduce(Reduction::kMax, 4, view(mx, {2, 1}));
  e.reduce(Reduction::kMean, 2, view(mean, {2, 2})).reduce(Reduction::kLogSumExp, 4, view(lse, {2, 1}));
  apply_epilogue(e, view(values, {2, 4}), view(out, {2, 4}));
  // bias: [0 1.5 3 -2 | 5 .75 nan 2]; relu, x2, clamp to [0, 5]:
  const std::vector<float> want{0, 3, 5, 0, 5, 1.5f, nan, 4};
  for (int i = 0; i < 8; ++i) {
    if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(out[i])) << i;
    else EXPECT_EQ(out[i], want[i]) << i;
  }
  EXPECT_EQ(sum[0], 3);
  EXPECT_EQ(sum[1], 5);
  EXPECT_EQ(sum[2], 6.5f);
  EXPECT_TRUE(std::isnan(sum[3]));
  EXPECT_EQ(mx[0], 5);
  EXPECT_TRUE(std::isnan(mx[1]));
  EXPECT_EQ(mean[0], 1.5f);
  EXPECT_EQ(mean[1], 2.5f);
  EXPECT_FLOAT_EQ(lse[0], static_cast<float>(std::log(2 + std::exp(3.0) + std::exp(5.0))));
  EXPECT_TRUE(std::isnan(lse[1]));

  Epilogue amax_cast;
  amax_cast.cast(DType::kBF16, 0.5).reduce(Reduction::kAmax, 2, view(amax, {2, 2}));
  std::vector<uint16_t> bf(8);
  apply_epilogue(amax_cast, view(values, {2, 4}), TensorView(bf.data(), DType::kBF16, {2, 4}));
  EXPECT_EQ(amax[0], 1);  // before the cast's scale
  EXPECT_EQ(amax[1], 3);
  EXPECT_EQ(bf16_to_f32(bf[3]), -1.5f);
  EXPECT_EQ(bf16_to_f32(bf[5]), -0.125f);
}

// The GEMM writes out before its epilogue reads the operands, whichever
// family runs it: a bias or residual sharing out's memory is refused.
TEST(Epilogue, OperandsThatShareMemoryWithOutAreRefused) {
  std::vector<float> a(8 * 4, 1.0f), b(4 * 6, 1.0f), out(8 * 6, 2.0f), other(8 * 6, 1.0f);
  const TensorView av(a.data(), DType::kF32, {8, 4}), bv(b.data(), DType::kF32, {4, 6});
  const TensorView ov(out.data(), DType::kF32, {8, 6});
  Epilogue same;
  same.residual(ov);
  GemmOptions o;
  o.epilogue = &same;
  expect_invalid([&] { mm(av, bv, ov, o); }, {"mm: epilogue.residual", "does not share memory with out", "out as its bias (C) and beta = 1"});
  Epilogue row;  // a bias row inside out
  row.bias(TensorView(out.data() + 6, DType::kF32, {6}));
  o.epilogue = &row;
  expect_invalid([&] { mm(av, bv, ov, o); }, {"epilogue.bias", "does not share memory with out"});
  Epilogue fine;  // a separate residual: out = a b + r
  fine.residual(TensorView(other.data(), DType::kF32, {8, 6}));
  o.epilogue = &fine;
  mm(av, bv, ov, o);
  for (float x : out) EXPECT_EQ(x, 5.0f);
}

TEST(Epilogue, ApplyValidatesItsArguments) {
  std::vector<float> v(16);
  std::vector<uint16_t> h(16);
  const TensorView values(v.data(), DType::kF32, {4, 4});
  expect_invalid([&] { apply_epilogue(Epilogue(), TensorView(v.data(), DType::kF32, {16}), values); },
                 {"'apply_epilogue: values'", "[M, N] or [B, M, N]"});
  expect_invalid([&] { apply_epilogue(Epilogue(), TensorView(h.data(), DType::kBF16, {4, 4}), values); },
                 {"'apply_epilogue: values.dtype'", "bfloat16"});
  expect_invalid([&] { apply_epilogue(Epilogue(), values, TensorView(v.data(), DType::kF32, {2, 8})); },
                 {"'apply_epilogue: out'", "the shape of values"});
  Epilogue cast;
  cast.cast(DType::kF16);
  expect_invalid([&] { apply_epilogue(cast, values, values); },
                 {"'apply_epilogue: out.dtype'", "float32", "float16 (the epilogue's cast)"});
  expect_invalid([&] { apply_epilogue(Epilogue(), values, TensorView(h.data(), DType::kF8E5M2, {4, 4})); },
                 {"'apply_epilogue: out.dtype'", "or add a cast step"});
}

// ------------------------------------------------------------ differential

// The first kernel of each ISA and kind, with its listed blockings (split m
// and n, direct) and one ragged blocking, plus blas: every code path of the
// fused store without repeating each register tile.
std::vector<std::string> epilogue_candidates(const Case& c) {
  testing::Inputs in = testing::make_inputs(c, 1);
  testing::Outputs o = testing::make_outputs(c, in);
  Epilogue e;
  const GemmProblem p = testing::problem_of(c, in, o, &e);
  std::set<std::string> kernels_seen;
  std::set<std::string> first_kernels;
  std::vector<std::string> ids;
  for (const Candidate* cand : candidates_for(p)) {
    TileConfig cfg;
    if (cand->family() != "tile") {
      if (cand->family() == "blas") ids.push_back(cand->id());
      continue;
    }
    if (!parse_tile_id(cand->id(), &cfg)) continue;
    const std::string group = fmt::format("{}/{}", isa_name(cfg.kernel->isa), static_cast<int>(cfg.kernel->kind));
    if (kernels_seen.insert(group).second) first_kernels.insert(cfg.kernel->name + std::string("@") + group);
    if (!first_kernels.count(cfg.kernel->name + std::string("@") + group)) continue;
    ids.push_back(cand->id());
    if (!cfg.direct && cfg.split == 'm') {
      TileConfig r = cfg;
      r.kc = 4 * cfg.kernel->kstep;
      r.mc = cfg.kernel->mr + 1;
      r.nc = cfg.kernel->nr + 3;
      r.split = 'n';
      ids.push_back(r.id());
    }
  }
  return ids;
}

void check_both_modes(Case c, uint32_t seed) {
  for (EpilogueMode mode : {EpilogueMode::kFused, EpilogueMode::kUnfused}) {
    c.mode = mode;
    SCOPED_TRACE(mode == EpilogueMode::kFused ? "fused" : "unfused");
    testing::check_case(c, seed, epilogue_candidates(c));
  }
}

Case base_case(DType in = DType::kF32) {
  Case c;
  c.in = c.out = in;
  c.m = 13;
  c.n = 64;
  c.k = 29;
  c.lo = 'N';
  return c;
}

TEST(EpilogueDifferential, BiasResidualScaleClampFusedAndUnfused) {
  uint32_t seed = 1;
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16})
    for (int bias : {0, 1, 2}) {
      Case c = base_case(dt);
      c.epi.bias = bias;
      c.epi.residual = bias == 2;
      c.epi.scale = bias == 1 ? -1.5 : 1.0;
      c.epi.clamp = bias != 0;
      c.alpha = 0.75;
      c.beta = bias == 0 ? 0.5 : 0.0;
      c.threads = 1 + bias % 2;
      check_both_modes(c, ++seed);
    }
}

TEST(EpilogueDifferential, EveryActivation) {
  uint32_t seed = 50;
  for (DType dt : {DType::kF32, DType::kF64})
    for (Activation a : {Activation::kRelu, Activation::kGeluTanh, Activation::kGeluErf, Activation::kSilu,
                         Activation::kSigmoid, Activation::kTanh}) {
      Case c = base_case(dt);
      c.epi.has_activation = true;
      c.epi.activation = a;
      c.epi.bias = 0;
      c.alpha = 3.0;  // spread the inputs over the activations' curved parts
      c.threads = 2;
      check_both_modes(c, ++seed);
    }
}

// out = act(x) for x across the range, zeros, infinities and NaN (K = 1).
TEST(EpilogueDifferential, ActivationsAcrossTheirRange) {
  std::vector<float> xs;
  for (float x = -40.0f; x <= 40.0f; x += 0.173f) xs.push_back(x);
  for (float x : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-6f, -1e-6f, 0.6249f, 0.625f, -0.9277f, 0.9278f, 88.0f, -88.0f,
                  200.0f, -200.0f, INFINITY, -INFINITY, NAN})
    xs.push_back(x);
  const int64_t m = static_cast<int64_t>(xs.size()), n = 16;
  std::vector<float> one(n, 1.0f), got(m * n), want(m * n);
  const TensorView a(xs.data(), DType::kF32, {m, 1}), b(one.data(), DType::kF32, {1, n});
  for (Activation act : {Activation::kRelu, Activation::kGeluTanh, Activation::kGeluErf, Activation::kSilu,
                         Activation::kSigmoid, Activation::kTanh}) {
    SCOPED_TRACE(activation_name(act));
    Epilogue e;
    e.activation(act);
    GemmOptions o;
    o.epilogue = &e;
    o.family = "reference";
    mm(a, b, TensorView(want.data(), DType::kF32, {m, n}), o);
    for (const Candidate* c : candidates_for(make_mm_problem(a, b, TensorView(got.data(), DType::kF32, {m, n}), o), "tile")) {
      if (c->id().find("/direct/") == std::string::npos && c->id().find("split_n") != std::string::npos) continue;
      SCOPED_TRACE(c->id());
      o.family.clear();
      o.candidate = c->id();
      mm(a, b, TensorView(got.data(), DType::kF32, {m, n}), o);
      for (int64_t i = 0; i < m * n; ++i) {
        const float g = got[i], w = want[i];
        if (std::isnan(w) || std::isnan(g)) {
          ASSERT_EQ(std::isnan(g), std::isnan(w)) << activation_name(act) << "(" << xs[i / n] << ") = " << g << ", want " << w;
          continue;
        }
        if (std::isinf(w)) {
          ASSERT_EQ(g, w) << xs[i / n];
          continue;
        }
        ASSERT_NEAR(g, w, 2e-6 * std::fabs(w) + 1e-7) << activation_name(act) << "(" << xs[i / n] << ")";
      }
    }
  }
}

// gelu_tanh_pass over strided rows, on two threads, against the reference
// epilogue's GELU (tanh form); the gaps between the rows stay untouched.
TEST(EpilogueDifferential, GeluTanhPassMatchesTheReference) {
  std::vector<float> xs;
  for (float x = -40.0f; x <= 40.0f; x += 0.173f) xs.push_back(x);
  for (float x : {0.0f, -0.0f, 1e-30f, -1e-6f, 0.625f, -0.9277f, 88.0f, -88.0f}) xs.push_back(x);
  const int64_t m = static_cast<int64_t>(xs.size()), n = 16, ldc = n + 3;
  std::vector<float> one(n, 1.0f), want(m * n), got(m * ldc, 12345.0f);
  Epilogue e;
  e.activation(Activation::kGeluTanh);
  GemmOptions o;
  o.epilogue = &e;
  o.family = "reference";
  mm(TensorView(xs.data(), DType::kF32, {m, 1}), TensorView(one.data(), DType::kF32, {1, n}),
     TensorView(want.data(), DType::kF32, {m, n}), o);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) got[i * ldc + j] = xs[i];
  gelu_tanh_pass(got.data(), ldc, m, n, 2);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const float w = want[i * n + j];
      ASSERT_NEAR(got[i * ldc + j], w, 2e-6 * std::fabs(w) + 1e-7) << "gelu_tanh(" << xs[i] << ")";
    }
    for (int64_t j = n; j < ldc; ++j) ASSERT_EQ(got[i * ldc + j], 12345.0f) << "gap after row " << i;
  }
}

TEST(EpilogueDifferential, GroupedReductions) {
  uint32_t seed = 100;
  for (Reduction r : {Reduction::kSum, Reduction::kMean, Reduction::kMax, Reduction::kAmax, Reduction::kLogSumExp})
    for (int64_t group : {1, 8, 64}) {
      Case c = base_case(group == 8 ? DType::kBF16 : DType::kF32);
      c.n = 64;
      c.epi.reductions = {{r, group}};
      c.epi.has_activation = group == 64;
      c.epi.activation = Activation::kTanh;
      c.threads = 1 + (seed % 2);
      check_both_modes(c, ++seed);
    }
  Case wide = base_case();  // groups wider than NR, split over threads along N
  wide.n = 256;
  wide.k = 7;
  wide.epi.reductions = {{Reduction::kMax, 128}, {Reduction::kLogSumExp, 256}, {Reduction::kSum, 32}};
  wide.threads = 2;
  check_both_modes(wide, ++seed);
}

TEST(EpilogueDifferential, CastsToNarrowFormatsWithScale) {
  uint32_t seed = 200;
  for (DType in : {DType::kF32, DType::kBF16})
    for (DType to : {DType::kBF16, DType::kF16, DType::kF8E4M3FN, DType::kF8E5M2}) {
      Case c = base_case(in);
      c.out = to;
      c.epi.cast = true;
      c.epi.cast_dtype = to;
      c.epi.cast_scale = to == DType::kF8E4M3FN ? 64.0 : 0.5;  // e4m3: some values saturate at 448
      c.epi.reductions = {{Reduction::kAmax, 16}};
      c.lo = to == DType::kF16 ? 'S' : 'N';
      c.threads = 2;
      check_both_modes(c, ++seed);
    }
}

TEST(EpilogueDifferential, BmmWithBatchedAndBroadcastOperands) {
  uint32_t seed = 300;
  for (int bias : {0, 2}) {
    Case c = base_case();
    c.op = GemmOp::kBmm;
    c.batch = 3;
    c.m = 7;
    c.n = 32;
    c.epi.bias = bias;  // [N] broadcast over the batch, or [B, M, N]
    c.epi.residual = true;
    c.epi.reductions = {{Reduction::kSum, 16}};
    c.threads = 2;
    check_both_modes(c, ++seed);
  }
}

}  // namespace
}  // namespace sinew::kernels
