// `sinew bench collectives`: allreduce, allgather, reduce_scatter, broadcast
// and all_to_all from 8 B to 64 MiB for sinew (shared memory), sinew-ucx,
// gloo and mpi in one run, plus memcpy of the same size as the physical
// reference. The front end hosts the store and spawns the ranks (mpirun for
// mpi); rank 0 of each impl writes its rows to a file the front end reads.
#include "collectives_bench.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "sinew/core/error.h"
#include "sinew/core/log.h"
#include "sinew/dist/flight_recorder.h"
#include "sinew/dist/init.h"
#include "sinew/dist/job.h"
#include "sinew/dist/launch_protocol.h"
#include "sinew/dist/tcp_store.h"
#include "bench_comm.h"
#include "self_exe.h"

namespace sinew::bench {
namespace {

using dist::ProcessGroup;
using dist::ReduceKind;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// nccl-tests' bus bandwidth factors.
double bus_factor(const std::string& op, int W) {
  if (op == "allreduce") return 2.0 * (W - 1) / W;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(W - 1) / W;  // allgather, reduce_scatter, all_to_all
}

std::vector<int64_t> sizes(int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  for (int64_t b = lo; b < hi; b *= 4) out.push_back(b);
  out.push_back(hi);
  return out;
}

// sinew's process groups (native, gloo backends) behind the bench loop.
class PgComm final : public BenchComm {
 public:
  explicit PgComm(dist::ProcessGroupPtr pg) : pg_(std::move(pg)) {}
  int rank() const override { return pg_->rank(); }
  int size() const override { return pg_->size(); }
  void run(const std::string& op, int64_t bytes, float* a, float* b) override {
    const int W = pg_->size();
    const int64_t n = std::max<int64_t>(bytes / 4, 1);
    const int64_t per = std::max<int64_t>(n / W, 1);
    auto fv = [](float* p, int64_t c) { return TensorView::flat(p, DType::kF32, c); };
    if (op == "allreduce") pg_->allreduce(fv(a, n), ReduceKind::kSum)->wait();
    else if (op == "broadcast") pg_->broadcast(fv(a, n), 0)->wait();
    else if (op == "allgather") pg_->allgather_into_tensor(fv(b, per * W), fv(a, per))->wait();
    else if (op == "reduce_scatter") pg_->reduce_scatter_tensor(fv(b, per), fv(a, per * W), ReduceKind::kSum)->wait();
    else if (op == "all_to_all") pg_->all_to_all(fv(b, per * W), fv(a, per * W))->wait();
    else throw InvalidArgument::make("op", op, "allreduce, broadcast, allgather, reduce_scatter or all_to_all");
  }
  void barrier() override { pg_->barrier()->wait(); }
  double max_over_ranks(double v) override {
    pg_->allreduce(TensorView::flat(&v, DType::kF64, 1), ReduceKind::kMax)->wait();
    return v;
  }
  int64_t from_rank0(int64_t v) override {
    pg_->broadcast(TensorView::flat(&v, DType::kI64, 1), 0)->wait();
    return v;
  }

 private:
  dist::ProcessGroupPtr pg_;
};

}  // namespace

int run_collectives_worker(const CollectivesConfig& cfg) {
  std::unique_ptr<BenchComm> comm;
  if (cfg.impl == "mpi") {
    comm = make_mpi_bench_comm();
    if (!comm) throw InvalidArgument::make("impl", "mpi", "a sinew built with SINEW_WITH_MPI=ON");
  } else {
    dist::InitOptions io;
    io.backend = cfg.backend;
    io.transport = cfg.transport;
    io.timeout = Millis(300'000);
    auto pg = dist::init_process_group(io);
    pg->wait_ready(Deadline::after(Millis(120'000)));
    comm = std::make_unique<PgComm>(pg);
  }
  BenchComm& c = *comm;
  const int W = c.size();
  const bool fr_pair = cfg.fr == "pair";
  const int64_t max_bytes = cfg.max_bytes;
  // Buffers are allocated and touched once: we time the transfer, not page faults.
  std::vector<float> a(max_bytes / 4 + W), b(max_bytes / 4 + W);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7);
  std::fill(b.begin(), b.end(), 0.0f);
  std::ofstream rows;
  if (c.rank() == 0) rows.open(cfg.rows_path);
  // Warm every path once so the first case does not pay for lazy setup.
  for (const auto& op : cfg.ops) c.run(op, std::min<int64_t>(max_bytes, 1 << 20), a.data(), b.data());
  for (const auto& op : cfg.ops) {
    for (int64_t bytes : sizes(cfg.min_bytes, max_bytes)) {
      // Refresh inputs so repeated sums stay finite.
      c.run(op, bytes, a.data(), b.data());
      double t0 = now_s();
      c.run(op, bytes, a.data(), b.data());
      double est = c.max_over_ranks(now_s() - t0);
      int64_t iters = c.from_rank0(std::clamp<int64_t>(static_cast<int64_t>(cfg.sample_seconds / std::max(est, 1e-7)), 1, 2000));
      int samples = est > 0.05 ? 3 : cfg.samples;
      // In pair mode samples alternate recording on/off, so drift on this
      // shared machine hits both alike; the order within a pair alternates
      // too (on-off, off-on, ...), so that whatever favours the first or
      // the second sample of a pair cancels out.
      const bool pair = fr_pair && cfg.impl != "mpi";
      std::vector<double> t, t_off;
      for (int s = 0; s < samples * (pair ? 2 : 1); ++s) {
        const bool off = pair && (s % 2 == 1) != (s / 2 % 2 == 1);
        if (pair) dist::set_flight_recorder_recording(!off);
        c.barrier();
        double s0 = now_s();
        for (int64_t i = 0; i < iters; ++i) c.run(op, bytes, a.data(), b.data());
        (off ? t_off : t).push_back(c.max_over_ranks((now_s() - s0) / static_cast<double>(iters)));
      }
      if (pair) dist::set_flight_recorder_recording(true);
      if (c.rank() == 0) {
        const std::string cs = fmt::format("{}/float32/{}B/ws{}", op, bytes, W);
        auto emit = [&](const std::string& impl, double sec) {
          double algbw = static_cast<double>(bytes) / sec / 1e9;
          rows << fmt::format("collectives,{},{},latency_us,{:.6g},us\n", cs, impl, sec * 1e6);
          rows << fmt::format("collectives,{},{},algbw_GBps,{:.6g},GB/s\n", cs, impl, algbw);
          rows << fmt::format("collectives,{},{},busbw_GBps,{:.6g},GB/s\n", cs, impl, algbw * bus_factor(op, W));
          fmt::print(stderr, "  {:<8} {:<40} {:>10.2f} us {:>8.3f} GB/s busbw\n", impl, cs, sec * 1e6,
                     algbw * bus_factor(op, W));
        };
        emit(cfg.impl, median(t));
        if (pair) {
          emit(cfg.impl + "-fr-off", median(t_off));
          // Each on sample against the off sample of its pair: the two
          // share the machine's state of the moment (another job on a core,
          // a frequency step), which a ratio of the two medians mixes in.
          std::vector<double> ratio;
          for (size_t i = 0; i < t.size() && i < t_off.size(); ++i) ratio.push_back(t[i] / t_off[i]);
          rows << fmt::format("collectives,{},{},fr_overhead_pct,{:.4g},%\n", cs, cfg.impl, (median(ratio) - 1) * 100);
        }
        rows.flush();
      }
    }
  }
  if (fr_pair && cfg.impl != "mpi" && c.rank() == 0) {
    // What a dump of the full ring costs (the ring is full by now).
    std::vector<double> json_ms, file_ms;
    for (int i = 0; i < 5; ++i) {
      double t0 = now_s();
      auto text = dist::flight_recorder_json("bench");
      json_ms.push_back((now_s() - t0) * 1e3);
      t0 = now_s();
      auto path = dist::dump_flight_recorder("bench");
      file_ms.push_back((now_s() - t0) * 1e3);
      std::remove(path.c_str());
    }
    const std::string cs = fmt::format("dump/{}", dist::flight_recorder_capacity());
    rows << fmt::format("flight_recorder,{},{},render_ms,{:.4g},ms\n", cs, cfg.impl, median(json_ms));
    rows << fmt::format("flight_recorder,{},{},dump_ms,{:.4g},ms\n", cs, cfg.impl, median(file_ms));
    fmt::print(stderr, "  {:<8} {:<40} {:>10.2f} ms to render, {:.2f} ms to write\n", cfg.impl, cs,
               median(json_ms), median(file_ms));
  }
  c.barrier();
  return 0;
}

namespace {

void spawn(dist::Job& job, const std::vector<std::string>& argv, const std::vector<std::string>& extra_env) {
  dist::ProcessSpec p;
  p.argv = argv;
  p.env = dist::inherited_env();
  for (const auto& kv : extra_env) {
    const auto eq = kv.find('=');
    dist::set_env(p.env, kv.substr(0, eq), kv.substr(eq + 1));
  }
  p.rank = static_cast<int>(job.size());
  job.spawn(std::move(p));
}

// Waits for every process; kills all at the deadline. True if all exited 0.
bool wait_all(dist::Job& job, Deadline deadline, const std::string& what) {
  if (!job.wait(deadline)) {
    SINEW_WARN(kBench, "{} did not finish in time; killing it", what);
    job.stop(Millis(0), SIGKILL);
    return false;
  }
  for (const auto& r : job.results())
    if (!dist::succeeded(r)) return false;
  return true;
}

std::vector<std::string> worker_args(const CollectivesConfig& cfg) {
  std::string ops;
  for (const auto& o : cfg.ops) ops += (ops.empty() ? "" : ",") + o;
  return {"bench-worker", "--impl", cfg.impl, "--backend", cfg.backend, "--transport", cfg.transport,
          "--ops", ops, "--min-bytes", std::to_string(cfg.min_bytes), "--max-bytes", std::to_string(cfg.max_bytes),
          "--rows", cfg.rows_path, "--samples", std::to_string(cfg.samples), "--fr", cfg.fr};
}

void read_rows(const std::string& path, Report& report) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    Row r;
    std::string v;
    std::getline(ss, r.suite, ',');
    std::getline(ss, r.case_name, ',');
    std::getline(ss, r.impl, ',');
    std::getline(ss, r.metric, ',');
    std::getline(ss, v, ',');
    std::getline(ss, r.unit, ',');
    if (r.metric.empty()) continue;
    r.value = std::stod(v);
    report.add(r);
  }
}

void memcpy_rows(const CollectivesConfig& cfg, Report& report) {
  std::vector<char> a(cfg.max_bytes), b(cfg.max_bytes);
  std::memset(a.data(), 1, a.size());
  std::memset(b.data(), 2, b.size());
  for (const auto& op : cfg.ops)
    for (int64_t bytes : sizes(cfg.min_bytes, cfg.max_bytes)) {
      int iters = static_cast<int>(std::clamp<int64_t>((int64_t{1} << 28) / bytes, 1, 100000));
      std::vector<double> t;
      for (int s = 0; s < cfg.samples; ++s) {
        double t0 = now_s();
        for (int i = 0; i < iters; ++i) {
          std::memcpy(b.data(), a.data(), bytes);
          asm volatile("" ::"r"(b.data()) : "memory");
        }
        t.push_back((now_s() - t0) / iters);
      }
      double sec = median(t);
      std::string c = fmt::format("{}/float32/{}B/ws{}", op, bytes, cfg.world);
      report.add({"collectives", c, "memcpy", "latency_us", sec * 1e6, "us"});
      report.add({"collectives", c, "memcpy", "algbw_GBps", bytes / sec / 1e9, "GB/s"});
      report.add({"collectives", c, "memcpy", "busbw_GBps", bytes / sec / 1e9, "GB/s"});
    }
}

}  // namespace

int run_collectives_bench(CollectivesConfig cfg, Report& report) {
  const std::string exe = self_exe();
  char tmpl[] = "/tmp/sinew-bench-XXXXXX";
  if (!::mkdtemp(tmpl)) throw IoError("mkdtemp failed");
  const std::string dir = tmpl;
  int failures = 0;
  for (const auto& impl : cfg.impls) {
    if (impl == "memcpy") {
      memcpy_rows(cfg, report);
      continue;
    }
    CollectivesConfig c = cfg;
    c.impl = impl;
    c.rows_path = dir + "/" + impl + ".csv";
    c.backend = impl == "gloo" ? "gloo" : impl == "mpi" ? "mpi" : "sinew";
    c.transport = impl == "sinew-ucx" ? "ucx" : "auto";
    fmt::print(stderr, "sinew bench collectives: {} with {} ranks...\n", impl, cfg.world);
    std::unique_ptr<dist::TcpStoreServer> srv;
    dist::Job job;  // after the store: the ranks go first
    // Peers at their best: huge-page malloc for their temporaries (BASELINES.md).
    // Loopback only (UCX and MPI would otherwise probe every interface).
    std::vector<std::string> env = {"GLIBC_TUNABLES=glibc.malloc.hugetlb=1", "UCX_NET_DEVICES=lo"};
    if (cfg.fr == "off") env.push_back("SINEW_FR_BUFFER_SIZE=0");
    // Pair mode's dumps go to the scratch dir (they are timed, then deleted).
    env.push_back("SINEW_FR_DUMP_TEMP_FILE=" + dir + "/fr_" + impl + "_rank_");
    if (impl == "mpi") {
      std::vector<std::string> argv = {"mpirun", "--allow-run-as-root", "-np", std::to_string(cfg.world), "--mca", "btl", "self,vader", "-x",
                                       "GLIBC_TUNABLES", "--mca", "btl_tcp_if_include", "lo",
                                       "--mca", "oob_tcp_if_include", "lo",
                                       // containers here forbid CMA single-copy
                                       "--mca", "btl_vader_single_copy_mechanism", "none", exe};
      for (auto& a : worker_args(c)) argv.push_back(a);
      // Past the core count OpenMPI needs --oversubscribe (and then yields
      // while polling, as it should on a shared machine).
      if (cfg.world > static_cast<int>(std::thread::hardware_concurrency()))
        argv.insert(argv.begin() + 2, "--oversubscribe");
      env.push_back("OMPI_ALLOW_RUN_AS_ROOT=1");
      env.push_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
      spawn(job, argv, env);
    } else {
      std::string token = dist::make_job_token();
      // The store lives in this process, like `sinew run` hosts it.
      srv = std::make_unique<dist::TcpStoreServer>("127.0.0.1", 0, token);
      for (int r = 0; r < cfg.world; ++r) {
        std::vector<std::string> e = env;
        namespace ev = dist::launch::env;
        for (const auto& [k, v] : std::vector<std::pair<const char*, std::string>>{
                 {ev::kRank, std::to_string(r)},
                 {ev::kLocalRank, std::to_string(r)},
                 {ev::kWorldSize, std::to_string(cfg.world)},
                 {ev::kLocalWorldSize, std::to_string(cfg.world)},
                 {ev::kMasterAddr, "127.0.0.1"},
                 {ev::kMasterPort, std::to_string(srv->port())},
                 {ev::kStoreToken, token},
                 {ev::kStoreHosted, "1"}})
          e.push_back(std::string(k) + "=" + v);
        std::vector<std::string> argv = {exe};
        for (auto& a : worker_args(c)) argv.push_back(a);
        spawn(job, argv, e);
      }
    }
    if (!wait_all(job, Deadline::after(std::chrono::seconds(cfg.timeout_s)), impl)) ++failures;
    read_rows(c.rows_path, report);
  }
  std::string rm = "rm -rf '" + dir + "'";
  (void)!std::system(rm.c_str());
  return failures;
}

}  // namespace sinew::bench
