#include "peak_bench.h"

#include <fmt/format.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "sinew/core/aligned_buffer.h"
#include "sinew/core/thread_pool.h"
#include "sinew/kernels/ceiling.h"
#include "sinew/kernels/cpu_features.h"

namespace sinew::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kChains = 12;  // independent accumulators: more than FMA latency x pipes

// kChains x 16 lanes x 2 flops per iteration.
__attribute__((target("avx512f"))) float fma_f32(int64_t iters) {
  __m512 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
  __m512 s = acc[0];
  for (int j = 1; j < kChains; ++j) s = _mm512_add_ps(s, acc[j]);
  return _mm512_reduce_add_ps(s);
}

// kChains x 16 lanes x 2 products x 2 flops per iteration.
__attribute__((target("avx512f,avx512bf16"))) float dot_bf16(int64_t iters) {
  __m512 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_setzero_ps();
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.001f), _mm512_set1_ps(0.002f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.003f), _mm512_set1_ps(0.004f));
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
  __m512 s = acc[0];
  for (int j = 1; j < kChains; ++j) s = _mm512_add_ps(s, acc[j]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f"))) void triad(double* a, const double* b, const double* c, double s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

__attribute__((target("avx512f"))) void copy(double* a, const double* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = b[i];
}

volatile float g_sink;

// Best rate over `reps` runs of `fn` on every thread at once: units / s.
template <class Fn>
double best_rate(int threads, int reps, double units_per_thread, const Fn& fn) {
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    ThreadPool::global().parallel_for(threads, threads, [&](int64_t task, int) { fn(task); });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, units_per_thread * threads / s);
  }
  return best;
}

// The three STREAM arrays of n doubles, zeroed so that the first touch of
// each page happens here and not inside a timed pass.
struct Arrays {
  explicit Arrays(int64_t n) {
    for (int k = 0; k < 3; ++k) {
      d[k] = mem[k].get_as<double>(static_cast<size_t>(n));
      std::memset(d[k], 0, static_cast<size_t>(n) * sizeof(double));
    }
  }
  AlignedBuffer mem[3];
  double* d[3];
};

}  // namespace

PeakFigures run_peak_bench(const std::vector<int>& threads, bool quick, Report& report) {
  PeakFigures f;
  const auto& cpu = kernels::cpu_features();
  // STREAM's rule: each array at least 4 times the last-level cache, so that
  // no pass finds the previous one's lines there (a 300 MB L3 held enough of
  // three 128 MiB arrays to read two-thread triad at 45 GB/s against 27-32
  // past it). At least 128 MiB; 64 MiB for a quick run (tests).
  const int64_t n = quick ? int64_t{64} << 17 : std::max<int64_t>(int64_t{128} << 17, 4 * cpu.last_level_cache_bytes / 8);
  Arrays arr(n);
  const int reps = quick ? 3 : 7;
  const int64_t fma_iters = quick ? 2'000'000 : 5'000'000;
  for (int t : threads) {
    const int64_t chunk = (n + t - 1) / t;
    // Touch every slice from the thread that streams it.
    ThreadPool::global().parallel_for(t, t, [&](int64_t task, int) {
      const int64_t lo = task * chunk, hi = std::min(n, lo + chunk);
      for (int k = 0; k < 3; ++k) std::fill(arr.d[k] + lo, arr.d[k] + hi, 1.0 + k);
    });
    if (cpu.avx512) {
      f.f32_gflops[t] = best_rate(t, reps, 2.0 * 16 * kChains * static_cast<double>(fma_iters),
                                  [&](int64_t) { g_sink = fma_f32(fma_iters); }) / 1e9;
    }
    const int64_t calls = fma_iters / 512;  // about as many FMAs as the peak loop
    if (const double flops = kernels::microkernel_f32_l1_flops(calls); flops > 0) {  // also the warm-up
      f.tile_gflops[t] = best_rate(t, reps, flops, [&](int64_t) {
                           g_sink = static_cast<float>(kernels::microkernel_f32_l1_flops(calls));
                         }) / 1e9;
    }
    if (cpu.avx512_bf16) {
      f.bf16_gflops[t] = best_rate(t, reps, 4.0 * 16 * kChains * static_cast<double>(fma_iters / 2),
                                   [&](int64_t) { g_sink = dot_bf16(fma_iters / 2); }) / 1e9;
    }
    auto slice = [&](int64_t task, int64_t* lo, int64_t* len) {
      *lo = task * chunk;
      *len = std::max<int64_t>(0, std::min(n, *lo + chunk) - *lo);
    };
    f.triad_GBps[t] = best_rate(t, reps, 3.0 * sizeof(double) * static_cast<double>(chunk), [&](int64_t task) {
                        int64_t lo, len;
                        slice(task, &lo, &len);
                        triad(arr.d[0] + lo, arr.d[1] + lo, arr.d[2] + lo, 3.0, len);
                      }) / 1e9;
    f.copy_GBps[t] = best_rate(t, reps, 2.0 * sizeof(double) * static_cast<double>(chunk), [&](int64_t task) {
                       int64_t lo, len;
                       slice(task, &lo, &len);
                       copy(arr.d[0] + lo, arr.d[1] + lo, len);
                     }) / 1e9;
    const std::string tc = fmt::format("t{}", t);
    if (f.f32_gflops.count(t)) report.add({"peak", "fma_f32/" + tc, "machine", "gflops", f.f32_gflops[t], "GFLOP/s"});
    if (f.tile_gflops.count(t))
      report.add({"peak", "tile_f32_l1/" + tc, "machine", "gflops", f.tile_gflops[t], "GFLOP/s"});
    if (f.bf16_gflops.count(t))
      report.add({"peak", "dot_bf16/" + tc, "machine", "gflops", f.bf16_gflops[t], "GFLOP/s"});
    report.add({"peak", "triad/" + tc, "machine", "GBps", f.triad_GBps[t], "GB/s"});
    report.add({"peak", "copy/" + tc, "machine", "GBps", f.copy_GBps[t], "GB/s"});
    fmt::print(
        "peak t{}: f32 FMA {:.0f} GFLOP/s (microkernel in L1 {:.0f}), bf16 dot {:.0f} GFLOP/s, triad {:.1f} GB/s, "
        "copy {:.1f} GB/s ({} MiB arrays)\n",
        t, f.f32_gflops[t], f.tile_gflops[t], f.bf16_gflops[t], f.triad_GBps[t], f.copy_GBps[t], n >> 17);
    std::fflush(stdout);
  }
  return f;
}

}  // namespace sinew::bench
