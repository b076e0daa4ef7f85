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

// Returns the number of cases that failed.
int run_gemm_bench(const GemmBenchConfig& cfg, Report& report);

}  // namespace sinew::bench
