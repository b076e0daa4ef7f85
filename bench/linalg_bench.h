// The linear-algebra benchmark suite (see linalg_bench.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "report.h"

namespace sinew::bench {

struct LinalgConfig {
  std::vector<std::string> ops = {"cholesky", "qr", "eigh", "svd"};
  std::vector<std::string> dtypes = {"f64", "f32"};
  std::vector<int64_t> sizes = {64, 128, 256, 512, 1024};
  std::vector<int> threads = {1, 2};
  int64_t batch = 10000;       // the batched case: `batch` matrices of order batch_n (0: none)
  int64_t batch_n = 32;
  int64_t gesvj_max_n = 512;   // dgesvj is skipped above this order (it takes seconds)
  int64_t rel_err_max_n = 512; // the long-double reference for rel_err_small_sv above this is too slow
  double sample_seconds = 0.3; // each case is timed for about this long (median of the samples)
  int max_samples = 15;
};

// Runs every op x dtype x size x threads case for sinew and the LAPACK
// peers (OpenBLAS LAPACKE). Returns the number of cases that failed.
int run_linalg_bench(const LinalgConfig& cfg, Report& report);

}  // namespace sinew::bench
