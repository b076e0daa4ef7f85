// `sinew bench <suite>`: the one benchmark front end. Every suite prints a
// readable table and, with --csv FILE, appends rows
// suite,case,impl,metric,value,unit.
#include <fmt/format.h>

#include "bench/collectives_bench.h"
#include "bench/gemm_bench.h"
#include "bench/linalg_bench.h"
#include "bench/peak_bench.h"
#include "bench/peer_env.h"
#include "bench/recovery_bench.h"
#include "tools/sinew/cli_parse.h"
#include "tools/sinew/commands.h"

namespace sinew::cli {
namespace {

constexpr const char* kCsvHelp = "append rows suite,case,impl,metric,value,unit to FILE";

std::vector<int> thread_list(const std::string& text) {
  return parse_int_list32("--threads", text, 1, 4096, "a comma list of thread counts from 1 to 4096");
}

// Prints each metric's table and writes the CSV; the suite's exit status.
int finish(const bench::Report& report, std::initializer_list<const char*> metrics, bool higher_is_better,
           const std::string& csv, int failed) {
  for (const char* metric : metrics) {
    fmt::print("\n");
    report.print_table(metric, higher_is_better);
  }
  if (!csv.empty()) report.write_csv(csv);
  return failed == 0 ? 0 : 1;
}

void add_collectives(CLI::App& bench, CLI::App& app, int& rc) {
  struct Opts {
    std::string csv, ops, impls, min_bytes = "8", max_bytes = "64M", fr = "on";
    int world = 2, samples = 7;
  };
  auto o = std::make_shared<Opts>();
  auto* coll = bench.add_subcommand(
      "collectives",
      "allreduce, allgather, reduce_scatter, broadcast, all_to_all from 8 B to 64 MiB for sinew, sinew-ucx, "
      "gloo, mpi and memcpy in one run");
  coll->add_option("--csv", o->csv, kCsvHelp);
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
    cfg.min_bytes = parse_bytes("--min-bytes", o->min_bytes);
    cfg.max_bytes = parse_bytes("--max-bytes", o->max_bytes);
    bench::Report report;
    const int failed = bench::run_collectives_bench(cfg, report);
    fmt::print("\n");
    report.print_table("busbw_GBps", true);
    rc = finish(report, {"latency_us"}, false, o->csv, failed);
  });

  // The per-rank half of `bench collectives`, started by it (hidden).
  auto w = std::make_shared<bench::CollectivesConfig>();
  auto ops = std::make_shared<std::string>();
  auto* worker = app.add_subcommand("bench-worker", "");
  worker->group("");  // hidden from --help
  worker->add_option("--impl", w->impl)->required();
  worker->add_option("--backend", w->backend);
  worker->add_option("--transport", w->transport);
  worker->add_option("--ops", *ops);
  worker->add_option("--min-bytes", w->min_bytes);
  worker->add_option("--max-bytes", w->max_bytes);
  worker->add_option("--rows", w->rows_path)->required();
  worker->add_option("--samples", w->samples);
  worker->add_option("--fr", w->fr);
  worker->callback([w, ops, &rc] {
    if (!ops->empty()) w->ops = split_list(*ops);
    rc = bench::run_collectives_worker(*w);
  });
}

void add_recovery(CLI::App& bench, CLI::App& app, int& rc) {
  struct Opts {
    std::string csv, worlds = "4,2";
    int trials = 5;
  };
  auto o = std::make_shared<Opts>();
  auto* rec = bench.add_subcommand(
      "recovery",
      "Cost of a rank's death: sinew's detect, revoke, agree and shrink phases beside restarting every worker "
      "(torchrun-style); admitting a new process (grow); what detection costs an 8 B allreduce");
  rec->add_option("--csv", o->csv, kCsvHelp);
  rec->add_option("--ws,--world-size", o->worlds, "comma list of world sizes, each at least 2 (default 4,2)");
  rec->add_option("--trials", o->trials, "trials per world size (median and max reported)")
      ->check(CLI::Range(1, 1000));
  rec->callback([o, &rc] {
    bench::RecoveryConfig cfg;
    cfg.trials = o->trials;
    cfg.worlds = parse_int_list32("--ws", o->worlds, 2, 64, "a comma list of world sizes from 2 to 64");
    bench::Report report;
    const int failed = bench::run_recovery_bench(cfg, report);
    rc = finish(report, {"ms", "ms_max", "us", "us_min", "overhead_pct"}, false, o->csv, failed);
  });

  // The per-rank half of `bench recovery`, started by it (hidden).
  auto rw = std::make_shared<bench::RecoveryConfig>();
  auto* rworker = app.add_subcommand("bench-recovery-worker", "");
  rworker->group("");  // hidden from --help
  rworker->add_option("--mode", rw->mode)
      ->required()
      ->check(CLI::IsMember({"sinew", "doomed", "fresh", "grow", "latency"}));
  rworker->add_option("--victim", rw->victim)->required();
  rworker->add_option("--timeout-s", rw->trial_timeout_s);
  rworker->callback([rw, &rc] { rc = bench::run_recovery_worker(*rw); });
}

void add_linalg(CLI::App& bench, int& rc) {
  struct Opts {
    std::string csv, sizes, threads, ops, dtypes;
    bool quick = false;
  };
  auto o = std::make_shared<Opts>();
  auto* lin = bench.add_subcommand(
      "linalg",
      "Cholesky, QR, eigh and SVD beside OpenBLAS LAPACK (potrf, geqrf+orgqr, syevd, gesvj, gesdd), f64 and f32, "
      "n = 64 to 1024 and a batch of 10,000 32x32 matrices, 1 and 2 threads");
  lin->add_option("--csv", o->csv, kCsvHelp);
  lin->add_option("--sizes", o->sizes, "comma list of matrix orders (default 64,128,256,512,1024)");
  lin->add_option("--threads", o->threads, "comma list of thread counts (default 1,2)");
  lin->add_option("--ops", o->ops, "comma list from cholesky,qr,eigh,svd (default all)");
  lin->add_option("--dtypes", o->dtypes, "comma list from f64,f32 (default both)");
  lin->add_flag("--quick", o->quick, "a short run: n = 64 and 256, a batch of 1,000, few samples");
  lin->callback([o, &rc] {
    bench::LinalgConfig cfg;
    if (o->quick) {
      cfg.sizes = {64, 256};
      cfg.batch = 1000;
      cfg.sample_seconds = 0.05;
      cfg.max_samples = 3;
      cfg.gesvj_max_n = 256;
      cfg.rel_err_max_n = 256;
    }
    if (!o->sizes.empty())
      cfg.sizes = parse_int_list("--sizes", o->sizes, 1, int64_t{1} << 20, "a comma list of positive orders");
    if (!o->threads.empty()) cfg.threads = thread_list(o->threads);
    if (!o->ops.empty()) cfg.ops = split_list(o->ops);
    if (!o->dtypes.empty()) cfg.dtypes = split_list(o->dtypes);
    bench::ensure_peer_bench_env();
    bench::Report report;
    const int failed = bench::run_linalg_bench(cfg, report);
    rc = finish(report, {"ms", "residual", "orthogonality", "rel_err_small_sv"}, false, o->csv, failed);
  });
}

void add_gemm(CLI::App& bench, int& rc) {
  struct Opts {
    std::string csv, threads = "1,2", cache, only;
    bool quick = false, no_eval = false;
  };
  auto o = std::make_shared<Opts>();
  auto* gemm = bench.add_subcommand(
      "gemm",
      "mm/addmm (f32, bf16), scaled_mm (fp8, NVFP4) and the decode GEMV beside OpenBLAS and BLIS, with the FMA "
      "peak and stream bandwidth measured in the same run; squares 256-4096 and transformer MLP shapes");
  gemm->add_option("--csv", o->csv, kCsvHelp);
  gemm->add_option("--threads", o->threads, "comma list of thread counts (default 1,2)");
  gemm->add_option("--cache", o->cache, "keep the tuning cache in FILE (default: tune in memory, save nothing)");
  gemm->add_option("--only", o->only, "comma list: run only cases whose name contains one of these");
  gemm->add_flag("--quick", o->quick, "a subset that finishes in about a minute");
  gemm->add_flag("--no-eval", o->no_eval, "skip the tuned-pick-versus-exhaustive-best evaluation");
  gemm->callback([o, &rc] {
    bench::ensure_peer_bench_env();
    bench::GemmBenchConfig cfg;
    cfg.threads = thread_list(o->threads);
    cfg.quick = o->quick;
    cfg.cache = o->cache;
    cfg.only = split_list(o->only);
    cfg.evaluate = !o->no_eval;
    bench::Report report;
    const int failed = bench::run_gemm_bench(cfg, report);
    rc = finish(report, {"gflops", "frac_of_peak", "GBps"}, true, o->csv, failed);
  });
}

void add_peak(CLI::App& bench, int& rc) {
  struct Opts {
    std::string csv, threads = "1,2";
    bool quick = false;
  };
  auto o = std::make_shared<Opts>();
  auto* peak = bench.add_subcommand(
      "peak", "The machine's f32 FMA and bf16 dot-product peaks and stream triad / copy bandwidth, per thread count");
  peak->add_option("--csv", o->csv, kCsvHelp);
  peak->add_option("--threads", o->threads, "comma list of thread counts (default 1,2)");
  peak->add_flag("--quick", o->quick, "shorter runs and 64 MiB arrays");
  peak->callback([o, &rc] {
    bench::Report report;
    bench::run_peak_bench(thread_list(o->threads), o->quick, report);
    rc = finish(report, {}, false, o->csv, 0);
  });
}

}  // namespace

void add_bench_command(CLI::App& app, int& rc) {
  auto* bench = app.add_subcommand("bench", "Benchmarks: run a suite beside its peers and report ratios");
  bench->require_subcommand(1);
  add_collectives(*bench, app, rc);
  add_recovery(*bench, app, rc);
  add_linalg(*bench, rc);
  add_gemm(*bench, rc);
  add_peak(*bench, rc);
}

}  // namespace sinew::cli
