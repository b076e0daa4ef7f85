// The collective checks every backend must pass, shared by the gloo test
// (ranks as threads, GoogleTest) and the MPI check program (ranks as
// processes, plain main). A check runs on one rank of a group and records
// what it saw in a CheckLog. Inputs are integer-valued (or halves) so every
// expected value is exact whatever order a backend reduces in.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "sinew/dist/process_group.h"

namespace sinew::dist::checks {

struct CheckLog {
  int passed = 0;
  std::vector<std::string> failures;

  void expect(bool ok, const std::string& what) {
    if (ok) ++passed;
    else failures.push_back(what);
  }
  template <class T>
  void expect_eq(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
    expect(got == want, fmt::format("{}: got {}, want {}", what, got, want));
  }
};

// Runs fn, recording an exception as a failure of `name`.
template <class F>
void guarded(CheckLog& log, const std::string& name, F&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    log.failures.push_back(fmt::format("{}: threw {}", name, e.what()));
  }
}

// `work` must fail with an E (before the deadline) whose message holds `needle`.
template <class E>
void expect_wait_fails(CheckLog& log, Work& work, Deadline deadline, const std::string& what,
                       const std::string& needle) {
  try {
    work.wait(deadline);
    log.expect(false, what + " completed");
  } catch (const E& e) {
    log.expect(std::string(e.what()).find(needle) != std::string::npos,
               fmt::format("{}: the error names '{}': {}", what, needle, e.what()));
  } catch (const std::exception& e) {
    log.expect(false, fmt::format("{}: failed otherwise than expected: {}", what, e.what()));
  }
}

// A plain check program's results (ranks as processes, no GoogleTest): runs
// each check guarded, prints its failures as "[rank R] FAILED <check>: ..."
// and ends with the summary line and the exit code.
struct CheckTally {
  int rank = -1;
  int passed = 0, failed = 0;

  // fn(CheckLog&) records what the check saw.
  template <class F>
  void run(const std::string& name, F&& fn) {
    CheckLog log;
    guarded(log, name, [&] { fn(log); });
    passed += log.passed;
    failed += static_cast<int>(log.failures.size());
    for (const auto& f : log.failures) std::printf("[rank %d] FAILED %s: %s\n", rank, name.c_str(), f.c_str());
    std::fflush(stdout);
  }
  void setup_failed(const std::exception& e) {
    std::printf("[rank %d] FAILED setup: %s\n", rank, e.what());
    ++failed;
  }
  int finish() const {
    std::printf("[rank %d] %d passed, %d failed\n", rank, passed, failed);
    std::fflush(stdout);
    return failed == 0 ? 0 : 1;
  }
};

template <class T>
TensorView flat(std::vector<T>& v, DType dtype) {
  return TensorView::flat(v.data(), dtype, static_cast<int64_t>(v.size()));
}

// sum / prod / min / max over ranks s of f(s), as double.
template <class F>
double fold(int n, ReduceKind k, F&& f) {
  double acc = f(0);
  for (int s = 1; s < n; ++s) {
    double v = f(s);
    if (k == ReduceKind::kProd) acc *= v;
    else if (k == ReduceKind::kMin) acc = std::min(acc, v);
    else if (k == ReduceKind::kMax) acc = std::max(acc, v);
    else acc += v;
  }
  return acc;
}

inline void check_allreduce_ops(ProcessGroup& pg, CheckLog& log) {
  const int n = pg.size(), r = pg.rank();
  const ReduceOp ops[] = {ReduceKind::kSum, ReduceKind::kProd, ReduceKind::kMin, ReduceKind::kMax,
                          ReduceKind::kAvg, ReduceOp::premul_sum(0.5)};
  for (const auto& op : ops) {
    std::vector<float> x(5), want(5);
    for (int i = 0; i < 5; ++i) {
      x[i] = static_cast<float>(r + 1 + i);
      double v = fold(n, op.kind, [&](int s) { return s + 1.0 + i; });
      if (op.kind == ReduceKind::kAvg) v /= n;
      if (op.kind == ReduceKind::kPremulSum) v *= 0.5;
      want[i] = static_cast<float>(v);
    }
    pg.allreduce(flat(x, DType::kF32), op)->wait();
    log.expect_eq(x, want, "allreduce float32 " + op.name());
  }
}

inline void check_allreduce_dtypes(ProcessGroup& pg, CheckLog& log) {
  const int n = pg.size(), r = pg.rank();
  {
    std::vector<int32_t> x(4), want(4);
    for (int i = 0; i < 4; ++i) {
      x[i] = (r + 1) * 1000 + i;
      want[i] = 1000 * n * (n + 1) / 2 + n * i;
    }
    pg.allreduce(flat(x, DType::kI32))->wait();
    log.expect_eq(x, want, "allreduce int32 sum");
  }
  {
    std::vector<double> x(3), want(3);
    for (int i = 0; i < 3; ++i) {
      x[i] = (r + 1) * 0.5 + i;
      want[i] = 0.25 * n * (n + 1) + n * i;
    }
    pg.allreduce(flat(x, DType::kF64))->wait();
    log.expect_eq(x, want, "allreduce float64 sum");
  }
  {
    std::vector<uint16_t> x(4);
    std::vector<float> got(4), want(4);
    for (int i = 0; i < 4; ++i) {
      x[i] = f32_to_bf16(static_cast<float>(r + i));
      want[i] = static_cast<float>(n * (n - 1) / 2 + n * i);
    }
    pg.allreduce(flat(x, DType::kBF16))->wait();
    for (int i = 0; i < 4; ++i) got[i] = bf16_to_f32(x[i]);
    log.expect_eq(got, want, "allreduce bfloat16 sum");
  }
  {
    std::vector<uint16_t> x(3);
    std::vector<float> got(3), want(3);
    for (int i = 0; i < 3; ++i) {
      x[i] = f32_to_f16(static_cast<float>(r * i));
      want[i] = static_cast<float>((n - 1) * i);
    }
    pg.allreduce(flat(x, DType::kF16), ReduceKind::kMax)->wait();
    for (int i = 0; i < 3; ++i) got[i] = f16_to_f32(x[i]);
    log.expect_eq(got, want, "allreduce float16 max");
  }
  {
    std::vector<uint8_t> x = {f32_to_e4m3fn(static_cast<float>(r + 1)), f32_to_e4m3fn(2.0f * (r + 1))};
    pg.allreduce(flat(x, DType::kF8E4M3FN))->wait();
    std::vector<float> got = {e4m3fn_to_f32(x[0]), e4m3fn_to_f32(x[1])};
    const float s = static_cast<float>(n * (n + 1) / 2);
    log.expect_eq(got, std::vector<float>{s, 2 * s}, "allreduce float8_e4m3fn sum");
  }
  {
    std::vector<uint8_t> x = {f32_to_e5m2(static_cast<float>(r + 1))};
    pg.allreduce(flat(x, DType::kF8E5M2), ReduceKind::kMax)->wait();
    log.expect_eq(std::vector<float>{e5m2_to_f32(x[0])}, std::vector<float>{static_cast<float>(n)},
                  "allreduce float8_e5m2 max");
  }
  {
    std::vector<int8_t> x(3), want(3);
    for (int i = 0; i < 3; ++i) {
      x[i] = static_cast<int8_t>(r + 1 + i);
      want[i] = static_cast<int8_t>(n * (n + 1) / 2 + n * i);
    }
    pg.allreduce(flat(x, DType::kI8))->wait();
    log.expect_eq(x, want, "allreduce int8 sum");
  }
  {
    std::vector<uint8_t> x(3), want(3);
    for (int i = 0; i < 3; ++i) {
      x[i] = static_cast<uint8_t>(200 + r - i);
      want[i] = static_cast<uint8_t>(200 - i);
    }
    pg.allreduce(flat(x, DType::kU8), ReduceKind::kMin)->wait();
    log.expect_eq(x, want, "allreduce uint8 min");
  }
  {
    std::vector<int64_t> x = {int64_t{1} << (r + 3), ~(int64_t{1} << r)};
    int64_t bits = 0;
    for (int s = 0; s < n; ++s) bits |= int64_t{1} << s;
    std::vector<int64_t> band = x;
    pg.allreduce(flat(x, DType::kI64), ReduceKind::kBxor)->wait();
    log.expect(x[0] == bits << 3, fmt::format("allreduce int64 bxor: got {:#x}, want {:#x}", x[0], bits << 3));
    pg.allreduce(flat(band, DType::kI64), ReduceKind::kBand)->wait();
    log.expect(band[1] == ~bits, fmt::format("allreduce int64 band: got {:#x}, want {:#x}", band[1], ~bits));
  }
  {
    // bool: sum is logical or, prod is logical and (as in PyTorch).
    std::vector<uint8_t> any(5), all(5), bor(5), want_any(5), want_all(5);
    for (int i = 0; i < 5; ++i) {
      any[i] = bor[i] = i == r;
      all[i] = i != r;
      want_any[i] = i < n;
      want_all[i] = i >= n;
    }
    pg.allreduce(flat(any, DType::kBool))->wait();
    pg.allreduce(flat(bor, DType::kBool), ReduceKind::kBor)->wait();
    pg.allreduce(flat(all, DType::kBool), ReduceKind::kProd)->wait();
    log.expect_eq(any, want_any, "allreduce bool sum");
    log.expect_eq(bor, want_any, "allreduce bool bor");
    log.expect_eq(all, want_all, "allreduce bool prod");
  }
}

inline void check_broadcast(ProcessGroup& pg, CheckLog& log) {
  const int n = pg.size(), r = pg.rank(), root = n - 1;
  std::vector<int64_t> x(7), want(7);
  for (int i = 0; i < 7; ++i) {
    x[i] = r == root ? 100 + i : -1;
    want[i] = 100 + i;
  }
  pg.broadcast(flat(x, DType::kI64), root)->wait();
  log.expect_eq(x, want, fmt::format("broadcast from {}", root));
}

inline void check_reduce(ProcessGroup& pg, CheckLog& log) {
  const int n = pg.size(), r = pg.rank();
  std::vector<int32_t> x(4), mine(4), want(4);
  for (int i = 0; i < 4; ++i) {
    x[i] = mine[i] = r * 3 + i;
    want[i] = 3 * n * (n - 1) / 2 + n * i;
  }
  pg.reduce(flat(x, DType::kI32), 0)->wait();
  log.expect_eq(x, r == 0 ? want : mine, "reduce int32 sum to 0 (non-roots unchanged)");

  const int root = n - 1;
  std::vector<float> y(3), ymine(3), ywant(3);
  for (int i = 0; i < 3; ++i) {
    y[i] = ymine[i] = static_cast<float>(r + 1 + i);
    ywant[i] = static_cast<float>((n + 1) / 2.0 + i);
  }
  pg.reduce(flat(y, DType::kF32), root, ReduceKind::kAvg)->wait();
  log.expect_eq(y, r == root ? ywant : ymine, fmt::format("reduce float32 avg to {}", root));
  std::vector<float> z(2), zmine(2), zwant(2);
  for (int i = 0; i < 2; ++i) {
    z[i] = zmine[i] = static_cast<float>(r + i);
    zwant[i] = static_cast<float>(2.0 * (n * (n - 1) / 2 + n * i));
  }
  pg.reduce(flat(z, DType::kF32), root, ReduceOp::premul_sum(2.0))->wait();
  log.expect_eq(z, r == root ? zwant : zmine, fmt::format("reduce float32 premul_sum(2) to {}", root));
}

inline void check_allgather(ProcessGroup& pg, CheckLog& log) {
  const int n = pg.size(), r = pg.rank();
  std::vector<float> in = {r * 10.0f, r * 10.0f + 1};
  std::vector<std::vector<float>> outs(n, std::vector<float>(2, -1));
  std::vector<TensorView> views;
  for (auto& o : outs) views.push_back(flat(o, DType::kF32));
  pg.allgather(views, flat(in, DType::kF32))->wait();
  for (int k = 0; k < n; ++k)
    log.expect_eq(outs[k], std::vector<float>{k * 10.0f, k * 10.0f + 1}, fmt::format("allgather list [{}]", k));

  std::vector<int32_t> in2 = {r * 100, r * 100 + 1, r * 100 + 2};
  std::vector<int32_t> out2(3 * n, -1), want2;
  for (int k = 0; k < n; ++k)
    for (int j = 0; j < 3; ++j) want2.push_back(k * 100 + j);
  pg.allgather_into_tensor(flat(out2, DType::kI32), flat(in2, DType::kI32))->wait();
  log.expect_eq(out2, want2, "allgather_into_tensor");
}

inline void check_gather_scatter(ProcessGroup& pg, CheckLog& log) {
  const int n = pg.size(), r = pg.rank(), groot = n - 1;
  std::vector<int64_t> in = {r, -r};
  std::vector<std::vector<int64_t>> outs(n, std::vector<int64_t>(2, 99));
  std::vector<TensorView> views;
  if (r == groot)
    for (auto& o : outs) views.push_back(flat(o, DType::kI64));
  pg.gather(views, flat(in, DType::kI64), groot)->wait();
  if (r == groot)
    for (int k = 0; k < n; ++k)
      log.expect_eq(outs[k], std::vector<int64_t>{k, -k}, fmt::format("gather to {} [{}]", groot, k));

  std::vector<std::vector<float>> ins(n);
  std::vector<TensorView> in_views;
  for (int k = 0; k < n; ++k) ins[k] = {k * 7.0f, k * 7.0f + 1, k * 7.0f + 2};
  if (r == 0)
    for (auto& i : ins) in_views.push_back(flat(i, DType::kF32));
  std::vector<float> out(3, -1);
  pg.scatter(flat(out, DType::kF32), in_views, 0)->wait();
  log.expect_eq(out, ins[r], "scatter from 0");
}

inline void check_reduce_scatter(ProcessGroup& pg, CheckLog& log) {
  const int n = pg.size(), r = pg.rank();
  std::vector<std::vector<int32_t>> ins(n);
  std::vector<TensorView> views;
  for (int k = 0; k < n; ++k) {
    ins[k] = {(r + 1) * (k + 1), (r + 1) * (k + 1) + 1};
    views.push_back(flat(ins[k], DType::kI32));
  }
  std::vector<int32_t> out(2, -1);
  pg.reduce_scatter(flat(out, DType::kI32), views)->wait();
  const int tri = n * (n + 1) / 2;
  log.expect_eq(out, std::vector<int32_t>{(r + 1) * tri, (r + 1) * tri + n}, "reduce_scatter list sum");

  std::vector<float> in(3 * n);
  for (int k = 0; k < n; ++k)
    for (int j = 0; j < 3; ++j) in[k * 3 + j] = static_cast<float>(r + k + j);
  const std::vector<float> original = in;
  auto want = [&](double scale, bool avg) {
    std::vector<float> w(3);
    for (int j = 0; j < 3; ++j) {
      double v = n * (n - 1) / 2.0 + n * (r + j);
      w[j] = static_cast<float>(avg ? v / n : v * scale);
    }
    return w;
  };
  std::vector<float> o(3, -1);
  pg.reduce_scatter_tensor(flat(o, DType::kF32), flat(in, DType::kF32))->wait();
  log.expect_eq(o, want(1, false), "reduce_scatter_tensor sum");
  pg.reduce_scatter_tensor(flat(o, DType::kF32), flat(in, DType::kF32), ReduceOp::premul_sum(2.0))->wait();
  log.expect_eq(o, want(2, false), "reduce_scatter_tensor premul_sum(2)");
  pg.reduce_scatter_tensor(flat(o, DType::kF32), flat(in, DType::kF32), ReduceKind::kAvg)->wait();
  log.expect_eq(o, want(1, true), "reduce_scatter_tensor avg");
  log.expect_eq(in, original, "reduce_scatter_tensor leaves its input unchanged");
}

inline void check_all_to_all(ProcessGroup& pg, CheckLog& log) {
  const int n = pg.size(), r = pg.rank();
  std::vector<int32_t> in(2 * n), out(2 * n, -1), want(2 * n);
  for (int k = 0; k < n; ++k)
    for (int j = 0; j < 2; ++j) {
      in[k * 2 + j] = r * 100 + k * 10 + j;
      want[k * 2 + j] = k * 100 + r * 10 + j;
    }
  pg.all_to_all(flat(out, DType::kI32), flat(in, DType::kI32))->wait();
  log.expect_eq(out, want, "all_to_all even");

  // Rank s sends c(s, k) elements to rank k; some counts are zero.
  auto c = [](int s, int k) { return static_cast<int64_t>((s + 2 * k + 1) % 3); };
  std::vector<int64_t> in_splits, out_splits;
  std::vector<int64_t> vin, vwant;
  for (int k = 0; k < n; ++k) {
    in_splits.push_back(c(r, k));
    for (int j = 0; j < c(r, k); ++j) vin.push_back(r * 100 + k * 10 + j);
  }
  for (int s = 0; s < n; ++s) {
    out_splits.push_back(c(s, r));
    for (int j = 0; j < c(s, r); ++j) vwant.push_back(s * 100 + r * 10 + j);
  }
  std::vector<int64_t> vout(vwant.size(), -1);
  pg.all_to_all_v(flat(vout, DType::kI64), flat(vin, DType::kI64), out_splits, in_splits)->wait();
  log.expect_eq(vout, vwant, fmt::format("all_to_all_v uneven (in splits {}, out splits {})", in_splits, out_splits));
}

inline void check_barrier(ProcessGroup& pg, CheckLog& log) {
  auto w = pg.barrier();
  w->wait();
  log.expect(w->is_success(), "barrier completes");
}

inline void check_send_recv(ProcessGroup& pg, CheckLog& log) {
  if (pg.size() < 2) return;
  if (pg.rank() == 0) {
    std::vector<float> x = {1, 2, 3}, y(3, -1);
    pg.send(flat(x, DType::kF32), 1, 3)->wait();
    pg.recv(flat(y, DType::kF32), 1, 4)->wait();
    log.expect_eq(y, std::vector<float>{2, 4, 6}, "send/recv reply from 1");
  } else if (pg.rank() == 1) {
    std::vector<float> x(3, -1);
    pg.recv(flat(x, DType::kF32), 0, 3)->wait();
    log.expect_eq(x, std::vector<float>{1, 2, 3}, "recv from 0");
    for (auto& v : x) v *= 2;
    pg.send(flat(x, DType::kF32), 0, 4)->wait();
  }
}

inline void check_batch_p2p_ring(ProcessGroup& pg, CheckLog& log) {
  const int n = pg.size(), r = pg.rank();
  if (n < 2) return;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  std::vector<double> out = {r * 1.0, r + 0.5}, in(2, -1);
  pg.batch_isend_irecv({P2POp{P2POp::Kind::kRecv, flat(in, DType::kF64), prev, 5},
                        P2POp{P2POp::Kind::kSend, flat(out, DType::kF64), next, 5}})
      ->wait();
  log.expect_eq(in, std::vector<double>{prev * 1.0, prev + 0.5}, "batch_isend_irecv ring");
}

inline void check_subgroups(ProcessGroup& pg, CheckLog& log) {
  const int n = pg.size(), r = pg.rank();
  // Even and odd ranks, each ordered by descending rank (key = -rank).
  auto sub = pg.split(r % 2, -r);
  std::vector<int> members;
  for (int s = n - 1; s >= 0; --s)
    if (s % 2 == r % 2) members.push_back(s);
  if (!sub) {
    log.expect(false, "split(rank % 2) returned nullptr");
    return;
  }
  const int want_rank = static_cast<int>(std::find(members.begin(), members.end(), r) - members.begin());
  log.expect(sub->size() == static_cast<int>(members.size()) && sub->rank() == want_rank,
             fmt::format("split: rank {} of {}, want {} of {}", sub->rank(), sub->size(), want_rank, members.size()));
  std::vector<int32_t> x = {r + 1};
  int32_t sum = 0;
  for (int s : members) sum += s + 1;
  sub->allreduce(flat(x, DType::kI32))->wait();
  log.expect_eq(x, std::vector<int32_t>{sum}, "allreduce on split subgroup");

  auto rest = pg.split(r == 0 ? -1 : 0, r);
  log.expect((r == 0) == (rest == nullptr), "split with color -1 gives nullptr");
  if (rest) {
    std::vector<int32_t> y = {1};
    rest->allreduce(flat(y, DType::kI32))->wait();
    log.expect_eq(y, std::vector<int32_t>{n - 1}, "allreduce on split without rank 0");
  }

  const std::vector<int> ranks = n > 1 ? std::vector<int>{n - 1, 0} : std::vector<int>{0};
  auto g = pg.new_group(ranks);
  const bool member = r == 0 || r == n - 1;
  log.expect(member == (g != nullptr), "new_group gives nullptr exactly to non-members");
  if (g) {
    log.expect(g->rank() == (r == n - 1 ? 0 : 1) && g->size() == static_cast<int>(ranks.size()),
               fmt::format("new_group({}): rank {} of {}", ranks, g->rank(), g->size()));
    std::vector<int32_t> z = {r + 1};
    g->allreduce(flat(z, DType::kI32))->wait();
    log.expect_eq(z, std::vector<int32_t>{n > 1 ? n + 1 : 1}, "allreduce on new_group");
  }
}

inline void check_zero_elements(ProcessGroup& pg, CheckLog& log) {
  const int n = pg.size(), r = pg.rank();
  std::vector<float> empty;
  const TensorView e = flat(empty, DType::kF32);
  pg.allreduce(e)->wait();
  pg.allreduce(e, ReduceKind::kAvg)->wait();
  pg.broadcast(e, 0)->wait();
  pg.reduce(e, 0)->wait();
  pg.allgather_into_tensor(e, e)->wait();
  pg.reduce_scatter_tensor(e, e)->wait();
  pg.all_to_all(e, e)->wait();
  std::vector<TensorView> list(n, e);
  pg.allgather(list, e)->wait();
  pg.gather(r == 0 ? list : std::vector<TensorView>{}, e, 0)->wait();
  pg.scatter(e, r == 0 ? list : std::vector<TensorView>{}, 0)->wait();
  if (n > 1)
    pg.batch_isend_irecv({P2POp{P2POp::Kind::kSend, e, (r + 1) % n, 6},
                          P2POp{P2POp::Kind::kRecv, e, (r + n - 1) % n, 6}})
        ->wait();
  // Still in step afterwards.
  std::vector<int32_t> x = {1};
  pg.allreduce(flat(x, DType::kI32))->wait();
  log.expect_eq(x, std::vector<int32_t>{n}, "allreduce after zero-element ops");
}

inline void check_strided(ProcessGroup& pg, CheckLog& log) {
  const int n = pg.size(), r = pg.rank();
  // Column 1 of a 3x4 row-major matrix: 3 elements, stride 4.
  std::vector<float> m(12), want(12);
  for (int k = 0; k < 12; ++k) m[k] = want[k] = 1000.0f + k;
  for (int i = 0; i < 3; ++i) {
    m[i * 4 + 1] = static_cast<float>(r + 1 + i);
    want[i * 4 + 1] = static_cast<float>(n * (n + 1) / 2 + n * i);
  }
  TensorView col(m.data() + 1, DType::kF32, {3}, {4});
  pg.allreduce(col)->wait();
  log.expect_eq(m, want, "allreduce on a strided column (other elements unchanged)");

  // Every other element as the output of allgather_into_tensor.
  std::vector<int32_t> in = {r + 7};
  std::vector<int32_t> t(2 * n, -1), twant(2 * n, -1);
  for (int k = 0; k < n; ++k) twant[2 * k] = k + 7;
  TensorView every_other(t.data(), DType::kI32, {static_cast<int64_t>(n)}, {2});
  pg.allgather_into_tensor(every_other, flat(in, DType::kI32))->wait();
  log.expect_eq(t, twant, "allgather_into_tensor into a stride-2 view");
}

// Rank 0 posts a recv nobody sends; abort() from another thread must end it
// with AbortedError carrying the reason, fail later ops at once and leave the
// group destroyable promptly. Call on rank 0 of a group of >= 2 ranks.
inline void check_abort_unblocks_pending_recv(ProcessGroupPtr& pg, CheckLog& log) {
  using namespace std::chrono_literals;
  std::vector<float> x(4);
  // Started first: a backend may run a small recv inline, in the call.
  std::thread aborter([&] {
    std::this_thread::sleep_for(100ms);
    pg->abort("test abort");
  });
  guarded(log, "recv without a sender", [&] {
    auto work = pg->recv(flat(x, DType::kF32), 1, 12);
    expect_wait_fails<AbortedError>(log, *work, Deadline::after(2s), "recv without a sender", "test abort");
  });
  aborter.join();
  log.expect(pg->aborted(), "aborted() is true");
  auto later = pg->barrier();
  log.expect(later->is_completed() && later->status().code() == ErrorCode::kAborted,
             "ops issued after abort fail at once with Aborted");
  const auto start = Clock::now();
  pg.reset();
  log.expect(Clock::now() - start < 5s, "destroying the aborted group returns within 5 s");
}

struct NamedCheck {
  const char* name;
  void (*fn)(ProcessGroup&, CheckLog&);
};

inline const std::vector<NamedCheck>& all_checks() {
  static const std::vector<NamedCheck> checks = {
      {"allreduce_ops", check_allreduce_ops},
      {"allreduce_dtypes", check_allreduce_dtypes},
      {"broadcast", check_broadcast},
      {"reduce", check_reduce},
      {"allgather", check_allgather},
      {"gather_scatter", check_gather_scatter},
      {"reduce_scatter", check_reduce_scatter},
      {"all_to_all", check_all_to_all},
      {"barrier", check_barrier},
      {"send_recv", check_send_recv},
      {"batch_p2p_ring", check_batch_p2p_ring},
      {"subgroups", check_subgroups},
      {"zero_elements", check_zero_elements},
      {"strided", check_strided},
  };
  return checks;
}

}  // namespace sinew::dist::checks
