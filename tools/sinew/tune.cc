// `sinew tune`: pre-fills the GEMM tuning cache for a list of shapes, so
// that a job's first calls already run the tuned kernels. Under a launcher
// (`sinew run -n 2 sinew tune ...`) the ranks split the candidates of every
// shape and agree on the picks.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "sinew/core/thread_pool.h"
#include "sinew/dist/gemm_tune.h"
#include "sinew/dist/init.h"
#include "sinew/kernels/autotune.h"
#include "sinew/kernels/cost_model.h"
#include "tools/sinew/cli_parse.h"
#include "tools/sinew/commands.h"

namespace sinew::cli {
namespace {

using kernels::GemmShape;

// Shapes from a file (one or more per line, '#' comments) or a comma list.
std::vector<std::string> shape_specs(const std::string& arg) {
  std::vector<std::string> out;
  if (std::filesystem::is_regular_file(arg)) {
    std::ifstream in(arg);
    std::string line;
    while (std::getline(in, line)) {
      line = line.substr(0, line.find('#'));
      for (auto& s : split_list(line)) out.push_back(s);
    }
  } else {
    out = split_list(arg);
  }
  return out;
}

bool is_op(const std::string& s) { return s == "mm" || s == "addmm" || s == "bmm"; }
bool is_dims(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789x") == std::string::npos; }

// A spec may leave out the op (mm) and the dtype (each of `dtypes`).
std::vector<std::string> expand(const std::string& spec, const std::vector<std::string>& dtypes) {
  std::vector<std::string> f = split_list(spec, ':');
  if (!f.empty() && !is_op(f[0])) f.insert(f.begin(), "mm");
  if (f.size() >= 2 && is_dims(f[1])) {
    std::vector<std::string> out;
    for (const auto& d : dtypes) {
      std::vector<std::string> g = f;
      g.insert(g.begin() + 1, d);
      std::string s;
      for (const auto& x : g) s += (s.empty() ? "" : ":") + x;
      out.push_back(s);
    }
    return out;
  }
  std::string s;
  for (const auto& x : f) s += (s.empty() ? "" : ":") + x;
  return {s};
}

double gflops(const GemmShape& s, double us) {
  return us > 0 ? 2.0 * static_cast<double>(s.batch * s.m * s.n * s.k) / (us * 1e3) : 0.0;
}

// Prints the coefficients fitted to exhaustive timings of `shapes`.
int fit(const std::vector<GemmShape>& shapes, const kernels::TuneOptions& base) {
  std::vector<std::unique_ptr<kernels::GemmWorkload>> keep;
  std::vector<kernels::tune::CostSample> samples;
  kernels::GemmTuner scratch("");
  kernels::TuneOptions o = base;
  o.exhaustive = true;
  o.retune = true;
  for (const GemmShape& s : shapes) {
    keep.push_back(std::make_unique<kernels::GemmWorkload>(s));
    const kernels::TuneResult r = scratch.tune(s, o);
    for (const auto& v : r.variants)
      samples.push_back({kernels::find_candidate(v.candidate), v.mode, keep.back()->problem(), v.best_us()});
    fmt::print("timed {} variants of {} t{}\n", r.variants.size(), s.to_string(), s.threads);
  }
  const auto& start = kernels::tune::default_cost_coefficients();
  double after = 0;
  const auto k = kernels::tune::fit_cost_model(samples, start, &after);
  fmt::print("fitted on {} timings: rms log error {:.3f} (default coefficients: {:.3f})\n{}\n", samples.size(),
             after, kernels::tune::cost_model_error(samples, start), kernels::tune::describe(k));
  return 0;
}

}  // namespace

void add_tune_command(CLI::App& app, int& rc) {
  struct Opts {
    std::string shapes, dtypes = "f32", threads, cache;
    int samples = 5, max_timed = 6;
    bool retune = false, exhaustive = false, fit = false, verbose = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("tune", "Pre-fill the GEMM autotuning cache for a list of shapes");
  cmd->add_option("--shapes", o->shapes,
                  "a file of shapes (one per line, '#' comments) or a comma list, each "
                  "<op>:<dtype>:[<B>x]<M>x<N>x<K>[:<epilogue>][:<layout>], e.g. "
                  "mm:f32:1024x1024x1024,addmm:bf16:128x3072x768:bias+gelu_tanh; op and dtype may be left out");
  cmd->add_option("--dtype", o->dtypes, "comma list of dtypes for shapes that name none (default f32)");
  cmd->add_option("--threads", o->threads, "comma list of thread counts (default: the pool's default)");
  cmd->add_option("--cache", o->cache, "the cache file (default $SINEW_TUNE_CACHE or ~/.cache/sinew/gemm_tune.json)");
  cmd->add_option("--samples", o->samples, "timed samples per variant (the fastest counts)")->check(CLI::Range(1, 1000));
  cmd->add_option("--max-timed", o->max_timed, "variants the cost model lets through to timing")
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--retune", o->retune, "time shapes that are already in the cache again");
  cmd->add_flag("--exhaustive", o->exhaustive, "time every variant (no cost-model prescreen)");
  cmd->add_flag("-v,--verbose", o->verbose, "list every variant with the cost model's estimate and its time");
  cmd->add_flag("--fit", o->fit,
                "fit the cost model's coefficients to exhaustive timings of --shapes (default: the training set) "
                "and print them; the cache is not touched");
  cmd->callback([o, &rc] {
    std::vector<int> threads =
        parse_int_list32("--threads", o->threads, 1, 65535, "a comma list of thread counts from 1 to 65535");
    if (threads.empty()) threads.push_back(ThreadPool::default_threads());
    const std::vector<std::string> dtypes = split_list(o->dtypes);
    std::vector<std::string> specs =
        o->shapes.empty() && o->fit ? kernels::tune::training_shapes() : shape_specs(o->shapes);
    if (specs.empty()) throw CLI::ValidationError("--shapes", "no shapes given");
    std::vector<GemmShape> shapes;
    for (const auto& spec : specs)
      for (const auto& s : expand(spec, dtypes))
        for (int t : threads) shapes.push_back(GemmShape::parse(s, t));

    kernels::TuneOptions opts;
    opts.samples = o->samples;
    opts.max_timed = o->max_timed;
    opts.retune = o->retune;
    opts.exhaustive = o->exhaustive;
    if (o->fit) {
      rc = fit(shapes, opts);
      return;
    }

    // Under a launcher, the ranks split every shape's candidates.
    dist::ProcessGroupPtr pg;
    if (dist::read_launch_env().world_size > 1) {
      pg = dist::init_process_group();
      opts.group = dist::gemm_tune_group(*pg);
    }
    const bool lead = opts.group.rank == 0;
    kernels::GemmTuner tuner(o->cache.empty() ? kernels::default_tune_cache_path() : o->cache);
    const auto t0 = std::chrono::steady_clock::now();
    int tuned = 0, cached = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const GemmShape& s = shapes[i];
      const kernels::TuneResult r = tuner.tune(s, opts);
      r.cached ? ++cached : ++tuned;
      if (!lead) continue;
      int timed = 0;
      for (const auto& v : r.variants) timed += std::isfinite(v.measured_us) ? 1 : 0;
      fmt::print("[{}/{}] {} t{}: {} {} {:.1f} us ({:.1f} GFLOP/s) {}\n", i + 1, shapes.size(), s.to_string(),
                 s.threads, r.candidate, kernels::epilogue_mode_name(r.mode), r.us, gflops(s, r.us),
                 r.cached ? std::string("cached")
                          : fmt::format("timed {} of {} variants in {:.2f} s", timed, r.variants.size(), r.seconds));
      if (o->verbose)
        for (const auto& v : r.variants)
          fmt::print("    {:<60} {:<7} model {:>10.1f} us  measured {:>10.1f} us{}\n", v.candidate,
                     kernels::epilogue_mode_name(v.mode), v.model_us, v.measured_us,
                     !v.survivor                    ? "  (screened out)"
                     : std::isfinite(v.confirmed_us) ? fmt::format("  confirmed {:>10.1f} us", v.confirmed_us)
                                                     : std::string());
      std::fflush(stdout);
    }
    tuner.save();

    // The warm dispatch cost: lookups of the tuned problems.
    std::vector<std::unique_ptr<kernels::GemmWorkload>> ws;
    for (size_t i = 0; i < std::min<size_t>(shapes.size(), 4); ++i)
      ws.push_back(std::make_unique<kernels::GemmWorkload>(shapes[i]));
    constexpr int kLookups = 200000;
    const auto l0 = std::chrono::steady_clock::now();
    size_t found = 0;
    for (int i = 0; i < kLookups; ++i) found += tuner.lookup(ws[static_cast<size_t>(i) % ws.size()]->problem()).candidate != nullptr;
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - l0).count() / kLookups;
    if (lead) {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      fmt::print("{} shapes: {} tuned, {} already cached ({:.0f}% hits) in {:.1f} s{}; cache {} holds {} entries for "
                 "this build; warm dispatch {:.0f} ns per lookup ({} of {} hit)\n",
                 shapes.size(), tuned, cached, 100.0 * cached / static_cast<double>(shapes.size()), secs,
                 opts.group.world > 1 ? fmt::format(" on {} ranks", opts.group.world) : "", tuner.cache_path(),
                 tuner.stats().entries, ns, found, kLookups);
    }
    rc = 0;
  });
}

}  // namespace sinew::cli
