// Joining a job from a worker process: reads the launcher's environment
// (sinew run / torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, SINEW_STORE_TOKEN; mpirun: OMPI_COMM_WORLD_*;
// srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, ...), connects to the
// job's store and creates the default process group.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "sinew/dist/process_group.h"
#include "sinew/dist/store.h"

namespace sinew::dist {

struct LaunchEnv {
  std::string launcher;  // "sinew", "torchrun", "mpirun", "srun" or "single"
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string token;          // SINEW_STORE_TOKEN (empty: none)
  bool store_hosted = false;  // a launcher hosts the store (SINEW_STORE_HOSTED=1)
  int restart_count = 0;      // TORCHELASTIC_RESTART_COUNT (this worker's)
  // The attempt of the running job (SINEW_RUN_ATTEMPT, else the restart
  // count): it names the store key space every worker of the attempt shares.
  int run_attempt = 0;
  bool join = false;  // SINEW_JOIN=1: a respawned worker joining the running group
  std::string run_id;         // TORCHELASTIC_RUN_ID
};

// Reads the environment; InvalidArgument naming the variable on bad values.
LaunchEnv read_launch_env();

struct InitOptions {
  std::string backend;  // empty: SINEW_BACKEND or "sinew"
  Millis timeout{600'000};
  std::string transport = "auto";
};

// Connects to the store (hosting it on rank 0 when no launcher does) and
// creates the default group. Init continues in the background.
// With SINEW_JOIN=1 (a worker `sinew run --fault-tolerant --max-restarts N`
// respawned) it instead joins the running default group (join_process_group,
// sinew backend only) and blocks until the members admit it at their next
// reconfigure() or options.timeout passes; the group it returns has epoch()
// > 0, which a member's initial group never has, and a rank and size of its
// own (RANK and WORLD_SIZE are ignored).
ProcessGroupPtr init_process_group(const InitOptions& options = {});
// The store of the default group's job (after init_process_group).
StorePtr job_store();

}  // namespace sinew::dist
