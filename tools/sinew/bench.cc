// `sinew bench <suite>`: the one benchmark front end. Every suite prints a
// readable table and, with --csv FILE, appends rows
// suite,case,impl,metric,value,unit.
#include <fmt/format.h>

#include <sstream>

#include "bench/collectives_bench.h"
#include "bench/gemm_bench.h"
#include "bench/linalg_bench.h"
#include "bench/peak_bench.h"
#include "bench/peer_env.h"
#include "bench/recovery_bench.h"
#include "tools/sinew/commands.h"

namespace sinew::cli {
namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ','))
    if (!tok.empty()) out.push_back(tok);
  return out;
}

int64_t parse_bytes(const std::string& s) {
  size_t pos = 0;
  int64_t v = std::stoll(s, &pos);
  std::string suf = s.substr(pos);
  if (suf == "K" || suf == "KiB" || suf == "k") v <<= 10;
  else if (suf == "M" || suf == "MiB") v <<= 20;
  else if (suf == "G" || suf == "GiB") v <<= 30;
  else if (!suf.empty() && suf != "B") throw CLI::ValidationError("size", "bad size suffix in '" + s + "'");
  return v;
}

}  // namespace

void add_bench_command(CLI::App& app, int& rc) {
  auto* bench = app.add_subcommand("bench", "Benchmarks: run a suite beside its peers and report ratios");
  bench->require_subcommand(1);

  struct Opts {
    std::string csv, ops, impls, min_bytes = "8", max_bytes = "64M", fr = "on";
    int world = 2, samples = 7;
  };
  auto o = std::make_shared<Opts>();
  auto* coll = bench->add_subcommand(
      "collectives",
      "allreduce, allgather, reduce_scatter, broadcast, all_to_all from 8 B to 64 MiB for sinew, sinew-ucx, "
      "gloo, mpi and memcpy in one run");
  coll->add_option("--csv", o->csv, "append rows suite,case,impl,metric,value,unit to FILE");
  coll->add_option("--ws,--world-size", o->world, "ranks per impl")->check(CLI::Range(1, 64));
  coll->add_option("--ops", o->ops, "comma list of ops (default all five)");
  coll->add_option("--impls", o->impls, "comma list from sinew,sinew-ucx,gloo,mpi,memcpy (default all)");
  coll->add_option("--min-bytes", o->min_bytes, "smallest size (default 8)");
  coll->add_option("--max-bytes", o->max_bytes, "largest size (default 64M)");
  coll->add_option("--samples", o->samples, "timed samples per case (median reported)")->check(CLI::Range(1, 1000));
  coll->add_option("--fr", o->fr,
                   "Flight Recorder: on (default), off, or pair (alternate on/off samples in one run and "
                   "time a full-ring dump)")
      ->check(CLI::IsMember({"on", "off", "pair"}));
  coll->callback([o, &rc] {
    bench::CollectivesConfig cfg;
    cfg.fr = o->fr;
    cfg.world = o->world;
    cfg.samples = o->samples;
    if (!o->ops.empty()) cfg.ops = split_list(o->ops);
    if (!o->impls.empty()) cfg.impls = split_list(o->impls);
    cfg.min_bytes = parse_bytes(o->min_bytes);
    cfg.max_bytes = parse_bytes(o->max_bytes);
    bench::Report report;
    int failed = bench::run_collectives_bench(cfg, report);
    fmt::print("\n");
    report.print_table("busbw_GBps", true);
    fmt::print("\n");
    report.print_table("latency_us", false);
    if (!o->csv.empty()) report.write_csv(o->csv);
    rc = failed == 0 ? 0 : 1;
  });

  // The per-rank half of `bench collectives`, started by it (hidden).
  auto w = std::make_shared<bench::CollectivesConfig>();
  auto ws = std::make_shared<Opts>();
  auto* worker = app.add_subcommand("bench-worker", "");
  worker->group("");  // hidden from --help
  worker->add_option("--impl", w->impl)->required();
  worker->add_option("--backend", w->backend);
  worker->add_option("--transport", w->transport);
  worker->add_option("--ops", ws->ops);
  worker->add_option("--min-bytes", w->min_bytes);
  worker->add_option("--max-bytes", w->max_bytes);
  worker->add_option("--rows", w->rows_path)->required();
  worker->add_option("--samples", w->samples);
  worker->add_option("--fr", w->fr);
  worker->callback([w, ws, &rc] {
    if (!ws->ops.empty()) w->ops = split_list(ws->ops);
    rc = bench::run_collectives_worker(*w);
  });

  struct RecoveryOpts {
    std::string csv, worlds = "4,2";
    int trials = 5;
  };
  auto ro = std::make_shared<RecoveryOpts>();
  auto* rec = bench->add_subcommand(
      "recovery",
      "Cost of a rank's death: sinew's detect, revoke, agree and shrink phases beside restarting every worker "
      "(torchrun-style); admitting a new process (grow); what detection costs an 8 B allreduce");
  rec->add_option("--csv", ro->csv, "append rows suite,case,impl,metric,value,unit to FILE");
  rec->add_option("--ws,--world-size", ro->worlds, "comma list of world sizes, each at least 2 (default 4,2)");
  rec->add_option("--trials", ro->trials, "trials per world size (median and max reported)")
      ->check(CLI::Range(1, 1000));
  rec->callback([ro, &rc] {
    bench::RecoveryConfig cfg;
    cfg.trials = ro->trials;
    cfg.worlds.clear();
    for (const auto& w : split_list(ro->worlds)) {
      size_t pos = 0;
      int v = 0;
      try {
        v = std::stoi(w, &pos);
      } catch (const std::exception&) {
        pos = 0;
      }
      if (pos != w.size() || v < 2 || v > 64)
        throw CLI::ValidationError("--ws", "world sizes from 2 to 64, got '" + w + "'");
      cfg.worlds.push_back(v);
    }
    bench::Report report;
    int failed = bench::run_recovery_bench(cfg, report);
    fmt::print("\n");
    report.print_table("ms", false);
    fmt::print("\n");
    report.print_table("ms_max", false);
    fmt::print("\n");
    report.print_table("us", false);
    fmt::print("\n");
    report.print_table("us_min", false);
    fmt::print("\n");
    report.print_table("overhead_pct", false);
    if (!ro->csv.empty()) report.write_csv(ro->csv);
    rc = failed == 0 ? 0 : 1;
  });

  // The per-rank half of `bench recovery`, started by it (hidden).
  auto rw = std::make_shared<bench::RecoveryConfig>();
  auto* rworker = app.add_subcommand("bench-recovery-worker", "");
  rworker->group("");  // hidden from --help
  rworker->add_option("--mode", rw->mode)->required()->check(CLI::IsMember({"sinew", "doomed", "fresh", "grow", "latency"}));
  rworker->add_option("--victim", rw->victim)->required();
  rworker->add_option("--timeout-s", rw->trial_timeout_s);
  rworker->callback([rw, &rc] { rc = bench::run_recovery_worker(*rw); });

  struct LinalgOpts {
    std::string csv, sizes, threads, ops, dtypes;
    bool quick = false;
  };
  auto lo = std::make_shared<LinalgOpts>();
  auto* lin = bench->add_subcommand(
      "linalg",
      "Cholesky, QR, eigh and SVD beside OpenBLAS LAPACK (potrf, geqrf+orgqr, syevd, gesvj, gesdd), f64 and f32, "
      "n = 64 to 1024 and a batch of 10,000 32x32 matrices, 1 and 2 threads");
  lin->add_option("--csv", lo->csv, "append rows suite,case,impl,metric,value,unit to FILE");
  lin->add_option("--sizes", lo->sizes, "comma list of matrix orders (default 64,128,256,512,1024)");
  lin->add_option("--threads", lo->threads, "comma list of thread counts (default 1,2)");
  lin->add_option("--ops", lo->ops, "comma list from cholesky,qr,eigh,svd (default all)");
  lin->add_option("--dtypes", lo->dtypes, "comma list from f64,f32 (default both)");
  lin->add_flag("--quick", lo->quick, "a short run: n = 64 and 256, a batch of 1,000, few samples");
  lin->callback([lo, &rc] {
    bench::LinalgConfig cfg;
    if (lo->quick) {
      cfg.sizes = {64, 256};
      cfg.batch = 1000;
      cfg.sample_seconds = 0.05;
      cfg.max_samples = 3;
      cfg.gesvj_max_n = 256;
      cfg.rel_err_max_n = 256;
    }
    auto ints = [](const std::string& list, const char* what) {
      std::vector<int64_t> out;
      for (const auto& tok : split_list(list)) {
        size_t pos = 0;
        int64_t v = 0;
        try {
          v = std::stoll(tok, &pos);
        } catch (const std::exception&) {
          pos = 0;
        }
        if (pos != tok.size() || v < 1) throw CLI::ValidationError(what, "positive integers, got '" + tok + "'");
        out.push_back(v);
      }
      return out;
    };
    if (!lo->sizes.empty()) cfg.sizes = ints(lo->sizes, "--sizes");
    if (!lo->threads.empty()) {
      cfg.threads.clear();
      for (int64_t t : ints(lo->threads, "--threads")) cfg.threads.push_back(static_cast<int>(t));
    }
    if (!lo->ops.empty()) cfg.ops = split_list(lo->ops);
    if (!lo->dtypes.empty()) cfg.dtypes = split_list(lo->dtypes);
    bench::ensure_peer_bench_env();
    bench::Report report;
    int failed = bench::run_linalg_bench(cfg, report);
    for (const char* metric : {"ms", "residual", "orthogonality", "rel_err_small_sv"}) {
      fmt::print("\n");
      report.print_table(metric, false);
    }
    if (!lo->csv.empty()) report.write_csv(lo->csv);
    rc = failed == 0 ? 0 : 1;
  });

  auto thread_list = [](const std::string& list) {
    std::vector<int> out;
    for (const auto& tok : split_list(list)) {
      size_t pos = 0;
      int v = 0;
      try {
        v = std::stoi(tok, &pos);
      } catch (const std::exception&) {
        pos = 0;
      }
      if (pos != tok.size() || v < 1 || v > 4096)
        throw CLI::ValidationError("--threads", "thread counts from 1, got '" + tok + "'");
      out.push_back(v);
    }
    return out;
  };

  struct GemmOpts {
    std::string csv, threads = "1,2", cache, only;
    bool quick = false, no_eval = false;
  };
  auto go = std::make_shared<GemmOpts>();
  auto* gemm = bench->add_subcommand(
      "gemm",
      "mm/addmm (f32, bf16), scaled_mm (fp8, NVFP4) and the decode GEMV beside OpenBLAS and BLIS, with the FMA "
      "peak and stream bandwidth measured in the same run; squares 256-4096 and transformer MLP shapes");
  gemm->add_option("--csv", go->csv, "append rows suite,case,impl,metric,value,unit to FILE");
  gemm->add_option("--threads", go->threads, "comma list of thread counts (default 1,2)");
  gemm->add_option("--cache", go->cache, "keep the tuning cache in FILE (default: tune in memory, save nothing)");
  gemm->add_option("--only", go->only, "comma list: run only cases whose name contains one of these");
  gemm->add_flag("--quick", go->quick, "a subset that finishes in about a minute");
  gemm->add_flag("--no-eval", go->no_eval, "skip the tuned-pick-versus-exhaustive-best evaluation");
  gemm->callback([go, thread_list, &rc] {
    bench::ensure_peer_bench_env();
    bench::GemmBenchConfig cfg;
    cfg.threads = thread_list(go->threads);
    cfg.quick = go->quick;
    cfg.cache = go->cache;
    cfg.only = split_list(go->only);
    cfg.evaluate = !go->no_eval;
    bench::Report report;
    int failed = bench::run_gemm_bench(cfg, report);
    for (const char* metric : {"gflops", "frac_of_peak", "GBps"}) {
      fmt::print("\n");
      report.print_table(metric, true);
    }
    if (!go->csv.empty()) report.write_csv(go->csv);
    rc = failed == 0 ? 0 : 1;
  });

  struct PeakOpts {
    std::string csv, threads = "1,2";
    bool quick = false;
  };
  auto po = std::make_shared<PeakOpts>();
  auto* peak = bench->add_subcommand(
      "peak", "The machine's f32 FMA and bf16 dot-product peaks and stream triad / copy bandwidth, per thread count");
  peak->add_option("--csv", po->csv, "append rows suite,case,impl,metric,value,unit to FILE");
  peak->add_option("--threads", po->threads, "comma list of thread counts (default 1,2)");
  peak->add_flag("--quick", po->quick, "shorter runs and 64 MiB arrays");
  peak->callback([po, thread_list, &rc] {
    bench::Report report;
    bench::run_peak_bench(thread_list(po->threads), po->quick, report);
    if (!po->csv.empty()) report.write_csv(po->csv);
    rc = 0;
  });
}

}  // namespace sinew::cli
