// `sinew bench gemm`. Cases are <op>/<dtype>/<M>x<N>x<K>/<epilogue or none>/t<threads>:
//  - mm f32 and bf16: squares 256..4096, and the MLP projections of a
//    768/3072 and a 4096/11008 transformer (up: N = ffn, K = d; down: N = d,
//    K = ffn) at M = 1, 8, 128, 2048;
//  - addmm f32 with a row bias and GELU (tanh) on the up projections:
//    sinew's tuned pick beside OpenBLAS + the bias broadcast + a vectorized
//    GELU pass (what an unfused framework runs), and the pick's own fused
//    and unfused modes;
//  - scaled_mm with fp8 e4m3 (tensorwise) and NVFP4 operands at M = 128, 2048;
//  - gemv (the decode path, M = 1 and 8) with f32, bf16, fp8 e4m3 (rowwise)
//    and NVFP4 weights.
// Impls: `sinew` (mm/addmm through the public API, which dispatches to the
// autotuned pick), `sinew-tile` / `sinew-blas` (each family's best variant
// from the tuning), `openblas` (CBLAS called directly; for bf16 and the
// low-precision cases, sgemm/sgemv on f32 copies of the same shape, as
// OpenBLAS 0.3.21 has no bf16 GEMM), `blis` (f32 mm). Metrics: gflops,
// frac_of_peak (of the FMA peak measured in this run: the bf16 dot peak for
// bf16, the f32 FMA peak otherwise), GBps and frac_of_triad where the case
// is memory-bound (M <= 8), speedup_vs_f32 for quantized GEMV weights.
// Each figure is the fastest of samples that interleave the impls (with a
// pause after OpenBLAS/BLIS at 2 threads, whose idle threads spin), after a
// warm-up call; a sample is one call of 5 ms or more for mm / addmm /
// scaled_mm (up to 10 samples), calls through the weight copies for 50 ms
// for GEMV (up to 5); tuning happens before timing and is not timed. Then: the
// tuner's pick against the exhaustive best on shapes the cost model was not
// fitted on, and the warm dispatch cost.
#include "gemm_bench.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <thread>

#include "gemm_peers.h"
#include "peak_bench.h"
#include "self_exe.h"
#include "sinew/core/error.h"
#include "sinew/kernels/autotune.h"
#include "sinew/kernels/cost_model.h"
#include "sinew/kernels/cpu_features.h"
#include "sinew/kernels/gemm.h"
#include "sinew/kernels/gemv.h"
#include "sinew/kernels/quantize.h"
#include "sinew/kernels/scaled_mm.h"

namespace sinew::bench {
namespace {

using namespace sinew::kernels;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Timing {
  double sample_s;  // a sample repeats the call until about this long
  int samples;      // at most
  double budget_s;  // per case and impl set, beyond the first sample
};

struct Impl {
  std::string name;
  std::function<void()> run;
  // Leaves its own threads spinning after a call (OpenBLAS, BLIS): the next
  // impl waits them out when it runs on several threads.
  bool spins = false;
};

// Seconds per call of each impl: the fastest of samples that interleave
// the impls, so that load changes on a shared machine hit them alike and
// only the least disturbed sample of each counts.
std::map<std::string, double> time_impls(const std::vector<Impl>& impls, int threads, const Timing& tm) {
  const size_t n = impls.size();
  std::vector<std::vector<double>> t(n);
  std::vector<int> reps(n);
  double round = 0;
  // After waiting out a spinning impl, the next one first runs untimed for
  // kWarmSeconds (at least one call): on this VM the cores idle during the
  // wait and then ran the first calls slower (1024^3 on two threads, one
  // call after 120 ms asleep: 421 GFLOP/s best of 20, after a further 20 ms
  // of spinning 434, back to back 441), while the FMA peak it is compared
  // with is measured running. Every impl gets the same warm-up.
  constexpr double kWarmSeconds = 0.02;
  auto settle = [&](size_t prev, size_t next) {
    if (threads > 1 && impls[prev].spins) {
      std::this_thread::sleep_for(std::chrono::milliseconds(120));
      const auto w0 = Clock::now();
      do impls[next].run();
      while (since(w0) < kWarmSeconds);
    }
  };
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) settle(i - 1, i);
    impls[i].run();  // warm-up: page faults, packing buffers, thread start
    const auto t0 = Clock::now();
    impls[i].run();
    const double once = since(t0);
    t[i].push_back(once);
    reps[i] = static_cast<int>(std::clamp(std::ceil(tm.sample_s / std::max(once, 1e-9)), 1.0, 1e4));
    round += once * reps[i];
  }
  const int samples = static_cast<int>(std::clamp(std::floor(tm.budget_s / std::max(round, 1e-9)), 1.0, 1.0 * tm.samples));
  for (int s = 0; s < samples; ++s)
    for (size_t i = 0; i < n; ++i) {
      settle(i == 0 ? n - 1 : i - 1, i);
      const auto t0 = Clock::now();
      for (int r = 0; r < reps[i]; ++r) impls[i].run();
      t[i].push_back(since(t0) / reps[i]);
    }
  std::map<std::string, double> out;
  for (size_t i = 0; i < n; ++i) out[impls[i].name] = *std::min_element(t[i].begin(), t[i].end());
  return out;
}

std::string case_name(const std::string& op, const std::string& dtype, int64_t m, int64_t n, int64_t k,
                      const std::string& epi, int threads) {
  return fmt::format("{}/{}/{}x{}x{}/{}/t{}", op, dtype, m, n, k, epi, threads);
}

std::vector<float> random_floats(int64_t count, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) x = d(g);
  return v;
}

// A [rows, cols] f32 matrix quantized with owned storage.
struct Quantized {
  std::vector<uint8_t> data, scale;
  QuantizedMatrix q;

  Quantized(const std::vector<float>& x, int64_t rows, int64_t cols, DType elem, ScaleRecipe r) {
    const ScaleSpec spec = scale_spec(r, ScaleLayout::kRowMajor, rows, cols);
    int64_t extent = 1;
    for (size_t i = 0; i < spec.shape.size(); ++i) extent += (spec.shape[i] - 1) * spec.strides[i];
    const int64_t dc = elem == DType::kU8 ? cols / 2 : cols;
    data.resize(static_cast<size_t>(rows * dc));
    scale.resize(static_cast<size_t>(std::max<int64_t>(extent, 1)) * dtype_size(spec.dtype));
    const TensorView xv(const_cast<float*>(x.data()), DType::kF32, {rows, cols});
    q = {TensorView(data.data(), elem, {rows, dc}), TensorView(scale.data(), spec.dtype, spec.shape, spec.strides), r,
         ScaleLayout::kRowMajor, r == ScaleRecipe::kNVFP4 ? nvfp4_global_scale(xv) : 1.0f};
    quantize(xv, q);
  }
  size_t bytes() const { return data.size() + scale.size(); }
};

TensorView transposed(const TensorView& t) {
  if (t.dim() != 2) return t;
  return TensorView(t.data(), t.dtype(), {t.shape()[1], t.shape()[0]}, {t.strides()[1], t.strides()[0]});
}

std::vector<float> to_f32(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  const int64_t rows = t.shape()[0], cols = t.shape()[1];
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const char* p = static_cast<const char*>(t.data()) + (i * t.strides()[0] + j * t.strides()[1]) * t.element_size();
      float v = 0;
      if (t.dtype() == DType::kF32) std::memcpy(&v, p, 4);
      else {
        uint16_t h;
        std::memcpy(&h, p, 2);
        v = bf16_to_f32(h);
      }
      out[static_cast<size_t>(i * cols + j)] = v;
    }
  return out;
}

class Bench {
 public:
  Bench(const GemmBenchConfig& cfg, Report& report, const PeakFigures& peak)
      : cfg_(cfg), report_(report), peak_(peak) {
    tm_ = cfg.quick ? Timing{0.01, 3, 0.25} : Timing{0.05, 5, 2.0};
    // Compute-bound cases: samples of one call where a call takes 5 ms or
    // more, so that the fastest call counts, as the fastest run of the peak
    // loop does for the FMA peak (a sample averaging two 2048^3 calls at two
    // threads had read 1-2% below the best of them on this shared machine).
    tm_gemm_ = cfg.quick ? Timing{0.002, 5, 0.25} : Timing{0.005, 10, 2.0};
    tune_.samples = cfg.quick ? 2 : 3;
    tune_.max_variant_seconds = cfg.quick ? 0.1 : 1.0;
    tune_.min_sample_seconds = cfg.quick ? 2e-4 : 1e-3;
  }

  bool selected(const std::string& name) const {
    if (cfg_.only.empty()) return true;
    for (const auto& s : cfg_.only)
      if (name.find(s) != std::string::npos) return true;
    return false;
  }

  void add(const std::string& c, const std::string& impl, double seconds, double flops, double bytes, double peak,
           double triad) {
    if (flops > 0) report_.add({"gemm", c, impl, "gflops", flops / seconds / 1e9, "GFLOP/s"});
    if (flops > 0 && peak > 0) report_.add({"gemm", c, impl, "frac_of_peak", flops / seconds / 1e9 / peak, "ratio"});
    if (bytes > 0) report_.add({"gemm", c, impl, "GBps", bytes / seconds / 1e9, "GB/s"});
    if (bytes > 0 && triad > 0) report_.add({"gemm", c, impl, "frac_of_triad", bytes / seconds / 1e9 / triad, "ratio"});
  }

  double peak_for(DType dt, int t) const {
    auto get = [&](const std::map<int, double>& m) { auto it = m.find(t); return it == m.end() ? 0.0 : it->second; };
    if (dt == DType::kBF16 && get(peak_.bf16_gflops) > 0) return get(peak_.bf16_gflops);
    return get(peak_.f32_gflops);
  }
  double triad_for(int t) const {
    auto it = peak_.triad_GBps.find(t);
    return it == peak_.triad_GBps.end() ? 0.0 : it->second;
  }

  void print(const std::string& c, const std::map<std::string, double>& secs, double flops, double bytes,
             const std::string& note) {
    std::string line = c + ":";
    for (const auto& [impl, s] : secs)
      line += bytes > 0 && flops <= 0 ? fmt::format(" {} {:.0f} us", impl, s * 1e6)
                                      : fmt::format(" {} {:.1f}", impl, flops / s / 1e9);
    if (secs.count("sinew") && secs.count("openblas"))
      line += fmt::format(" | sinew/openblas {:.2f}x", secs.at("openblas") / secs.at("sinew"));
    fmt::print("{}{}\n", line, note.empty() ? "" : " [" + note + "]");
    std::fflush(stdout);
  }

  // mm / addmm in f32 or bf16.
  void gemm_case(const std::string& op, DType dt, int64_t m, int64_t n, int64_t k, const std::string& epi) {
    const std::string dts = dt == DType::kBF16 ? "bf16" : "f32";
    const bool addmm = op == "addmm";
    std::vector<int> ts;
    for (int t : cfg_.threads)
      if (selected(case_name(op, dts, m, n, k, epi, t))) ts.push_back(t);
    if (ts.empty()) return;
    // OpenBLAS and BLIS read f32 operands; bf16 cases give them f32 copies.
    std::unique_ptr<GemmWorkload> w;
    std::vector<float> a32, b32, c32(static_cast<size_t>(m * n)), bias32;
    for (int t : ts) {
      const std::string spec = addmm ? fmt::format("addmm:{}:{}x{}x{}:bias+{}", dts, m, n, k, epi)
                                     : fmt::format("mm:{}:{}x{}x{}", dts, m, n, k);
      w = std::make_unique<GemmWorkload>(GemmShape::parse(spec, t));
      if (a32.empty()) {
        a32 = to_f32(w->a());
        b32 = to_f32(w->b());
        if (addmm) bias32 = to_f32(TensorView(w->bias().data(), w->bias().dtype(), {1, n}));
      }
      const std::string c = case_name(op, dts, m, n, k, epi, t);
      const GemmProblem& p = w->problem();
      const TuneResult r = GemmTuner::global().tune(p, tune_);
      const TuneVariant* best_tile = nullptr;
      for (const TuneVariant& v : r.variants)
        if (v.family == "tile" && std::isfinite(v.best_us()) && (!best_tile || v.best_us() < best_tile->best_us()))
          best_tile = &v;

      GemmOptions o;
      o.threads = t;
      o.epilogue = w->epilogue();
      o.beta = addmm ? 1.0 : 0.0;
      const GemmWorkload& wl = *w;
      std::vector<Impl> impls;
      impls.push_back({"sinew", [&wl, o, addmm] {
                         if (addmm) kernels::addmm(wl.bias(), wl.a(), wl.b(), wl.out(), o);
                         else kernels::mm(wl.a(), wl.b(), wl.out(), o);
                       }});
      const Candidate* pick = find_candidate(r.candidate);
      if (best_tile && !(best_tile->candidate == r.candidate && best_tile->mode == r.mode)) {
        const Candidate* bt = find_candidate(best_tile->candidate);
        const EpilogueMode mode = best_tile->mode;
        impls.push_back({"sinew-tile", [bt, &p, mode] { bt->run(p, mode); }});
      }
      if (r.candidate != "blas/openblas") {
        const Candidate* blas = find_candidate("blas/openblas");
        impls.push_back({"sinew-blas", [blas, &p] { blas->run(p); }, true});
      }
      if (addmm && pick && pick->can_fuse(p)) {
        impls.push_back({"sinew-fused", [pick, &p] { pick->run(p, EpilogueMode::kFused); }});
        impls.push_back({"sinew-unfused", [pick, &p] { pick->run(p, EpilogueMode::kUnfused); }});
      }
      float* cp = c32.data();
      const float* ap = a32.data();
      const float* bp = b32.data();
      const float* biasp = bias32.data();
      if (addmm) {
        impls.push_back({"openblas", [=] {
                           broadcast_bias(cp, n, biasp, m, n);
                           openblas_sgemm(t, m, n, k, ap, k, bp, n, false, 1.0f, cp, n);
                           gelu_tanh_pass(cp, n, m, n, t);
                         }, true});
      } else {
        impls.push_back({"openblas", [=] { openblas_sgemm(t, m, n, k, ap, k, bp, n, false, 0.0f, cp, n); }, true});
        if (blis_available() && dt == DType::kF32)
          impls.push_back({"blis", [=] { blis_sgemm(t, m, n, k, ap, k, bp, n, cp, n); }, true});
      }
      std::map<std::string, double> secs = time_impls(impls, t, tm_gemm_);
      // A family whose best variant is the pick runs exactly what sinew runs.
      if (best_tile && !secs.count("sinew-tile")) secs["sinew-tile"] = secs["sinew"];
      if (!secs.count("sinew-blas")) secs["sinew-blas"] = secs["sinew"];

      const double flops = 2.0 * m * n * k;
      const double bytes = m <= 8 ? static_cast<double>((m * k + k * n) * dtype_size(dt) + m * n * dtype_size(dt)) : 0;
      for (const auto& [impl, s] : secs) add(c, impl, s, flops, bytes, peak_for(dt, t), triad_for(t));
      print(c, secs, flops, 0,
            fmt::format("{} {}{}", r.candidate, epilogue_mode_name(r.mode), r.cached ? ", cached" : ""));
    }
  }

  // scaled_mm: fp8 e4m3 tensorwise and NVFP4; OpenBLAS sgemm of the shape as the f32 reference.
  void scaled_case(int64_t m, int64_t n, int64_t k) {
    const std::vector<float> x = random_floats(m * k, 3), wt = random_floats(n * k, 4);
    std::vector<float> out(static_cast<size_t>(m * n)), c32(static_cast<size_t>(m * n));
    std::vector<float> b32(static_cast<size_t>(k * n));  // w^T row-major for sgemm
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j) b32[static_cast<size_t>(j * n + i)] = wt[static_cast<size_t>(i * k + j)];
    std::map<int, double> blas_s;
    for (const char* fmt_name : {"fp8_e4m3", "nvfp4"}) {
      const bool fp4 = std::string(fmt_name) == "nvfp4";
      std::vector<int> ts;
      for (int t : cfg_.threads)
        if (selected(case_name("scaled_mm", fmt_name, m, n, k, "none", t))) ts.push_back(t);
      if (ts.empty()) continue;
      const DType elem = fp4 ? DType::kU8 : DType::kF8E4M3FN;
      const ScaleRecipe r = fp4 ? ScaleRecipe::kNVFP4 : ScaleRecipe::kTensorwise;
      const Quantized qa(x, m, k, elem, r), qw(wt, n, k, elem, r);
      const TensorView b = transposed(qw.q.data);
      const TensorView scale_b = fp4 ? qw.q.scale : transposed(qw.q.scale);
      const TensorView ov(out.data(), DType::kF32, {m, n});
      for (int t : ts) {
        ScaledMmOptions so;
        so.threads = t;
        if (fp4) {
          so.global_scale_a = qa.q.global_scale;
          so.global_scale_b = qw.q.global_scale;
        }
        std::vector<Impl> impls{{"sinew", [&] { scaled_mm(qa.q.data, b, qa.q.scale, scale_b, ov, so); }}};
        float* cp = c32.data();
        const float* ap = x.data();
        const float* bp = b32.data();
        if (!blas_s.count(t))
          impls.push_back({"openblas", [=] { openblas_sgemm(t, m, n, k, ap, k, bp, n, false, 0.0f, cp, n); }, true});
        std::map<std::string, double> secs = time_impls(impls, t, tm_gemm_);
        if (blas_s.count(t)) secs["openblas"] = blas_s[t];
        blas_s[t] = secs["openblas"];
        const std::string c = case_name("scaled_mm", fmt_name, m, n, k, "none", t);
        const double flops = 2.0 * m * n * k;
        for (const auto& [impl, s] : secs) add(c, impl, s, flops, 0, peak_for(DType::kF32, t), 0);
        print(c, secs, flops, 0, "openblas = f32 sgemm of the shape");
      }
    }
  }

  // The decode GEMV: y[M, N] = x[M, K] @ W^T with W in each format.
  // Decode reads each layer's weights once per token, after the other
  // layers' have passed through the caches: every call takes the next of
  // enough copies of the weight to span four times the last-level cache,
  // STREAM's rule for its arrays, which the triad these are compared with
  // follows (a 4096 x 11008 f32 weight, 180 MB, fits the 300 MB L3 this
  // benchmark has met, where one copy timed the cache, not memory; with
  // twice the cache some calls still found part of it there: f32 at 21
  // GB/s against 18-19 with four times).
  static int64_t copies_past_llc(size_t bytes) {
    const int64_t llc = kernels::cpu_features().last_level_cache_bytes;
    return std::clamp<int64_t>(
        (4 * llc + static_cast<int64_t>(bytes) - 1) / std::max<int64_t>(1, static_cast<int64_t>(bytes)), 1, 1024);
  }

  // `count` copies of a weight: its element bytes and (NVFP4, fp8) scales.
  struct WeightCopies {
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<GemvWeight> w;
    WeightCopies(const GemvWeight& base, int64_t count) {
      // Copy i of t, made distinct (below).
      auto copy = [&](const TensorView& t, int64_t i) {
        int64_t extent = 1;  // elements from the first to the last, strides included
        for (int d = 0; d < t.dim(); ++d) extent += (t.shape()[d] - 1) * t.strides()[d];
        const auto* src = static_cast<const uint8_t*>(t.data());
        bufs.emplace_back(src, src + static_cast<size_t>(extent) * dtype_size(t.dtype()));
        distinguish(bufs.back(), t.dtype() == DType::kF8E4M3FN, i);
        return TensorView(bufs.back().data(), t.dtype(), {t.shape().begin(), t.shape().end()},
                          {t.strides().begin(), t.strides().end()});
      };
      w.push_back(base);
      for (int64_t i = 1; i < count; ++i) {
        GemvWeight c = base;
        c.w = copy(base.w, i);
        if (base.scale) c.scale = copy(*base.scale, i);
        w.push_back(c);
      }
    }
    // One element per 4 KiB page of copy i changed by its last bit (an
    // e4m3 0x7e / 0xfe by the next, to stay clear of NaN), at offset 64 i
    // mod 4096, so that no page equals another copy's: identical pages can
    // be merged by the host (same-page merging), and then every copy is
    // one in the cache. A run whose f32 copies all read the same weight
    // timed 57 GB/s at 1 x 4096 x 11008 on two threads (triad: 29).
    static void distinguish(std::vector<uint8_t>& bytes, bool e4m3, int64_t i) {
      for (size_t at = static_cast<size_t>(64 * (i % 64)); at < bytes.size(); at += 4096) {
        uint8_t& b = bytes[at];  // the lowest byte of an element (little-endian)
        b = static_cast<uint8_t>(e4m3 && (b & 0x7f) == 0x7e ? b ^ 2 : b ^ 1);
      }
    }
    size_t next = 0;
    const GemvWeight& take() { return w[next++ % w.size()]; }
  };

  void gemv_case(int64_t m, int64_t n, int64_t k) {
    const std::vector<float> x = random_floats(m * k, 5), wf = random_floats(n * k, 6);
    std::vector<float> y(static_cast<size_t>(m * n)), yb(static_cast<size_t>(m * n));
    // The f32 weight's copies, for sinew's f32 run and for OpenBLAS.
    WeightCopies f32_copies(GemvWeight{TensorView(const_cast<float*>(wf.data()), DType::kF32, {n, k})},
                            copies_past_llc(wf.size() * 4));
    const TensorView xv(const_cast<float*>(x.data()), DType::kF32, {m, k}), yv(y.data(), DType::kF32, {m, n});
    std::map<int, double> f32_s, blas_s;
    for (const char* wname : {"f32", "bf16", "fp8_e4m3", "nvfp4"}) {
      std::vector<int> ts;
      for (int t : cfg_.threads)
        if (selected(case_name("gemv", wname, m, n, k, "none", t))) ts.push_back(t);
      if (ts.empty()) continue;
      const std::string wn = wname;
      std::vector<uint16_t> wbf;
      std::unique_ptr<Quantized> q;
      GemvWeight gw;
      size_t wbytes = 0;
      if (wn == "f32") {
        gw.w = TensorView(const_cast<float*>(wf.data()), DType::kF32, {n, k});
        wbytes = wf.size() * 4;
      } else if (wn == "bf16") {
        wbf.resize(wf.size());
        for (size_t i = 0; i < wf.size(); ++i) wbf[i] = f32_to_bf16(wf[i]);
        gw.w = TensorView(wbf.data(), DType::kBF16, {n, k});
        wbytes = wbf.size() * 2;
      } else {
        const bool fp4 = wn == "nvfp4";
        q = std::make_unique<Quantized>(wf, n, k, fp4 ? DType::kU8 : DType::kF8E4M3FN,
                                        fp4 ? ScaleRecipe::kNVFP4 : ScaleRecipe::kRowwise);
        gw = GemvWeight::from(q->q);
        wbytes = q->bytes();
      }
      std::optional<WeightCopies> narrow;
      if (wn != "f32") narrow.emplace(gw, copies_past_llc(wbytes));
      WeightCopies& copies = narrow ? *narrow : f32_copies;
      for (int t : ts) {
        GemvOptions go;
        go.threads = t;
        std::vector<Impl> impls{{"sinew", [&] { gemv(xv, copies.take(), yv, go); }}};
        const float* xp = x.data();
        float* yp = yb.data();
        if (!blas_s.count(t))
          impls.push_back({"openblas", [&, xp, yp, t] {
                             const float* wp = f32_copies.take().w.data_as<const float>();
                             if (m == 1) openblas_sgemv(t, n, k, wp, xp, yp);
                             else openblas_sgemm(t, m, n, k, xp, k, wp, k, true, 0.0f, yp, n);
                           }, true});
        std::map<std::string, double> secs = time_impls(impls, t, tm_);
        if (blas_s.count(t)) secs["openblas"] = blas_s[t];
        blas_s[t] = secs["openblas"];
        const std::string c = case_name("gemv", wname, m, n, k, "none", t);
        const double flops = 2.0 * m * n * k;
        const double io = static_cast<double>((m * k + m * n) * 4);
        add(c, "sinew", secs["sinew"], flops, static_cast<double>(wbytes) + io, 0, triad_for(t));
        add(c, "openblas", secs["openblas"], flops, static_cast<double>(wf.size() * 4) + io, 0, triad_for(t));
        if (wn == "f32") f32_s[t] = secs["sinew"];
        if (f32_s.count(t)) report_.add({"gemm", c, "sinew", "speedup_vs_f32", f32_s[t] / secs["sinew"], "x"});
        print(c, secs, 0, static_cast<double>(wbytes) + io,
              fmt::format("sinew {:.1f} GB/s over {:.1f} MB of weights ({} copies in turn); openblas = f32 weights",
                          (static_cast<double>(wbytes) + io) / secs["sinew"] / 1e9, wbytes / 1e6, copies.w.size()));
      }
    }
  }

  // The prescreened pick against the exhaustive best, from one table of
  // exhaustive timings (so that timing noise between two runs does not
  // count against or for the cost model).
  void evaluate(const std::vector<std::string>& specs) {
    const auto& trained = tune::training_shapes();
    int within = 0, total = 0;
    const int t = cfg_.threads.front();
    TuneOptions o;  // the tuner's defaults, which mm's dispatch uses
    o.exhaustive = true;
    o.retune = true;
    o.confirm_rounds = 0;  // one pass: the same number of samples behind every figure
    o.max_variant_seconds = cfg_.quick ? 0.2 : 1.0;
    GemmTuner scratch("");
    for (const auto& spec : specs) {
      if (std::find(trained.begin(), trained.end(), spec) != trained.end()) continue;
      const GemmShape s = GemmShape::parse(spec, t);
      const TuneResult r = scratch.tune(s, o);
      double best = INFINITY, pick = INFINITY;
      std::string best_id, pick_id;
      for (const TuneVariant& v : r.variants) {
        if (!std::isfinite(v.best_us())) continue;
        if (v.best_us() < best) best = v.best_us(), best_id = v.candidate;
        if (v.survivor && v.best_us() < pick) pick = v.best_us(), pick_id = v.candidate;
      }
      const double ratio = pick / best;
      ++total;
      within += ratio <= 1.03 ? 1 : 0;
      const std::string c = fmt::format("autotune/{}/t{}", spec, t);
      report_.add({"gemm", c, "sinew", "pick_vs_best", ratio, "x"});
      int survivors = 0;
      for (const TuneVariant& v : r.variants) survivors += v.survivor ? 1 : 0;
      fmt::print("{}: pick {} {:.1f} us, exhaustive best {} {:.1f} us ({:.3f}x; {} of {} variants passed the cost model)\n",
                 c, pick_id, pick, best_id, best, ratio, survivors, r.variants.size());
      std::fflush(stdout);
    }
    if (total > 0) {
      report_.add({"gemm", fmt::format("autotune/summary/t{}", t), "sinew", "within_3pct_share",
                   100.0 * within / total, "%"});
      report_.add({"gemm", fmt::format("autotune/summary/t{}", t), "sinew", "shapes", 1.0 * total, "count"});
      fmt::print("autotuned pick within 3% of the exhaustive best on {} of {} shapes ({:.0f}%)\n", within, total,
                 100.0 * within / total);
    }
  }

  // The warm dispatch: a cached lookup, and a whole tiny mm through it.
  void dispatch() {
    GemmTuner& g = GemmTuner::global();
    const GemmWorkload w(GemmShape::parse("addmm:f32:64x64x64:bias+gelu_tanh", 1));
    g.tune(w.problem(), tune_);
    constexpr int kLookups = 1'000'000;
    const GemmProblem& p = w.problem();
    size_t hits = 0;
    const auto t0 = Clock::now();
    for (int i = 0; i < kLookups; ++i) hits += g.lookup(p).candidate != nullptr;
    const double ns = since(t0) / kLookups * 1e9;
    report_.add({"gemm", "dispatch/warm_lookup/t1", "sinew", "ns", ns, "ns"});

    const GemmWorkload tiny(GemmShape::parse("mm:f32:4x4x4", 1));
    g.tune(tiny.problem(), tune_);
    GemmOptions tuned, heuristic;
    tuned.threads = heuristic.threads = 1;
    heuristic.family = "tile";
    auto per_call = [&](const GemmOptions& o) {
      constexpr int kCalls = 200'000;
      const auto s0 = Clock::now();
      for (int i = 0; i < kCalls; ++i) kernels::mm(tiny.a(), tiny.b(), tiny.out(), o);
      return since(s0) / kCalls * 1e9;
    };
    per_call(tuned);
    const double t_tuned = per_call(tuned), t_heur = per_call(heuristic);
    report_.add({"gemm", "dispatch/mm_4x4x4/t1", "sinew", "ns", t_tuned, "ns"});
    report_.add({"gemm", "dispatch/mm_4x4x4/t1", "sinew-default", "ns", t_heur, "ns"});
    fmt::print("warm dispatch: {:.0f} ns per cached lookup ({} of {} hit); mm 4x4x4 {:.0f} ns per call through the "
               "tuned dispatch, {:.0f} ns through the heuristic pick\n",
               ns, hits, kLookups, t_tuned, t_heur);
  }

 private:
  const GemmBenchConfig& cfg_;
  Report& report_;
  const PeakFigures& peak_;
  Timing tm_;       // GEMV (memory-bound: samples of several calls through the weight copies)
  Timing tm_gemm_;  // mm, addmm, scaled_mm
  TuneOptions tune_;
};

}  // namespace

int run_gemm_bench(const GemmBenchConfig& cfg, Report& report) {
  // The dispatch must see only this run's picks: a cache of its own.
  const std::string cache =
      cfg.cache.empty()
          ? (std::filesystem::temp_directory_path() / fmt::format("sinew-bench-gemm-{}-unsaved.json", ::getpid())).string()
          : cfg.cache;
  ::setenv("SINEW_TUNE_CACHE", cache.c_str(), 1);
  ::unsetenv("SINEW_AUTOTUNE");
  GemmTuner& tuner = GemmTuner::global();
  if (tuner.cache_path() != cache)
    throw InternalError(fmt::format("the GEMM tuner was created before the benchmark chose its cache {}", cache));
  fmt::print("peers: {}; {}\n", openblas_description(), blis_description());
  if (const std::string w = openblas_fallback_warning(); !w.empty()) fmt::print(stderr, "{}\n", w);
  const auto t0 = Clock::now();
  const PeakFigures peak = run_peak_bench(cfg.threads, cfg.quick, report);
  Bench b(cfg, report, peak);

  const std::vector<std::pair<int64_t, int64_t>> models = {{768, 3072}, {4096, 11008}};
  if (cfg.quick) {
    for (int64_t s : {256, 512, 1024}) b.gemm_case("mm", DType::kF32, s, s, s, "none");
    b.gemm_case("mm", DType::kBF16, 512, 512, 512, "none");
    for (int64_t m : {1, 8, 128}) b.gemm_case("mm", DType::kF32, m, 3072, 768, "none");
    b.gemm_case("mm", DType::kBF16, 128, 3072, 768, "none");
    b.gemm_case("addmm", DType::kF32, 128, 3072, 768, "gelu_tanh");
    b.scaled_case(128, 3072, 768);
    b.gemv_case(1, 11008, 4096);
  } else {
    for (DType dt : {DType::kF32, DType::kBF16})
      for (int64_t s : {256, 512, 1024, 2048, 4096}) b.gemm_case("mm", dt, s, s, s, "none");
    for (const auto& [d, ffn] : models)
      for (int64_t m : {1, 8, 128, 2048}) {
        for (DType dt : {DType::kF32, DType::kBF16}) {
          b.gemm_case("mm", dt, m, ffn, d, "none");
          b.gemm_case("mm", dt, m, d, ffn, "none");
        }
        b.gemm_case("addmm", DType::kF32, m, ffn, d, "gelu_tanh");
      }
    for (const auto& [d, ffn] : models)
      for (int64_t m : {128, 2048}) {
        b.scaled_case(m, ffn, d);
        b.scaled_case(m, d, ffn);
      }
    for (const auto& [d, ffn] : models)
      for (int64_t m : {1, 8}) {
        b.gemv_case(m, ffn, d);
        b.gemv_case(m, d, ffn);
      }
  }
  if (cfg.evaluate) {
    // Shapes outside the cost model's training set (tune::training_shapes()).
    const std::vector<std::string> quick_eval = {"mm:f32:384x384x384", "mm:f32:32x1024x1024",
                                                 "addmm:f32:64x3072x768:bias+gelu_tanh"};
    const std::vector<std::string> full_eval = {
        "mm:f32:384x384x384",      "mm:f32:768x768x768",        "mm:f32:1280x1280x1280",
        "mm:f32:1x3072x768",       "mm:f32:8x768x3072",         "mm:f32:32x1024x1024",
        "mm:f32:128x3072x768",     "mm:f32:256x768x3072",       "mm:f32:1x11008x4096",
        "mm:f32:8x4096x11008",     "mm:bf16:384x384x384",       "mm:bf16:8x3072x768",
        "mm:bf16:128x768x3072",    "addmm:f32:64x3072x768:bias+gelu_tanh",
        "addmm:f32:8x3072x768:bias+gelu_tanh",                  "mm:f32:200x600x300:NT",
        "bmm:f32:8x128x128x64",    "mm:f64:384x384x384",        "mm:f32:1000x1000x100",
        "mm:f32:100x100x2000"};
    b.evaluate(cfg.quick ? quick_eval : full_eval);
  }
  b.dispatch();
  if (!cfg.cache.empty()) tuner.save();
  fmt::print("gemm bench finished in {:.0f} s\n", since(t0));
  return 0;
}

}  // namespace sinew::bench
