// `sinew bench gemm`: the kernels layer beside OpenBLAS and BLIS, in one run
// with the machine's measured peaks (see gemm_bench.cc for the cases).
#pragma once

#include <string>
#include <vector>

#include "report.h"

namespace sinew::bench {

struct GemmBenchConfig {
  std::vector<int> threads = {1, 2};
  bool quick = false;  // a subset that finishes in about a minute
  // Keep the tuning cache in this file (reused by the next run); empty: the
  // run tunes in memory and leaves no file behind.
  std::string cache;
  std::vector<std::string> only;  // run only cases whose name contains one of these
  bool evaluate = true;           // the "tuned pick within 3% of the exhaustive best" evaluation
};

// Re-executes this process once with the environment the peers need for a
// fair run: without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE (which pin
// OpenBLAS to a slower kernel on this machine kind) and with
// BLIS_ARCH_TYPE=skx (BLIS's auto-detection picks generic kernels on some
// of them). Returns only when the environment is already right or the
// re-exec failed (with a warning).
void ensure_gemm_bench_env();

// Returns the number of cases that failed.
int run_gemm_bench(const GemmBenchConfig& cfg, Report& report);

}  // namespace sinew::bench
