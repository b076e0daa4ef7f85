// The GEMM autotuner: cache round trip (a second run hits 100% with the same
// picks), corrupt / old-version / tampered files rebuilt with a warning and
// never trusted, M bucketing, what the key includes, concurrent saves,
// ranks splitting the candidates through an allgather callback, the
// confirmation round (which variants are re-timed, and the pick from both
// passes, on synthetic times), the shape spelling, and the warm dispatch
// path of mm (tuned pick, and tuning on first use with SINEW_AUTOTUNE=1).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <nlohmann/json.hpp>
#include <thread>

#include "kernels/autotune/confirm.h"
#include "sinew/core/error.h"
#include "sinew/core/log.h"
#include "sinew/kernels/autotune.h"
#include "sinew/kernels/gemm.h"

namespace sinew::kernels {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A fresh directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "sinew_autotune_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (fs::path(path_) / name).string(); }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::string path_;
};

// Collects warnings while alive.
class LogCapture {
 public:
  LogCapture() {
    set_log_sink([this](const LogRecord& r) {
      std::lock_guard<std::mutex> g(mu_);
      if (r.level <= LogLevel::kWarn) lines_.push_back(r.message);
    });
  }
  ~LogCapture() { set_log_sink(nullptr); }
  std::string all() const {
    std::lock_guard<std::mutex> g(mu_);
    std::string s;
    for (const auto& l : lines_) s += l + "\n";
    return s;
  }
  size_t count() const {
    std::lock_guard<std::mutex> g(mu_);
    return lines_.size();
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
};

// Tuning that takes milliseconds under -O0.
TuneOptions fast() {
  TuneOptions o;
  o.warmup = 1;
  o.samples = 2;
  o.min_sample_seconds = 1e-5;
  o.max_variant_seconds = 0.05;
  o.flush_caches = false;
  o.max_timed = 2;
  return o;
}

const std::vector<std::string> kSpecs = {"mm:f32:8x16x8", "addmm:f32:5x32x16:bias+relu", "mm:f32:3x24x8:NT",
                                         "bmm:f32:2x4x16x8", "mm:bf16:4x32x16"};

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

TEST(Autotune, CacheRoundTripHitsEveryShapeWithTheSamePick) {
  TempDir dir;
  const std::string path = dir.file("tune.json");
  std::vector<TuneResult> first;
  {
    GemmTuner t(path);
    for (const auto& s : kSpecs) {
      first.push_back(t.tune(GemmShape::parse(s), fast()));
      EXPECT_FALSE(first.back().cached) << s;
      EXPECT_FALSE(first.back().variants.empty()) << s;
    }
    EXPECT_EQ(t.stats().entries, kSpecs.size());
    t.save();
  }
  const nlohmann::json j = read_json(path);
  EXPECT_EQ(j["format"], "sinew-gemm-tune");
  EXPECT_EQ(j["version"], kTuneCacheVersion);
  EXPECT_EQ(j["entries"].size(), kSpecs.size());

  GemmTuner again(path);
  EXPECT_EQ(again.stats().entries, kSpecs.size());
  for (size_t i = 0; i < kSpecs.size(); ++i) {
    const TuneResult r = again.tune(GemmShape::parse(kSpecs[i]), fast());
    EXPECT_TRUE(r.cached) << kSpecs[i];
    EXPECT_TRUE(r.variants.empty());
    EXPECT_EQ(r.candidate, first[i].candidate) << kSpecs[i];
    EXPECT_EQ(r.mode, first[i].mode) << kSpecs[i];
    EXPECT_EQ(r.key, first[i].key);
    const GemmWorkload w(GemmShape::parse(kSpecs[i]));
    const GemmTuner::Pick p = again.lookup(w.problem());
    ASSERT_NE(p.candidate, nullptr) << kSpecs[i];
    EXPECT_EQ(p.candidate->id(), first[i].candidate);
  }
  EXPECT_EQ(again.stats().hits, 2 * kSpecs.size());  // every tune() and every lookup()
  EXPECT_EQ(again.stats().misses, 0u);
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"tune.json", "tune.json.lock"}));  // no temporaries left
}

TEST(Autotune, TuningTimesSurvivorsAndPicksTheFastestMeasured) {
  GemmTuner t("");
  TuneOptions o = fast();
  const TuneResult r = t.tune(GemmShape::parse("addmm:f32:16x64x32:bias+gelu_tanh"), o);
  int timed = 0;
  double best = 1e300;
  bool fused = false, unfused = false;
  for (const TuneVariant& v : r.variants) {
    EXPECT_NE(v.family, "reference");
    EXPECT_GT(v.model_us, 0);
    if (!v.survivor) {
      EXPECT_TRUE(std::isnan(v.measured_us)) << v.candidate;
      EXPECT_TRUE(std::isnan(v.confirmed_us)) << v.candidate;
      continue;
    }
    ++timed;
    best = std::min(best, v.best_us());
    fused |= v.mode == EpilogueMode::kFused;
    unfused |= v.mode == EpilogueMode::kUnfused;
  }
  EXPECT_GE(timed, 2);
  EXPECT_LT(timed, static_cast<int>(r.variants.size()));  // the cost model screened some out
  EXPECT_TRUE(fused && unfused);  // the epilogue mode is decided by timing both
  EXPECT_EQ(r.us, best);
  // Exactly the confirmation list of the first pass was timed again.
  std::vector<TuneVariant> first = r.variants;
  for (TuneVariant& v : first) v.confirmed_us = std::nan("");
  std::set<size_t> listed;
  for (size_t i : tune::confirmation_list(first, o)) listed.insert(i);
  for (size_t i = 0; i < r.variants.size(); ++i)
    EXPECT_EQ(std::isfinite(r.variants[i].confirmed_us), listed.count(i) == 1) << r.variants[i].candidate;
  const TuneVariant& pick = r.variants[tune::pick_fastest(r.variants)];
  EXPECT_EQ(r.candidate, pick.candidate);
  EXPECT_EQ(r.mode, pick.mode);

  o.exhaustive = true;
  o.retune = true;
  const TuneResult all = t.tune(GemmShape::parse("addmm:f32:16x64x32:bias+gelu_tanh"), o);
  for (const TuneVariant& v : all.variants) EXPECT_FALSE(std::isnan(v.measured_us)) << v.candidate;
}

// K below every kc: the packed blockings of one kernel differ only in what
// the model does not see, so their estimates tie. A tie with the last of
// the best max_timed is timed too, rather than dropped by the sort order.
TEST(Autotune, PrescreenKeepsVariantsTiedWithTheCutoff) {
  GemmTuner t("");
  int ties_beyond = 0;
  for (int max_timed = 1; max_timed <= 8; ++max_timed) {
    TuneOptions o = fast();
    o.max_timed = max_timed;
    o.retune = true;
    const TuneResult r = t.tune(GemmShape::parse("mm:f32:64x512x32"), o);
    ASSERT_GE(r.variants.size(), static_cast<size_t>(max_timed));
    const double cutoff = r.variants[max_timed - 1].model_us;
    for (size_t i = 0; i < r.variants.size(); ++i) {
      const TuneVariant& v = r.variants[i];
      if (static_cast<int>(i) < max_timed || v.model_us <= cutoff * 1.005) {
        EXPECT_TRUE(v.survivor) << "max_timed " << max_timed << ": " << v.candidate;
        ties_beyond += static_cast<int>(i) >= max_timed ? 1 : 0;
      }
    }
  }
  EXPECT_GT(ties_beyond, 0) << "no tie at any cutoff: the test checks nothing";
}

TEST(Autotune, CorruptCacheIsRebuiltWithAWarning) {
  TempDir dir;
  const std::string path = dir.file("tune.json");
  write_text(path, "{\"format\": \"sinew-gemm-tune\", \"version\": 1, \"entries\": {");
  {
    LogCapture log;
    GemmTuner t(path);
    EXPECT_THAT(log.all(), HasSubstr(path));
    EXPECT_THAT(log.all(), HasSubstr("not valid JSON"));
    EXPECT_EQ(t.stats().entries, 0u);
    t.tune(GemmShape::parse("mm:f32:8x16x8"), fast());
    t.save();
  }
  const nlohmann::json j = read_json(path);
  EXPECT_EQ(j["version"], kTuneCacheVersion);
  EXPECT_EQ(j["entries"].size(), 1u);
  LogCapture log;
  GemmTuner t(path);
  EXPECT_EQ(log.count(), 0u) << log.all();
  EXPECT_EQ(t.stats().entries, 1u);

  // Not a tuning cache at all.
  write_text(path, "[1, 2, 3]");
  LogCapture log2;
  GemmTuner t2(path);
  EXPECT_THAT(log2.all(), HasSubstr("not a sinew GEMM tuning cache"));
  EXPECT_EQ(t2.stats().entries, 0u);
}

TEST(Autotune, TamperedEntriesAreNeverTrusted) {
  TempDir dir;
  const std::string path = dir.file("tune.json");
  {
    GemmTuner t(path);
    t.tune(GemmShape::parse("mm:f32:8x16x8"), fast());
    t.tune(GemmShape::parse("mm:f32:8x16x16"), fast());
    t.tune(GemmShape::parse("mm:f32:8x16x24"), fast());
    t.save();
  }
  nlohmann::json j = read_json(path);
  auto it = j["entries"].begin();
  it.value()["candidate"] = "tile/avx512/f32/99x99/direct/split_n";  // no such kernel
  ++it;
  it.value()["n"] = 17;  // the fields no longer match the key
  ++it;
  it.value().erase("us");
  write_text(path, j.dump());

  LogCapture log;
  GemmTuner t(path);
  EXPECT_THAT(log.all(), HasSubstr("ignored 3 malformed entries"));
  EXPECT_EQ(t.stats().entries, 0u);
  const GemmWorkload w(GemmShape::parse("mm:f32:8x16x8"));
  EXPECT_EQ(t.lookup(w.problem()).candidate, nullptr);
  // Saving drops them from the file.
  t.tune(GemmShape::parse("mm:f32:8x16x8"), fast());
  t.save();
  EXPECT_EQ(read_json(path)["entries"].size(), 1u);
}

TEST(Autotune, OtherVersionCacheIsIgnoredAndReplaced) {
  TempDir dir;
  const std::string path = dir.file("tune.json");
  {
    GemmTuner t(path);
    t.tune(GemmShape::parse("mm:f32:8x16x8"), fast());
    t.save();
  }
  nlohmann::json j = read_json(path);
  j["version"] = kTuneCacheVersion + 998;
  write_text(path, j.dump());
  {
    LogCapture log;
    GemmTuner t(path);
    EXPECT_THAT(log.all(), HasSubstr(fmt::format("format version {}", kTuneCacheVersion + 998)));
    EXPECT_EQ(t.stats().entries, 0u);
    const GemmWorkload w(GemmShape::parse("mm:f32:8x16x8"));
    EXPECT_EQ(t.lookup(w.problem()).candidate, nullptr);
    t.tune(GemmShape::parse("mm:f32:4x16x8"), fast());
    t.save();
  }
  j = read_json(path);
  EXPECT_EQ(j["version"], kTuneCacheVersion);
  ASSERT_EQ(j["entries"].size(), 1u);  // the old file's entry is gone
  EXPECT_EQ(j["entries"].begin().value()["m"], 4);
}

TEST(Autotune, EntriesOfAnotherIsaOrLibraryVersionAreNotUsed) {
  TempDir dir;
  const std::string path = dir.file("tune.json");
  {
    GemmTuner t(path);
    t.tune(GemmShape::parse("mm:f32:8x16x8"), fast());
    t.tune(GemmShape::parse("mm:f32:8x16x16"), fast());
    t.save();
  }
  nlohmann::json j = read_json(path);
  auto it = j["entries"].begin();
  it.value()["isa"] = tune_isa_tag() == "generic" ? "avx2" : "generic";
  (++it).value()["library"] = "0.0.0-other";
  write_text(path, j.dump());
  LogCapture log;
  GemmTuner t(path);
  EXPECT_EQ(log.count(), 0u) << log.all();  // another build's entries are not errors
  EXPECT_EQ(t.stats().entries, 0u);
  t.tune(GemmShape::parse("mm:f32:8x16x32"), fast());
  t.save();
  EXPECT_EQ(read_json(path)["entries"].size(), 3u);  // and are kept for that build
}

TEST(Autotune, MIsBucketedToPowersOfTwo) {
  EXPECT_EQ(tune_bucket(0), 0);
  EXPECT_EQ(tune_bucket(1), 1);
  EXPECT_EQ(tune_bucket(2), 2);
  EXPECT_EQ(tune_bucket(3), 4);
  EXPECT_EQ(tune_bucket(100), 128);
  EXPECT_EQ(tune_bucket(128), 128);
  EXPECT_EQ(tune_bucket(129), 256);
  auto key = [](const std::string& s) { return tune_key(GemmWorkload(GemmShape::parse(s)).problem()); };
  EXPECT_EQ(key("mm:f32:100x64x32"), key("mm:f32:128x64x32"));
  EXPECT_EQ(key("mm:f32:65x64x32"), key("mm:f32:128x64x32"));
  EXPECT_NE(key("mm:f32:129x64x32"), key("mm:f32:128x64x32"));
  EXPECT_NE(key("mm:f32:128x65x32"), key("mm:f32:128x64x32"));  // N and K are exact
  EXPECT_NE(key("mm:f32:128x64x33"), key("mm:f32:128x64x32"));
  EXPECT_THAT(key("mm:f32:100x64x32"), HasSubstr("|m128|n64|k32|"));
  EXPECT_EQ(key("bmm:f32:3x4x8x8"), key("bmm:f32:4x4x8x8"));  // batch is bucketed too

  GemmTuner t("");
  const TuneResult r = t.tune(GemmShape::parse("mm:f32:100x64x32"), fast());
  const GemmWorkload same(GemmShape::parse("mm:f32:70x64x32"));
  const GemmWorkload other(GemmShape::parse("mm:f32:129x64x32"));
  ASSERT_NE(t.lookup(same.problem()).candidate, nullptr);
  EXPECT_EQ(t.lookup(same.problem()).candidate->id(), r.candidate);
  EXPECT_EQ(t.lookup(other.problem()).candidate, nullptr);
}

TEST(Autotune, KeyIncludesEpilogueThreadsLayoutAlignmentAndIsa) {
  auto key = [](const std::string& s, int threads = 1, int align = 64) {
    GemmShape shape = GemmShape::parse(s, threads);
    shape.align = align;
    return tune_key(GemmWorkload(shape).problem());
  };
  const std::string base = key("mm:f32:64x64x64");
  EXPECT_THAT(base, HasSubstr("mm|float32>float32|b1|m64|n64|k64|NN|a64|prior=none|e=none|"));
  EXPECT_THAT(base, HasSubstr("|" + tune_isa_tag() + "|t1|"));
  EXPECT_NE(key("mm:f32:64x64x64:relu"), base);
  EXPECT_NE(key("mm:f32:64x64x64:gelu_tanh"), key("mm:f32:64x64x64:relu"));
  EXPECT_THAT(key("mm:f32:64x64x64:bias_row+gelu_tanh+amax32"), HasSubstr("|e=bias_row+gelu_tanh+amax32|"));
  EXPECT_THAT(key("mm:f32:64x64x64", 2), HasSubstr("|t2|"));
  EXPECT_THAT(key("mm:f32:64x64x64:TN"), HasSubstr("|TN|"));
  EXPECT_THAT(key("mm:f32:64x64x64", 1, 4), HasSubstr("|a4|"));
  EXPECT_THAT(key("mm:f32:64x64x64", 1, 16), HasSubstr("|a16|"));
  EXPECT_THAT(key("addmm:f32:64x64x64:bias_col"), HasSubstr("addmm|float32>float32|b1|m64|n64|k64|NN|a64|prior=col|"));
  EXPECT_THAT(key("mm:bf16:64x64x64"), HasSubstr("|bfloat16>bfloat16|"));
  EXPECT_THAT(key("mm:bf16>f32:64x64x64"), HasSubstr("|bfloat16>float32|"));
}

TEST(Autotune, ShapeOfAProblemReproducesItsKey) {
  // A user's problem: transposed, strided, misaligned, accumulating, with an epilogue.
  std::vector<float> a(1 + 40 * 13), b(2 * 13 * 33 + 40), out(1 + 40 * 32), bias(32);
  TensorView av(a.data() + 1, DType::kF32, {40, 13}, {1, 40});          // T, 4-byte aligned
  TensorView bv(b.data(), DType::kF32, {13, 32}, {66, 2});              // S
  TensorView ov(out.data() + 1, DType::kF32, {40, 32}, {32, 1});
  Epilogue e;
  e.bias(TensorView(bias.data(), DType::kF32, {32})).activation(Activation::kSilu);
  GemmOptions o;
  o.beta = 1;
  o.epilogue = &e;
  o.threads = 2;
  const GemmProblem p = make_mm_problem(av, bv, ov, o);
  const GemmShape s = GemmShape::of(p);
  EXPECT_EQ(s.to_string(), "mm:f32:40x32x13:bias_row+silu:TS");
  EXPECT_TRUE(s.accumulate);
  EXPECT_EQ(s.threads, 2);
  EXPECT_EQ(tune_key(GemmWorkload(s).problem()), tune_key(p));
  EXPECT_THAT(tune_key(p), HasSubstr("|TS|a4|prior=out|e=bias_row+silu|"));
}

TEST(Autotune, ShapeSpellingParsesAndRejectsWithMessages) {
  const GemmShape s = GemmShape::parse("addmm:bf16:128x3072x768:bias+gelu_tanh", 3);
  EXPECT_EQ(s.op, GemmOp::kAddmm);
  EXPECT_EQ(s.in_dtype, DType::kBF16);
  EXPECT_EQ(s.out_dtype, DType::kBF16);
  EXPECT_EQ(s.m, 128);
  EXPECT_EQ(s.n, 3072);
  EXPECT_EQ(s.k, 768);
  EXPECT_EQ(s.addmm_bias, BiasKind::kRow);
  EXPECT_EQ(s.epilogue, "gelu_tanh");
  EXPECT_EQ(s.threads, 3);
  EXPECT_EQ(s.to_string(), "addmm:bf16:128x3072x768:bias_row+gelu_tanh");
  EXPECT_EQ(GemmShape::parse("bmm:f16>f32:4x8x16x32:TT").to_string(), "bmm:f16>f32:4x8x16x32:TT");
  EXPECT_EQ(GemmShape::parse("mm:f32:8x256x8:cast_bf16+amax128").out_dtype, DType::kBF16);
  EXPECT_EQ(GemmShape::parse("mm:f32:8x256x8:amax128+scale").epilogue, "scale+amax128");

  auto message = [](const std::string& spec) {
    try {
      GemmShape::parse(spec);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message("mm:f32:12x12"), HasSubstr("<M>x<N>x<K>"));
  EXPECT_THAT(message("gemm:f32:1x2x3"), HasSubstr("mm, addmm or bmm"));
  EXPECT_THAT(message("mm:int8:1x2x3"), HasSubstr("f32, f64, bf16 or f16"));
  EXPECT_THAT(message("mm:f32:4x4x4:gelu"), HasSubstr("'gelu'"));
  EXPECT_THAT(message("mm:f32:4x-4x4"), HasSubstr("sizes >= 0"));
  EXPECT_THAT(message("mm"), HasSubstr("<op>:<dtype>"));
}

TEST(Autotune, ConcurrentSavesMergeEveryProcessEntries) {
  TempDir dir;
  const std::string path = dir.file("sub/tune.json");  // the directory is created
  GemmTuner a(path), b(path);
  a.tune(GemmShape::parse("mm:f32:8x16x8"), fast());
  b.tune(GemmShape::parse("mm:f32:8x16x16"), fast());
  for (int round = 0; round < 5; ++round) {
    std::thread ta([&] { a.save(); });
    std::thread tb([&] { b.save(); });
    ta.join();
    tb.join();
  }
  GemmTuner c(path);
  EXPECT_EQ(c.stats().entries, 2u);
  a.reload();  // sees b's entry too
  EXPECT_EQ(a.stats().entries, 2u);
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.file("sub"))) {
    EXPECT_THAT(e.path().filename().string(), ::testing::AnyOf("tune.json", "tune.json.lock"));
    ++files;
  }
  EXPECT_EQ(files, 2u);
}

// A first-pass variant with a synthetic time (NaN: not timed).
TuneVariant timed_variant(const std::string& candidate, const std::string& family, EpilogueMode mode, double us) {
  TuneVariant v;
  v.candidate = candidate;
  v.family = family;
  v.mode = mode;
  v.survivor = !std::isnan(us);
  v.measured_us = us;
  return v;
}

constexpr EpilogueMode kFused = EpilogueMode::kFused, kUnfused = EpilogueMode::kUnfused, kAuto = EpilogueMode::kAuto;

TEST(AutotuneConfirm, ListsTheLeadersThePairAndEachFamilysBestWithinTheirBands) {
  const std::vector<TuneVariant> vs = {
      timed_variant("tile/a", "tile", kFused, 100),     // 0: the first pass's best
      timed_variant("tile/a", "tile", kUnfused, 180),   // 1: its other mode, far behind: still confirmed
      timed_variant("tile/b", "tile", kFused, 110),     // 2: within 15%
      timed_variant("tile/c", "tile", kFused, 114),     // 3: within 15%, after 2
      timed_variant("blas/x", "blas", kAuto, 140),      // 4: the blas family's best, within 50%
      timed_variant("tile/d", "tile", kFused, 114),     // 5: ties with 3, listed after it
      timed_variant("tile/e", "tile", kFused, NAN),     // 6: not timed
      timed_variant("tile/f", "tile", kFused, 200),     // 7: outside every band
      timed_variant("blas/y", "blas", kAuto, 141),      // 8: not its family's best
  };
  TuneOptions o;  // band 15%, family band 50%, 4 in all
  EXPECT_EQ(tune::confirmation_list(vs, o), (std::vector<size_t>{0, 2, 4, 1}));
  o.max_confirmed = 6;
  EXPECT_EQ(tune::confirmation_list(vs, o), (std::vector<size_t>{0, 2, 3, 5, 4, 1}));
  o.max_confirmed = 100;  // the band, not the count, stops it
  EXPECT_EQ(tune::confirmation_list(vs, o), (std::vector<size_t>{0, 2, 3, 5, 4, 1}));
  o.max_confirmed = 1;  // the pair and the other families are always listed
  EXPECT_EQ(tune::confirmation_list(vs, o), (std::vector<size_t>{0, 4, 1}));
  o.max_confirmed = 4;
  o.confirm_family_band = 0.3;  // blas at 1.4x the best is out now
  EXPECT_EQ(tune::confirmation_list(vs, o), (std::vector<size_t>{0, 2, 3, 1}));
  o.confirm_rounds = 0;
  EXPECT_TRUE(tune::confirmation_list(vs, o).empty());

  // Nothing to decide between: one variant timed, or a leader far ahead
  // with no other mode and no other family close.
  TuneOptions d;
  EXPECT_TRUE(tune::confirmation_list({vs[0], vs[6]}, d).empty());
  EXPECT_TRUE(tune::confirmation_list({timed_variant("tile/a", "tile", kAuto, 100),
                                       timed_variant("tile/b", "tile", kAuto, 120),
                                       timed_variant("blas/x", "blas", kAuto, 151)},
                                      d)
                  .empty());
  // The order does not depend on where the best sits in the list.
  EXPECT_EQ(tune::confirmation_list({vs[7], vs[2], vs[0]}, d), (std::vector<size_t>{2, 1}));
}

TEST(AutotuneConfirm, AWinnerSlowedByANoisyMomentWinsAfterConfirmation) {
  // "a" really takes ~100 us, but load hit its first-pass samples.
  std::vector<TuneVariant> vs = {timed_variant("tile/a", "tile", kAuto, 135),
                                 timed_variant("tile/b", "tile", kAuto, 120),
                                 timed_variant("blas/x", "blas", kAuto, 170),
                                 timed_variant("tile/c", "tile", kAuto, 200)};
  EXPECT_EQ(tune::pick_fastest(vs), 1u);  // the first pass alone picks b
  const std::vector<size_t> list = tune::confirmation_list(vs, TuneOptions{});
  EXPECT_EQ(list, (std::vector<size_t>{1, 0, 2}));  // c is out of every band: not timed again
  vs[0].confirmed_us = 101;
  vs[1].confirmed_us = 125;  // a slower confirmation sample does not count against b
  vs[2].confirmed_us = 150;
  EXPECT_EQ(tune::pick_fastest(vs), 0u);
  EXPECT_EQ(vs[0].best_us(), 101);
  EXPECT_EQ(vs[1].best_us(), 120);
  // A contender that was only unlucky by a little does not win on its
  // confirmation alone: b's first pass still counts.
  vs[0].confirmed_us = 121;
  EXPECT_EQ(tune::pick_fastest(vs), 1u);

  // Ties go to the earlier variant, the order every rank lists them in.
  vs[0].confirmed_us = 120;
  EXPECT_EQ(tune::pick_fastest(vs), 0u);
  std::swap(vs[0], vs[1]);
  EXPECT_EQ(tune::pick_fastest(vs), 0u);
  EXPECT_EQ(vs[0].candidate, "tile/b");
  // Untimed variants never win; nothing timed picks nothing.
  EXPECT_EQ(tune::pick_fastest({timed_variant("x", "tile", kAuto, NAN), timed_variant("y", "tile", kAuto, 3)}), 1u);
  EXPECT_EQ(tune::pick_fastest({timed_variant("x", "tile", kAuto, NAN)}), 1u);
}

TEST(AutotuneConfirm, RoundsStayWithinTheTimeBounds) {
  std::vector<TuneVariant> vs;
  for (const char* c : {"a", "b", "c", "d"}) vs.push_back(timed_variant(c, "tile", kAuto, 1000));  // 1 ms a call
  const std::vector<size_t> list = {0, 1, 2, 3};
  TuneOptions o;
  o.min_sample_seconds = 1e-3;  // one call a sample: 4 ms a round
  EXPECT_EQ(tune::sample_reps(1e-3, o), 1);
  EXPECT_EQ(tune::sample_reps(1e-4, o), 10);
  EXPECT_EQ(tune::confirmation_rounds(vs, list, o, 1.0), o.confirm_rounds);
  EXPECT_EQ(tune::confirmation_rounds(vs, list, o, 0.02), 2);   // half of 20 ms: two 4 ms rounds
  EXPECT_EQ(tune::confirmation_rounds(vs, list, o, 0.001), 1);  // always one
  o.max_variant_seconds = 0.0025;                               // 2 samples of a variant at most
  EXPECT_EQ(tune::confirmation_rounds(vs, list, o, 1.0), 2);
  o.max_variant_seconds = 1;
  o.min_sample_seconds = 5e-3;  // 5 calls a sample: 20 ms a round
  EXPECT_EQ(tune::confirmation_rounds(vs, list, o, 0.1), 2);
}

// A fake collective: every rank's thread blocks until all have contributed.
class FakeAllgather {
 public:
  explicit FakeAllgather(int world) : world_(world), parts_(static_cast<size_t>(world)) {}
  std::vector<double> run(int rank, const std::vector<double>& mine) {
    std::unique_lock<std::mutex> lock(mu_);
    const int gen = generation_;
    parts_[static_cast<size_t>(rank)] = mine;
    if (++arrived_ == world_) {
      all_.clear();
      for (const auto& p : parts_) all_.insert(all_.end(), p.begin(), p.end());
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else if (!cv_.wait_for(lock, std::chrono::seconds(20), [&] { return generation_ != gen; })) {
      throw TimeoutError("fake allgather: a rank never arrived");
    }
    return all_;
  }

 private:
  int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<double>> parts_;
  std::vector<double> all_;
  int arrived_ = 0, generation_ = 0;
};

TEST(Autotune, RanksSplitTheCandidatesAndAgreeOnThePick) {
  constexpr int kWorld = 3;
  FakeAllgather net(kWorld);
  std::vector<TuneResult> results(kWorld);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kWorld; ++r)
    ranks.emplace_back([&, r] {
      GemmTuner t("");
      TuneOptions o = fast();
      o.max_timed = 5;
      o.confirm_band = 1e6;  // every timed variant is a contender
      o.max_confirmed = 3;
      o.group.rank = r;
      o.group.world = kWorld;
      o.group.allgather = [&net, r](const std::vector<double>& mine) { return net.run(r, mine); };
      results[static_cast<size_t>(r)] = t.tune(GemmShape::parse("addmm:f32:16x48x32:bias+relu"), o);
    });
  for (auto& t : ranks) t.join();
  for (int r = 1; r < kWorld; ++r) {
    EXPECT_EQ(results[r].candidate, results[0].candidate);
    EXPECT_EQ(results[r].mode, results[0].mode);
    EXPECT_EQ(results[r].us, results[0].us);
    ASSERT_EQ(results[r].variants.size(), results[0].variants.size());
    for (size_t i = 0; i < results[0].variants.size(); ++i) {
      const TuneVariant &v = results[r].variants[i], &v0 = results[0].variants[i];
      for (auto us : {&TuneVariant::measured_us, &TuneVariant::confirmed_us}) {
        EXPECT_EQ(std::isnan(v.*us), std::isnan(v0.*us)) << i;
        if (!std::isnan(v0.*us)) EXPECT_EQ(v.*us, v0.*us) << i;
      }
    }
  }
  // At least the three fastest of the first pass were confirmed.
  int confirmed = 0;
  for (const TuneVariant& v : results[0].variants) confirmed += std::isfinite(v.confirmed_us) ? 1 : 0;
  EXPECT_GE(confirmed, 3);
  // Each survivor was timed by exactly one rank, in turn.
  int i = 0;
  std::set<int> timers;
  for (const TuneVariant& v : results[0].variants) {
    if (!v.survivor) continue;
    EXPECT_EQ(v.timed_by, i % kWorld) << v.candidate;
    EXPECT_FALSE(std::isnan(v.measured_us));
    timers.insert(v.timed_by);
    ++i;
  }
  EXPECT_GE(i, kWorld);
  EXPECT_EQ(timers.size(), static_cast<size_t>(kWorld));

  // Ranks that list other candidates are refused, not silently mixed.
  GemmTuner t("");
  TuneOptions o = fast();
  o.group.rank = 0;
  o.group.world = 2;
  o.group.allgather = [](const std::vector<double>& mine) {
    std::vector<double> all = mine;
    all.insert(all.end(), mine.begin(), mine.end());
    all[mine.size()] += 1;  // rank 1's list differs
    return all;
  };
  try {
    t.tune(GemmShape::parse("mm:f32:8x16x8"), o);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 1 listed other candidates than rank 0"));
  }
  // ... and so are ranks that agree on the first pass but would confirm
  // other variants (other options): the second allgather always runs.
  int calls = 0;
  o.group.allgather = [&calls](const std::vector<double>& mine) {
    std::vector<double> all = mine;
    all.insert(all.end(), mine.begin(), mine.end());
    if (++calls == 2) all[mine.size()] += 1;
    return all;
  };
  o.confirm_rounds = 0;  // no list on this rank: the allgather still runs
  try {
    t.tune(GemmShape::parse("mm:f32:8x16x8"), o);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 1 listed other candidates than rank 0"));
  }
  EXPECT_EQ(calls, 2);
  o.group.allgather = nullptr;
  EXPECT_THROW(t.tune(GemmShape::parse("mm:f32:8x16x8"), o), InvalidArgument);
}

TEST(Autotune, MmUsesTheTunedPickAndTunesOnFirstUse) {
  TempDir dir;
  const std::string path = dir.file("global.json");
  // Pre-fill with a pick the heuristic would never make (the blas family),
  // so that the dispatch is seen to follow the cache.
  {
    GemmTuner t(path);
    TuneOptions o = fast();
    o.family = "blas";
    EXPECT_EQ(t.tune(GemmShape::parse("mm:f32:24x40x16"), o).candidate, "blas/openblas");
    t.save();
  }
  ::setenv("SINEW_TUNE_CACHE", path.c_str(), 1);
  ::setenv("SINEW_AUTOTUNE", "1", 1);
  GemmTuner& g = GemmTuner::global();
  ASSERT_EQ(g.cache_path(), path) << "the global tuner was created before this test set SINEW_TUNE_CACHE";
  ASSERT_EQ(g.stats().entries, 1u);

  GemmWorkload w(GemmShape::parse("mm:f32:24x40x16"));
  std::vector<float> want(24 * 40);
  TensorView wv(want.data(), DType::kF32, {24, 40});
  mm(w.a(), w.b(), wv, {.family = "reference"});
  const auto before = g.stats();
  mm(w.a(), w.b(), w.out());  // the workload's output has the tuned alignment
  EXPECT_EQ(g.stats().hits, before.hits + 1);
  EXPECT_EQ(g.lookup(w.problem()).candidate->id(), "blas/openblas");
  const auto* got = static_cast<const float*>(w.out().data());
  const int64_t ld = w.out().strides()[0];  // rows padded to the 64-byte alignment
  for (int64_t i = 0; i < 24; ++i)
    for (int64_t j = 0; j < 40; ++j) ASSERT_NEAR(got[i * ld + j], want[static_cast<size_t>(i * 40 + j)], 1e-4) << i << "," << j;

  // The warm path, many times: every lookup hits, nothing is tuned again.
  for (int i = 0; i < 2000; ++i) ASSERT_NE(g.lookup(w.problem()).candidate, nullptr);
  EXPECT_EQ(g.stats().entries, 1u);

  // A new problem class is tuned on first use and saved.
  GemmWorkload fresh(GemmShape::parse("mm:f32:3x20x12"));
  mm(fresh.a(), fresh.b(), fresh.out());
  EXPECT_EQ(g.stats().entries, 2u);
  EXPECT_NE(g.lookup(fresh.problem()).candidate, nullptr);
  EXPECT_EQ(read_json(path)["entries"].size(), 2u);
  // Pinning a family bypasses the tuner.
  const auto pinned = g.stats();
  mm(w.a(), w.b(), w.out(), {.family = "tile"});
  EXPECT_EQ(g.stats().hits, pinned.hits);
  ::unsetenv("SINEW_TUNE_CACHE");
  ::unsetenv("SINEW_AUTOTUNE");
}

}  // namespace
}  // namespace sinew::kernels
