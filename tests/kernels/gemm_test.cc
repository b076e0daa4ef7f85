// GEMM: every candidate of every family (and every ISA this CPU has)
// against the f64-accumulating reference, over dtypes, the four transpose
// layouts and strided views, ragged sizes, alpha/beta, addmm's bias kinds,
// bmm, 1 and 2 threads; the candidate registry; every validation message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "kernels/kernels_testing.h"
#include "sinew/core/error.h"
#include "sinew/kernels/ceiling.h"
#include "sinew/kernels/cpu_features.h"

namespace sinew::kernels {
namespace {

using testing::Case;
using testing::expect_invalid;
using testing::check_case;
using ::testing::HasSubstr;

// 1, primes, and sizes that are not multiples of any register tile (MR 4..14,
// NR 8..64) or of the ragged test blockings; few columns (N < M) take the
// direct candidates' transposed path.
constexpr std::array<std::array<int64_t, 3>, 7> kShapes{
    {{1, 1, 1}, {1, 37, 29}, {5, 3, 2}, {13, 17, 19}, {31, 67, 43}, {2, 71, 1}, {29, 5, 41}}};

struct Layout {
  char a, b, out;
};
// The four transpose layouts, then strided operands and outputs.
constexpr std::array<Layout, 7> kLayouts{{{'N', 'N', 'N'}, {'N', 'T', 'N'}, {'T', 'N', 'N'}, {'T', 'T', 'N'},
                                          {'S', 'S', 'S'}, {'N', 'N', 'T'}, {'T', 'S', 'S'}}};

// An mm of `in` -> `out` with shape s (M, N, K) and layout l, on 1 or 2
// threads as the seed alternates; checked with the next seed.
void check_shaped(DType in, DType out, const std::array<int64_t, 3>& s, const Layout& l, int& seed) {
  Case c;
  c.in = in;
  c.out = out;
  c.m = s[0];
  c.n = s[1];
  c.k = s[2];
  c.la = l.a;
  c.lb = l.b;
  c.lo = l.out;
  c.threads = 1 + seed % 2;
  check_case(c, ++seed);
}

TEST(GemmDifferential, F32EveryCandidateLayoutAndShape) {
  int seed = 0;
  for (const auto& s : kShapes)
    for (const Layout& l : kLayouts) check_shaped(DType::kF32, DType::kF32, s, l, seed);
}

TEST(GemmDifferential, F64EveryCandidate) {
  int seed = 100;
  for (const auto& s : kShapes)
    for (const Layout& l : {Layout{'N', 'N', 'N'}, Layout{'T', 'T', 'S'}, Layout{'S', 'N', 'T'}})
      check_shaped(DType::kF64, DType::kF64, s, l, seed);
}

TEST(GemmDifferential, Bf16AndF16InputsToNarrowAndF32Outputs) {
  int seed = 200;
  for (DType in : {DType::kBF16, DType::kF16})
    for (DType out : {in, DType::kF32})
      for (const auto& s : {std::array<int64_t, 3>{1, 37, 29}, std::array<int64_t, 3>{13, 17, 19},
                            std::array<int64_t, 3>{31, 67, 43}})
        for (const Layout& l : {Layout{'N', 'N', 'N'}, Layout{'T', 'T', 'N'}, Layout{'S', 'S', 'S'}})
          check_shaped(in, out, s, l, seed);
}

TEST(GemmDifferential, AlphaBetaAndAddmmBiasKinds) {
  int seed = 300;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF64}) {
    Case c;
    c.in = c.out = dt;
    c.m = 11;
    c.n = 35;
    c.k = 23;
    c.alpha = -0.5;
    c.beta = 0.75;
    c.lo = 'S';
    c.threads = 2;
    check_case(c, ++seed);  // mm reads out
    std::swap(c.m, c.n);
    check_case(c, ++seed);  // ... also through the transposed path
    c.op = GemmOp::kAddmm;
    for (int kind : {0, 1, 2})
      for (double beta : {0.0, 1.0, -2.0}) {
        c.addmm_bias = kind;
        c.beta = beta;
        c.lo = kind == 1 ? 'T' : 'N';
        check_case(c, ++seed);
      }
  }
}

// Contiguous biases (row, column, row- and column-major matrix) of the
// accumulation dtype take the blas family's row-copy path, other dtypes
// its conversion; row- and column-major outputs, beta 1 and not, with and
// without an epilogue (its vectorised pass).
TEST(GemmDifferential, AddmmContiguousBiasKinds) {
  int seed = 350;
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16})
    for (int kind : {0, 1, 2, 3})
      for (double beta : {1.0, -2.0}) {
        Case c;
        c.op = GemmOp::kAddmm;
        c.in = c.out = dt;
        c.m = 13;
        c.n = 37;
        c.k = 19;
        c.addmm_bias = kind == 3 ? 2 : kind;
        c.lbias = kind == 3 ? 'T' : 'N';
        c.beta = beta;
        c.lo = seed % 2 ? 'T' : 'N';
        c.threads = 2;
        if (beta == 1.0) {
          c.epi.has_activation = true;
          c.epi.activation = Activation::kGeluTanh;
        }
        check_case(c, ++seed);
      }
}

// The small-M kernel that streams B (AVX-512 only): row counts 1-8, column
// counts around its 16-wide vectors and its 256-column thread ranges, K
// around its groups of 4 rows, A in both layouts and strided, mm reading
// out, addmm's bias kinds and betas, an epilogue with a reduction, bmm.
TEST(GemmDifferential, SmallMStreamingB) {
  const Candidate* stream = find_candidate("tile/avx512/f32/stream_b");
  if (!isa_available(Isa::kAvx512)) {
    EXPECT_EQ(stream, nullptr);
    GTEST_SKIP() << "no AVX-512";
  }
  ASSERT_NE(stream, nullptr);
  int seed = 380;
  for (int64_t m : {1, 3, 8})
    for (int64_t n : {1, 17, 300, 530})
      for (int64_t k : {1, 6, 29}) {
        Case c;
        c.m = m;
        c.n = n;
        c.k = k;
        c.la = "NTS"[seed % 3];
        c.threads = 1 + seed % 2;
        c.alpha = seed % 4 == 0 ? -0.5 : 1.0;
        c.beta = seed % 5 == 0 ? 0.75 : 0.0;
        check_case(c, ++seed, {stream->id()});
        c.op = GemmOp::kAddmm;
        c.addmm_bias = seed % 3;
        c.beta = seed % 2 ? 1.0 : -2.0;
        c.lo = 'N';
        c.epi.has_activation = true;
        c.epi.activation = Activation::kGeluTanh;
        c.epi.bias = n % 2;
        if (n % 16 == 0) c.epi.reductions = {{Reduction::kSum, 4}};
        check_case(c, ++seed, {stream->id()});
      }
  Case c;
  c.op = GemmOp::kBmm;
  c.batch = 3;
  c.m = 5;
  c.n = 40;
  c.k = 9;
  c.threads = 2;
  check_case(c, 400, {stream->id()});
}

TEST(GemmDifferential, BmmWithStridedBatches) {
  int seed = 400;
  for (DType dt : {DType::kF32, DType::kBF16})
    for (const Layout& l : {Layout{'N', 'N', 'N'}, Layout{'T', 'S', 'S'}})
      for (int64_t batch : {1, 3}) {
        Case c;
        c.op = GemmOp::kBmm;
        c.in = c.out = dt;
        c.batch = batch;
        c.m = 9;
        c.n = 19;
        c.k = 15;
        c.la = l.a;
        c.lb = l.b;
        c.lo = l.out;
        c.beta = 0.5;
        c.threads = batch == 1 ? 2 : 1 + seed % 2;
        check_case(c, ++seed);
      }
}

// Past the listed candidates' cache blocks (KC 384, NC ~512): partial sums
// kept in the output, or in the workspace for a narrow or strided output.
TEST(GemmDifferential, LargerThanTheDefaultBlocks) {
  int seed = 500;
  for (DType out : {DType::kF32, DType::kBF16}) {
    Case c;
    c.in = out;
    c.out = out;
    c.m = 26;
    c.n = 530;
    c.k = 400;
    c.lo = out == DType::kF32 ? 'S' : 'N';
    c.beta = out == DType::kF32 ? 0.5 : 0.0;
    c.threads = 2;
    testing::Inputs in = testing::make_inputs(c, 1);
    testing::Outputs o = testing::make_outputs(c, in);
    Epilogue e;
    const GemmProblem p = testing::problem_of(c, in, o, &e);
    check_case(c, ++seed, {default_candidate(p).id(), default_candidate(p, "blas").id()});
  }
}

// Blockings whose last K and M blocks would be thin: K is split into equal
// blocks, a last M block under a quarter of MC joins the one before it, and
// with two threads splitting the rows a B of over 4 MB is packed once for
// all of them in those same K blocks.
TEST(GemmDifferential, BlocksWithThinRemainders) {
  int seed = 550;
  for (int threads : {1, 2}) {
    Case c;
    c.m = 70;
    c.n = threads == 2 ? 5300 : 130;  // 5300 x 200 f32: past the shared-B threshold
    c.k = 200;
    c.beta = 0.5;
    c.threads = threads;
    testing::Inputs in = testing::make_inputs(c, 1);
    testing::Outputs o = testing::make_outputs(c, in);
    Epilogue e;
    const GemmProblem p = testing::problem_of(c, in, o, &e);
    std::vector<std::string> ids;
    for (const Candidate* cand : candidates_for(p, "tile")) {
      TileConfig cfg;
      if (!parse_tile_id(cand->id(), &cfg) || cfg.direct || cfg.split != 'm') continue;
      cfg.kc = 64 * cfg.kernel->kstep;                // 200 = 4 blocks of 50, not 64, 64, 64, 8
      cfg.mc = 60 / cfg.kernel->mr * cfg.kernel->mr;  // 6 or 12 rows a tile: 70 rows in one block, not 60 + 10
      cfg.nc = 2 * cfg.kernel->nr;
      ids.push_back(cfg.id());
    }
    ASSERT_FALSE(ids.empty());
    check_case(c, ++seed, ids);
  }
}

TEST(GemmDifferential, ZeroSizes) {
  int seed = 600;
  for (const auto& s : {std::array<int64_t, 3>{0, 5, 3}, std::array<int64_t, 3>{4, 0, 3},
                        std::array<int64_t, 3>{4, 5, 0}, std::array<int64_t, 3>{0, 0, 0}}) {
    Case c;
    c.m = s[0];
    c.n = s[1];
    c.k = s[2];
    c.beta = 0.5;  // K = 0: out = beta * out
    check_case(c, ++seed);
    c.op = GemmOp::kAddmm;
    c.addmm_bias = 0;
    check_case(c, ++seed);  // K = 0: out = beta * bias
  }
  Case c;
  c.op = GemmOp::kBmm;
  c.batch = 0;
  c.m = 3;
  c.n = 4;
  c.k = 5;
  check_case(c, ++seed);
  c.op = GemmOp::kMm;  // alpha = 0 reads neither a nor b (as in BLAS)
  c.batch = 1;
  c.alpha = 0.0;
  c.beta = 2.0;
  check_case(c, ++seed);
}

TEST(GemmDifferential, NanAndInfPropagate) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF64}) {
    Case c;
    c.in = c.out = dt;
    c.m = 14;
    c.n = 40;
    c.k = 17;
    SCOPED_TRACE(c.name());
    testing::Inputs in = testing::make_inputs(c, 7);
    in.a.set(3 * c.k + 4, NAN);     // row 3 is NaN
    in.a.set(5 * c.k + 1, INFINITY);  // row 5: +-inf, or NaN where inf meets 0
    in.b.set(1 * c.n + 7, 0.0);
    in.b.set(2 * c.n + 9, INFINITY);  // column 9: inf where not already NaN
    testing::Outputs want = testing::make_outputs(c, in);
    testing::run_case(c, in, want, "reference");
    int nan = 0, inf = 0;
    for (int64_t f = 0; f < want.out.numel(); ++f) {
      nan += std::isnan(want.out.get(f));
      inf += std::isinf(want.out.get(f));
    }
    EXPECT_GE(nan, c.n);
    EXPECT_GT(inf, 0);
    for (const std::string& id : testing::candidate_ids(c, in)) {
      SCOPED_TRACE(id);
      testing::Outputs got = testing::make_outputs(c, in);
      testing::run_case(c, in, got, id);
      for (int64_t f = 0; f < got.out.numel(); ++f) {
        const double g = got.out.get(f), w = want.out.get(f);
        if (std::isnan(w) || std::isinf(w)) {
          ASSERT_EQ(std::isnan(g), std::isnan(w)) << f;
          if (std::isinf(w)) {
            ASSERT_EQ(g, w) << f;
          }
        } else {
          ASSERT_TRUE(std::isfinite(g)) << f;
        }
      }
    }
  }
}

// ---------------------------------------------------------------- registry

TEST(GemmCandidates, IdsAreUniqueStableAndFoundAgain) {
  std::set<std::string> seen;
  for (const Candidate* c : all_candidates()) {
    EXPECT_TRUE(seen.insert(c->id()).second) << c->id();
    EXPECT_EQ(find_candidate(c->id()), c);
    EXPECT_EQ(c->id().rfind(c->family() + "/", 0), 0u) << c->id();
    if (c->family() == "tile") {
      EXPECT_FALSE(c->params().empty());
    }
  }
  for (std::string_view family : candidate_families()) {
    bool any = false;
    for (const Candidate* c : all_candidates()) any = any || c->family() == family;
    EXPECT_TRUE(any) << family;
  }
  // Any well-formed tile id is a candidate, the same one every time.
  const Candidate* custom = find_candidate("tile/generic/f32/4x16/kc40_mc9_nc19/split_n");
  ASSERT_NE(custom, nullptr);
  EXPECT_EQ(find_candidate("tile/generic/f32/4x16/kc40_mc9_nc19/split_n"), custom);
  EXPECT_EQ(custom->id(), "tile/generic/f32/4x16/kc40_mc9_nc19/split_n");
  for (const char* bad : {"", "tile", "tile/generic/f32/4x16/kc0_mc9_nc19/split_n",
                          "tile/generic/f32/4x16/kc40_mc9_nc19/split_q", "tile/generic/f32/5x16/direct/split_n",
                          "tile/generic/f32/4x16/kc040_mc9_nc19/split_n", "tile/generic/f32/4x16/kc40_mc9_nc19x/split_n",
                          "tile/avx512/bf16dot/12x32/direct/split_n", "tile/avx512/bf16dot/12x32/kc7_mc9_nc19/split_n",
                          "blas/other", "reference/f32"})
    EXPECT_EQ(find_candidate(bad), nullptr) << bad;
}

TEST(GemmCandidates, DefaultPickFollowsShapeDtypeAndFamily) {
  std::vector<float> buf(64 * 64 * 3);
  std::vector<double> dbuf(64 * 64 * 3);
  auto f32 = [&](int64_t m, int64_t n, int64_t k) {
    return make_mm_problem(TensorView(buf.data(), DType::kF32, {m, k}), TensorView(buf.data() + 4096, DType::kF32, {k, n}),
                           TensorView(buf.data() + 8192, DType::kF32, {m, n}));
  };
  const GemmProblem small = f32(2, 64, 64), square = f32(64, 64, 64);
  EXPECT_EQ(default_candidate(small).family(), "tile");
  EXPECT_TRUE(default_candidate(small).supports(small));
  EXPECT_TRUE(default_candidate(square).supports(square));
  EXPECT_THAT(default_candidate(small).id(), HasSubstr("/direct/"));
  EXPECT_THAT(default_candidate(square).id(), ::testing::Not(HasSubstr("/direct/")));
  EXPECT_EQ(default_candidate(square, "blas").id(), "blas/openblas");
  EXPECT_EQ(default_candidate(square, "reference").id(), "reference/f64");
  const GemmProblem f64 = make_mm_problem(TensorView(dbuf.data(), DType::kF64, {8, 8}),
                                          TensorView(dbuf.data() + 64, DType::kF64, {8, 8}),
                                          TensorView(dbuf.data() + 128, DType::kF64, {8, 8}));
  EXPECT_THAT(default_candidate(f64).id(), HasSubstr("/f64/"));
  EXPECT_EQ(default_candidate(f64).isa(), best_isa());
  for (const Candidate* c : candidates_for(square)) EXPECT_TRUE(c->supports(square)) << c->id();
  for (const Candidate* c : candidates_for(square, "blas")) EXPECT_EQ(c->family(), "blas");
}

TEST(GemmCandidates, ProblemDescribesLayoutAndResolvesThreads) {
  std::vector<float> buf(1024);
  const TensorView a(buf.data(), DType::kF32, {4, 6}, {1, 4});  // transposed
  const TensorView b(buf.data() + 100, DType::kF32, {6, 5}, {10, 2});  // strided
  const TensorView out(buf.data() + 300, DType::kF32, {4, 5});
  GemmOptions o;
  o.threads = 3;
  const GemmProblem p = make_mm_problem(a, b, out, o);
  EXPECT_EQ(p.layout(), "TS");
  EXPECT_EQ(p.threads, 3);
  EXPECT_EQ(p.to_string(), "mm float32->float32 [b=1 m=4 n=5 k=6] TS alpha=1 beta=0 epilogue=none t3");
  EXPECT_EQ(make_mm_problem(a, b, out).threads, 1);  // tiny: no threads woken
}

// --------------------------------------------------------------- validation

TEST(GemmValidation, EveryMessageNamesArgumentValueAndExpectation) {
  std::vector<double> buf(4096);
  auto v = [&](DType t, std::vector<int64_t> shape, size_t at = 0) {
    return TensorView(reinterpret_cast<char*>(buf.data()) + at * 8, t, std::move(shape));
  };
  const DType f32 = DType::kF32;
  const TensorView a = v(f32, {3, 5}), b = v(f32, {5, 4}, 100), out = v(f32, {3, 4}, 200);
  expect_invalid([&] { mm(v(f32, {1, 3, 5}), b, out); }, {"'mm: a'", "float32[1, 3, 5]", "a 2-D tensor [M, K]"});
  expect_invalid([&] { mm(a, v(f32, {5}), out); }, {"'mm: b'", "a 2-D tensor [K, N]"});
  expect_invalid([&] { mm(a, b, v(f32, {12})); }, {"'mm: out'", "a 2-D tensor [M, N]"});
  expect_invalid([&] { mm(v(DType::kI32, {3, 5}), b, out); },
                 {"'mm: a.dtype'", "int32", "float32, float64, bfloat16 or float16"});
  expect_invalid([&] { mm(a, v(DType::kF64, {5, 4}), out); }, {"'mm: b.dtype'", "float64", "float32 (a's dtype)"});
  expect_invalid([&] { mm(a, b, v(DType::kBF16, {3, 4})); }, {"'mm: out.dtype'", "bfloat16", "float32 (a's dtype)"});
  expect_invalid([&] { mm(v(DType::kBF16, {3, 5}), v(DType::kBF16, {5, 4}), v(DType::kF64, {3, 4})); },
                 {"'mm: out.dtype'", "float64", "bfloat16 or float32"});
  expect_invalid([&] { mm(a, v(f32, {6, 4}), out); }, {"'mm: b'", "float32[6, 4]", "[K, N] with K = 5 (a's columns)"});
  expect_invalid([&] { mm(a, b, v(f32, {3, 5})); }, {"'mm: out'", "float32[3, 5]", "[M, N] = [3, 4]"});
  expect_invalid([&] { mm(a, b, TensorView(buf.data(), f32, {3, 4}, {4, 0})); },
                 {"'mm: out'", "strides [4, 0]", "a view whose elements do not overlap"});
  expect_invalid([&] { mm(a, b, TensorView(buf.data(), f32, {3, 4}, {2, 1})); }, {"do not overlap"});
  expect_invalid([&] { mm(TensorView(buf.data(), f32, {3, 5}, Device{DeviceType::kCUDA, 0}), b, out); },
                 {"'mm: a.device'", "cuda:0", "cpu"});
  GemmOptions o;
  o.threads = -1;
  expect_invalid([&] { mm(a, b, out, o); }, {"'mm: options.threads'", "-1", ">= 0"});
  o = {};
  o.family = "cublas";
  expect_invalid([&] { mm(a, b, out, o); }, {"'mm: options.family'", "'cublas'", "'tile', 'blas' or 'reference'"});
  o = {};
  o.candidate = "tile/none";
  expect_invalid([&] { mm(a, b, out, o); }, {"'mm: options.candidate'", "'tile/none'", "candidates_for()"});
  o.candidate = "tile/generic/f64/4x8/direct/split_n";
  expect_invalid([&] { mm(a, b, out, o); }, {"'mm: options.candidate'", "a candidate that supports mm float32"});

  const TensorView bias = v(f32, {4}, 300);
  expect_invalid([&] { addmm(v(f32, {5}), a, b, out); },
                 {"'addmm: bias'", "float32[5]", "[N] = [4], [M, 1] = [3, 1] or [M, N] = [3, 4]"});
  expect_invalid([&] { addmm(v(DType::kI8, {4}), a, b, out); }, {"'addmm: bias.dtype'", "int8"});
  expect_invalid([&] { addmm(bias, a, b, v(f32, {4, 4})); }, {"'addmm: out'", "[M, N] = [3, 4]"});

  expect_invalid([&] { bmm(a, b, out); }, {"'bmm: a'", "a 3-D tensor [B, M, K]"});
  expect_invalid([&] { bmm(v(f32, {2, 3, 5}), v(f32, {3, 5, 4}, 100), v(f32, {2, 3, 4}, 300)); },
                 {"'bmm: b'", "float32[3, 5, 4]", "B = 2 (a's batch)"});
  expect_invalid([&] { bmm(v(f32, {2, 3, 5}), v(f32, {2, 5, 4}, 100), v(f32, {1, 3, 4}, 300)); },
                 {"'bmm: out'", "[B, M, N] = [2, 3, 4]"});

  Epilogue cast;
  cast.cast(DType::kF8E4M3FN, 2.0);
  o = {};
  o.epilogue = &cast;
  expect_invalid([&] { mm(a, b, out, o); }, {"'mm: out.dtype'", "float32", "float8_e4m3fn (the epilogue's cast)"});
  Epilogue bad_bias;
  bad_bias.bias(v(f32, {3, 2}, 400));
  o.epilogue = &bad_bias;
  expect_invalid([&] { mm(a, b, out, o); },
                 {"'mm: epilogue.bias'", "float32[3, 2]", "[N] = [4], [M, 1] = [3, 1] or [M, N] = [3, 4]"});
  Epilogue bad_residual;
  bad_residual.residual(v(f32, {4, 3}, 400));
  o.epilogue = &bad_residual;
  expect_invalid([&] { mm(a, b, out, o); }, {"'mm: epilogue.residual'", "float32[4, 3]", "[M, N] = [3, 4]"});
  Epilogue bad_group;
  bad_group.reduce(Reduction::kSum, 8, v(f32, {3, 1}, 400));
  o.epilogue = &bad_group;
  expect_invalid([&] { mm(a, b, out, o); }, {"'mm: epilogue.reduce.group'", "8", "a power of two dividing N = 4"});
  Epilogue bad_reduce_out;
  bad_reduce_out.reduce(Reduction::kMax, 2, v(f32, {3, 4}, 400));
  o.epilogue = &bad_reduce_out;
  expect_invalid([&] { mm(a, b, out, o); }, {"'mm: epilogue.reduce.out'", "float32[3, 4]", "[M, N / group] = [3, 2]"});
  Epilogue shared_reduce_out;
  shared_reduce_out.reduce(Reduction::kMax, 2, v(f32, {3, 2}, 400));
  o.epilogue = &shared_reduce_out;
  expect_invalid([&] { bmm(v(f32, {2, 3, 5}), v(f32, {2, 5, 4}, 100), v(f32, {2, 3, 4}, 300), o); },
                 {"'bmm: epilogue.reduce.out'", "[B, M, N / group] = [2, 3, 2] for bmm"});
  Epilogue many;
  for (int i = 0; i < 17; ++i) many.scale(1.0);
  o.epilogue = &many;
  expect_invalid([&] { mm(a, b, out, o); }, {"'mm: epilogue'", "17 steps", "at most 16 steps"});
}

}  // namespace
}  // namespace sinew::kernels

// The ceiling probe `sinew bench peak` reports: the FLOPs it says it did are
// the 12x32 tile's over 256 steps per call, and nothing off AVX-512.
TEST(MicrokernelCeiling, CountsTheTilesFlopsOnlyWhereAvx512Runs) {
  const double flops = sinew::kernels::microkernel_f32_l1_flops(3);
  if (sinew::kernels::best_isa() == sinew::kernels::Isa::kAvx512) EXPECT_EQ(flops, 3.0 * 2 * 12 * 32 * 256);
  else EXPECT_EQ(flops, 0.0);
  EXPECT_EQ(sinew::kernels::microkernel_f32_l1_flops(0), 0.0);
}
