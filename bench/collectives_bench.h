// The collectives benchmark suite (see collectives_bench.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "report.h"

namespace sinew::bench {

struct CollectivesConfig {
  std::vector<std::string> ops = {"allreduce", "allgather", "reduce_scatter", "broadcast", "all_to_all"};
  std::vector<std::string> impls = {"sinew", "sinew-ucx", "gloo", "mpi", "memcpy"};
  int world = 2;
  int64_t min_bytes = 8;
  int64_t max_bytes = 64 << 20;
  int samples = 7;
  double sample_seconds = 0.01;  // each timed sample runs about this long
  int timeout_s = 1800;
  // Flight Recorder: "on" (as shipped), "off", or "pair": sinew's samples
  // alternate recording on and off inside one run, reported as <impl> and
  // <impl>-fr-off, plus the cost of a full-ring dump.
  std::string fr = "on";
  // Worker side.
  std::string impl, backend = "sinew", transport = "auto", rows_path;
};

// Front end: spawns the ranks of each impl and collects their rows. Returns
// the number of impls that failed.
int run_collectives_bench(CollectivesConfig cfg, Report& report);
// Inside one rank (the hidden `sinew bench-worker`).
int run_collectives_worker(const CollectivesConfig& cfg);

}  // namespace sinew::bench
