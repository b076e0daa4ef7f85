// The job `sinew run` launches, once the command line has been read: the
// launchers' rendezvous through the job store, the attempts (restarts) and
// the final report.
#pragma once

#include <string>
#include <vector>

#include "tools/sinew/run_output.h"

namespace sinew::cli {

struct RunConfig {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  // Where node 0's launcher hosts the job store (and what workers get as
  // MASTER_ADDR / MASTER_PORT). Port 0 picks a free one (single node only).
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  bool standalone = false;
  std::string run_id = "none";
  int max_restarts = 0;
  // A worker killed by a signal does not stop the others (they recover with
  // reconfigure()); see run.cc's help.
  bool fault_tolerant = false;
  double monitor_interval_s = 0.1;
  std::string backend;  // exported as SINEW_BACKEND when set
  std::string token;    // empty: node 0 generates one (single node only)
  OutputPolicy output;
  std::string program;
  std::vector<std::string> args;
};

// Runs the job; returns the launcher's exit code: 0 if every worker
// succeeded (with fault_tolerant: every worker not killed by a signal, and at
// least one such), else the first failing worker's code (128 + signal if it
// was killed), or 128 + signal if the launcher itself was signalled.
int run_job(const RunConfig& config);

}  // namespace sinew::cli
