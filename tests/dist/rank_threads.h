// Ranks as threads, the one runner of the in-process dist tests: runs
// fn(rank) on `world` threads and rethrows the first failure; one group per
// thread over a shared store (run_group), or the shared collective checks
// with every rank's failures collected (run_checks). Plus exact-value
// helpers for every dtype.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <latch>
#include <mutex>
#include <thread>
#include <vector>

#include "collective_checks.h"
#include "sinew/dist/process_group.h"
#include "sinew/tensor/dtype.h"

namespace sinew::testing {

// Tests stay on loopback: UCX and gloo would otherwise also use the host's
// other interfaces between ranks of one process (read once, on the first group).
inline const bool kLoopbackOnly = [] {
  return setenv("UCX_NET_DEVICES", "lo", 0) == 0 && setenv("SINEW_GLOO_HOSTNAME", "127.0.0.1", 0) == 0;
}();

inline void run_ranks(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::mutex mu;
  std::exception_ptr first;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        std::lock_guard<std::mutex> g(mu);
        if (!first) first = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

// The options of rank `rank`'s group (named "default" unless `name` is set).
inline dist::GroupOptions group_options(dist::StorePtr store, int rank, int size,
                                        std::chrono::milliseconds timeout = std::chrono::milliseconds(30000),
                                        const std::string& backend = "sinew", const std::string& transport = "auto",
                                        const std::string& name = "") {
  dist::GroupOptions o;
  o.backend = backend;
  o.store = std::move(store);
  o.rank = rank;
  o.size = size;
  o.timeout = timeout;
  o.transport = transport;
  if (!name.empty()) o.name = name;
  return o;
}

// Creates one group per rank over a shared store and runs fn on each.
inline void run_group(int world, const std::string& backend,
                      const std::function<void(dist::ProcessGroup&)>& fn,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(30000),
                      const std::string& transport = "auto", const std::string& name = "") {
  (void)kLoopbackOnly;
  auto store = dist::make_memory_store();
  run_ranks(world, [&](int r) {
    auto pg = dist::create_process_group(group_options(store, r, world, timeout, backend, transport, name));
    fn(*pg);
  });
}

using CheckFn = std::function<void(dist::ProcessGroupPtr&, dist::checks::CheckLog&)>;

// Runs fn on `world` ranks (threads), each with its own group over one
// memory store, and returns every rank's failures ("rank R: ..."). Each group
// is ready before fn runs (a rank that left before its own init ran would
// leave its peers waiting until the timeout), and destroyed only once every
// rank is done, so no rank sees a peer's connections close mid-op.
inline std::vector<std::string> run_checks(int world, const std::string& backend, std::chrono::milliseconds timeout,
                                           const CheckFn& fn, const std::string& transport = "auto") {
  (void)kLoopbackOnly;
  auto store = dist::make_memory_store();
  std::vector<dist::checks::CheckLog> logs(world);
  std::latch done(world);
  run_ranks(world, [&](int r) {
    dist::ProcessGroupPtr pg;
    dist::checks::guarded(logs[r], "create_process_group", [&] {
      pg = dist::create_process_group(group_options(store, r, world, timeout, backend, transport));
      pg->wait_ready(Deadline::after(timeout + std::chrono::seconds(10)));
    });
    if (pg) dist::checks::guarded(logs[r], "check", [&] { fn(pg, logs[r]); });
    done.arrive_and_wait();
  });
  std::vector<std::string> failures;
  for (int r = 0; r < world; ++r)
    for (const auto& f : logs[r].failures) failures.push_back(fmt::format("rank {}: {}", r, f));
  return failures;
}

inline void set_value(void* p, DType t, size_t i, double v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::kF64: static_cast<double*>(p)[i] = v; break;
    case DType::kF16: static_cast<uint16_t*>(p)[i] = f32_to_f16(static_cast<float>(v)); break;
    case DType::kBF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(static_cast<float>(v)); break;
    case DType::kI8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case DType::kU8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DType::kI32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::kI64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DType::kBool: static_cast<uint8_t*>(p)[i] = v != 0; break;
    case DType::kF8E4M3FN: static_cast<uint8_t*>(p)[i] = f32_to_e4m3fn(static_cast<float>(v)); break;
    case DType::kF8E5M2: static_cast<uint8_t*>(p)[i] = f32_to_e5m2(static_cast<float>(v)); break;
  }
}

inline double get_value(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kF64: return static_cast<const double*>(p)[i];
    case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::kI8: return static_cast<const int8_t*>(p)[i];
    case DType::kU8: return static_cast<const uint8_t*>(p)[i];
    case DType::kI32: return static_cast<const int32_t*>(p)[i];
    case DType::kI64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::kBool: return static_cast<const uint8_t*>(p)[i];
    case DType::kF8E4M3FN: return e4m3fn_to_f32(static_cast<const uint8_t*>(p)[i]);
    case DType::kF8E5M2: return e5m2_to_f32(static_cast<const uint8_t*>(p)[i]);
  }
  return NAN;
}

// A small integer input for rank r, element i, chosen so every sum over up
// to 8 ranks is exact in the dtype.
inline double input_value(DType t, int r, size_t i) {
  switch (t) {
    case DType::kBool:
    case DType::kF8E4M3FN:
    case DType::kF8E5M2: return static_cast<double>((r + i) % 2);
    case DType::kI8:
    case DType::kU8: return static_cast<double>((r + 1) * (i % 3 + 1) % 16);
    default: return static_cast<double>((r + 1) * (i % 5 + 1));
  }
}

}  // namespace sinew::testing
