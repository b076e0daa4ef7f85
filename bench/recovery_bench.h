// The recovery benchmark suite (see recovery_bench.cc): how long sinew's
// fault tolerance takes to get a group going again after a rank is killed,
// beside restarting every worker as torchrun does.
#pragma once

#include <string>
#include <vector>

#include "report.h"

namespace sinew::bench {

struct RecoveryConfig {
  std::vector<int> worlds = {4, 2};
  int trials = 5;
  int trial_timeout_s = 60;  // every spawned group is killed past this
  // Worker side.
  std::string mode;  // sinew | doomed | fresh | grow | latency
  int victim = -1;
};

// Front end: for each world size and trial, spawns the ranks, kills the
// victim and collects the phases. Returns the number of failed trials.
int run_recovery_bench(const RecoveryConfig& cfg, Report& report);
// Inside one rank (the hidden `sinew bench-recovery-worker`).
int run_recovery_worker(const RecoveryConfig& cfg);

}  // namespace sinew::bench
