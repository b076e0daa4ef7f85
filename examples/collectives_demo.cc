// Exercises every collective with verification, then prints a small
// bandwidth table. Run it under the launcher:
//
//   sinew run --standalone --nproc-per-node 4 build/release/bin/collectives_demo
//   sinew run --standalone --nproc-per-node 2 build/release/bin/collectives_demo --backend gloo
//   mpirun -np 2 build/release/bin/collectives_demo --backend mpi
//
// Exits non-zero if any check fails on any rank.
//
// A hang to diagnose: `--skip 1:5 --timeout 5` makes rank 1 skip its
// allreduce at training step 5 (as if a branch sent it elsewhere); the others
// wait for it until the 5 s timeout, every rank dumps its Flight Recorder,
// and `sinew fr analyze /tmp` names the collective and the missing rank.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "sinew/core/error.h"
#include "sinew/dist/init.h"

using namespace sinew;
using namespace sinew::dist;

namespace {

struct Args {
  std::string backend;
  int64_t bw_bytes = 16 << 20;
  int iters = 10;
  int steps = 10;
  int skip_rank = -1;
  int skip_step = -1;
  double timeout_s = 120;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw InvalidArgument::make(s, "nothing", "a value after it");
      return argv[++i];
    };
    if (s == "--backend") a.backend = next();
    else if (s == "--bw-bytes") a.bw_bytes = std::stoll(next());
    else if (s == "--iters") a.iters = std::stoi(next());
    else if (s == "--steps") a.steps = std::stoi(next());
    else if (s == "--timeout") {
      a.timeout_s = std::stod(next());
      if (!(a.timeout_s > 0)) throw InvalidArgument::make("--timeout", fmt::format("{}", a.timeout_s), "seconds > 0");
    } else if (s == "--skip") {
      std::string v = next();
      auto colon = v.find(':');
      if (colon == std::string::npos) throw InvalidArgument::make("--skip", v, "RANK:STEP, e.g. 1:5");
      a.skip_rank = std::stoi(v.substr(0, colon));
      a.skip_step = std::stoi(v.substr(colon + 1));
    } else if (s == "--help" || s == "-h") {
      fmt::print("usage: collectives_demo [--backend sinew|gloo|mpi] [--bw-bytes N] [--iters N] [--steps N]\n"
                 "                        [--skip RANK:STEP] [--timeout SECONDS]\n");
      std::exit(0);
    } else {
      throw InvalidArgument::make("argument", s, "--backend, --bw-bytes, --iters, --steps, --skip or --timeout");
    }
  }
  return a;
}

TensorView f32(std::vector<float>& v) { return TensorView::flat(v.data(), DType::kF32, static_cast<int64_t>(v.size())); }
TensorView i64(std::vector<int64_t>& v) { return TensorView::flat(v.data(), DType::kI64, static_cast<int64_t>(v.size())); }

class Checker {
 public:
  explicit Checker(ProcessGroup& pg) : pg_(pg) {}
  void check(const std::string& name, const std::function<bool()>& body) {
    bool ok = false;
    std::string why;
    try {
      ok = body();
    } catch (const std::exception& e) {
      why = e.what();
    }
    // Every rank learns whether any rank failed.
    int64_t bad = ok ? 0 : 1;
    pg_.allreduce(TensorView::flat(&bad, DType::kI64, 1), ReduceKind::kSum)->wait();
    if (pg_.rank() == 0) fmt::print("  {:<34} {}\n", name, bad == 0 ? "ok" : fmt::format("FAILED on {} rank(s)", bad));
    if (!ok && !why.empty()) fmt::print(stderr, "rank {}: {} failed: {}\n", pg_.rank(), name, why);
    failed_ += bad != 0;
    ++total_;
  }
  int failed() const { return failed_; }
  int total() const { return total_; }

 private:
  ProcessGroup& pg_;
  int failed_ = 0;
  int total_ = 0;
};

}  // namespace

int main(int argc, char** argv) try {
  Args args = parse(argc, argv);
  InitOptions io;
  io.backend = args.backend;
  io.timeout = std::chrono::milliseconds(static_cast<int64_t>(args.timeout_s * 1000));
  auto pg = init_process_group(io);
  pg->wait_ready(Deadline::after(std::chrono::seconds(120)));
  const int W = pg->size(), me = pg->rank();
  if (me == 0) fmt::print("collectives_demo: {} ranks, backend {}\n", W, pg->backend_name());
  if (args.skip_rank >= W)
    throw InvalidArgument::make("--skip", fmt::format("rank {}", args.skip_rank), fmt::format("a rank < {}", W));

  // Training steps: one gradient allreduce each.
  std::vector<float> grad(4096);
  for (int step = 0; step < args.steps; ++step) {
    if (me == args.skip_rank && step == args.skip_step) {
      fmt::print(stderr, "rank {}: skipping the allreduce of step {} (--skip)\n", me, step);
      // Off to other work (say, a checkpoint) that the others never see;
      // the launcher stops this rank once the others have timed out.
      const auto away = std::chrono::milliseconds(static_cast<int64_t>((args.timeout_s + 5) * 1000));
      if (pg->backend_name() == "mpi") {  // no job store
        std::this_thread::sleep_for(away);
        return 1;
      }
      try {
        job_store()->wait({"collectives_demo/never"}, away);
      } catch (const TimeoutError&) {
      }
      return 1;
    }
    std::fill(grad.begin(), grad.end(), static_cast<float>(me + step));
    pg->allreduce(f32(grad))->wait();
    const float want = static_cast<float>(W) * (W - 1) / 2 + static_cast<float>(W) * step;
    if (grad[0] != want) throw InternalError(fmt::format("step {}: allreduce gave {}, expected {}", step, grad[0], want));
  }
  if (me == 0) fmt::print("  {:<34} ok\n", fmt::format("{} training steps", args.steps));
  Checker c(*pg);
  const int64_t n = 1000;

  c.check("allreduce sum/max/min/avg", [&] {
    std::vector<float> v(n);
    bool ok = true;
    for (ReduceKind k : {ReduceKind::kSum, ReduceKind::kMax, ReduceKind::kMin, ReduceKind::kAvg}) {
      for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((me + 1) * (i % 10));
      pg->allreduce(f32(v), k)->wait();
      for (int64_t i = 0; i < n; ++i) {
        float base = static_cast<float>(i % 10);
        float want = k == ReduceKind::kSum ? base * W * (W + 1) / 2
                   : k == ReduceKind::kMax ? base * W
                   : k == ReduceKind::kMin ? base
                   : base * (W + 1) / 2.0f;
        ok &= std::abs(v[i] - want) <= 1e-4f * std::max(1.0f, want);
      }
    }
    return ok;
  });
  c.check("allreduce bxor int64 / premul_sum", [&] {
    std::vector<int64_t> v(n, int64_t{1} << me);
    pg->allreduce(i64(v), ReduceKind::kBxor)->wait();
    std::vector<float> f(n, 1.0f);
    pg->allreduce(f32(f), ReduceOp::premul_sum(0.5))->wait();
    bool ok = true;
    for (int64_t i = 0; i < n; ++i) ok &= v[i] == (int64_t{1} << W) - 1 && f[i] == 0.5f * W;
    return ok;
  });
  c.check("broadcast from last rank", [&] {
    std::vector<int64_t> v(n, me == W - 1 ? 7 : 0);
    pg->broadcast(i64(v), W - 1)->wait();
    return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 7; });
  });
  c.check("reduce to rank 0", [&] {
    std::vector<int64_t> v(n, me + 1);
    pg->reduce(i64(v), 0, ReduceKind::kSum)->wait();
    return me != 0 || std::all_of(v.begin(), v.end(), [&](int64_t x) { return x == int64_t{W} * (W + 1) / 2; });
  });
  c.check("allgather (tensor and list)", [&] {
    std::vector<int64_t> in(n, me), out(n * W);
    pg->allgather_into_tensor(i64(out), i64(in))->wait();
    std::vector<std::vector<int64_t>> lists(W, std::vector<int64_t>(n));
    std::vector<TensorView> views;
    for (auto& l : lists) views.push_back(i64(l));
    pg->allgather(views, i64(in))->wait();
    bool ok = true;
    for (int r = 0; r < W; ++r)
      for (int64_t i = 0; i < n; ++i) ok &= out[r * n + i] == r && lists[r][i] == r;
    return ok;
  });
  c.check("gather / scatter", [&] {
    std::vector<int64_t> in(n, me * 3);
    std::vector<std::vector<int64_t>> lists(W, std::vector<int64_t>(n));
    std::vector<TensorView> views;
    for (auto& l : lists) views.push_back(i64(l));
    pg->gather(me == 0 ? views : std::vector<TensorView>{}, i64(in), 0)->wait();
    bool ok = true;
    if (me == 0)
      for (int r = 0; r < W; ++r) ok &= lists[r][n - 1] == r * 3;
    std::vector<int64_t> got(n, -1);
    pg->scatter(i64(got), me == 0 ? views : std::vector<TensorView>{}, 0)->wait();
    return ok && got[0] == me * 3 && got[n - 1] == me * 3;
  });
  c.check("reduce_scatter", [&] {
    std::vector<int64_t> in(n * W), out(n);
    for (int64_t i = 0; i < n * W; ++i) in[i] = i + me;
    pg->reduce_scatter_tensor(i64(out), i64(in), ReduceKind::kSum)->wait();
    bool ok = true;
    for (int64_t i = 0; i < n; ++i) ok &= out[i] == W * (me * n + i) + int64_t{W} * (W - 1) / 2;
    return ok;
  });
  c.check("all_to_all (even and uneven)", [&] {
    std::vector<int64_t> in(n * W), out(n * W);
    for (int r = 0; r < W; ++r)
      for (int64_t i = 0; i < n; ++i) in[r * n + i] = me * 1000 + r;
    pg->all_to_all(i64(out), i64(in))->wait();
    bool ok = true;
    for (int r = 0; r < W; ++r) ok &= out[r * n] == r * 1000 + me;
    // rank s sends s + 1 elements to everyone
    std::vector<int64_t> ins(W, me + 1), outs(W);
    for (int s = 0; s < W; ++s) outs[s] = s + 1;
    std::vector<int64_t> a(W * (me + 1), me), b(std::accumulate(outs.begin(), outs.end(), int64_t{0}));
    pg->all_to_all_v(i64(b), i64(a), outs, ins)->wait();
    int64_t off = 0;
    for (int s = 0; s < W; ++s)
      for (int64_t i = 0; i < s + 1; ++i) ok &= b[off++] == s;
    return ok;
  });
  c.check("send/recv ring and barrier", [&] {
    if (W == 1) return true;
    std::vector<int64_t> s(n, me), r(n, -1);
    pg->batch_isend_irecv({{P2POp::Kind::kSend, i64(s), (me + 1) % W, 0},
                           {P2POp::Kind::kRecv, i64(r), (me + W - 1) % W, 0}})
        ->wait();
    pg->barrier()->wait();
    return r[0] == (me + W - 1) % W && r[n - 1] == (me + W - 1) % W;
  });
  c.check("split(color=rank%2) allreduce", [&] {
    auto sub = pg->split(me % 2, me);
    int64_t v = 1;
    sub->allreduce(TensorView::flat(&v, DType::kI64, 1))->wait();
    return v == (W + (me % 2 == 0 ? 1 : 0)) / 2;
  });

  // A small bandwidth table (busbw as nccl-tests counts it).
  const int64_t bytes = args.bw_bytes;
  std::vector<float> a(bytes / 4 + W, 1.0f), b(bytes / 4 + W, 0.0f);
  const int64_t cnt = bytes / 4, per = cnt / W;
  struct Row {
    const char* op;
    double factor;
    std::function<void()> run;
  };
  std::vector<Row> rows = {
      {"allreduce", 2.0 * (W - 1) / W, [&] { pg->allreduce(TensorView::flat(a.data(), DType::kF32, cnt))->wait(); }},
      {"allgather", double(W - 1) / W,
       [&] { pg->allgather_into_tensor(TensorView::flat(b.data(), DType::kF32, per * W), TensorView::flat(a.data(), DType::kF32, per))->wait(); }},
      {"reduce_scatter", double(W - 1) / W,
       [&] { pg->reduce_scatter_tensor(TensorView::flat(b.data(), DType::kF32, per), TensorView::flat(a.data(), DType::kF32, per * W))->wait(); }},
      {"broadcast", 1.0, [&] { pg->broadcast(TensorView::flat(a.data(), DType::kF32, cnt), 0)->wait(); }},
      {"all_to_all", double(W - 1) / W,
       [&] { pg->all_to_all(TensorView::flat(b.data(), DType::kF32, per * W), TensorView::flat(a.data(), DType::kF32, per * W))->wait(); }},
  };
  if (me == 0) fmt::print("\n  {:<16} {:>10} {:>12} {:>12}\n", "op", "bytes", "time (us)", "busbw GB/s");
  for (auto& r : rows) {
    r.run();  // warm-up
    pg->barrier()->wait();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < args.iters; ++i) r.run();
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / args.iters;
    pg->allreduce(TensorView::flat(&us, DType::kF64, 1), ReduceKind::kMax)->wait();
    if (me == 0) fmt::print("  {:<16} {:>10} {:>12.1f} {:>12.2f}\n", r.op, bytes, us, bytes / us / 1e3 * r.factor);
  }
  pg->barrier()->wait();
  if (me == 0) fmt::print("\n{} passed, {} failed\n", c.total() - c.failed(), c.failed());
  return c.failed() == 0 ? 0 : 1;
} catch (const sinew::Error& e) {
  fmt::print(stderr, "collectives_demo: {}: {}\n", sinew::error_code_name(e.code()), e.what());
  return 2;
}
