// The contract between a launcher (`sinew run`, torchrun, mpirun, srun, or a
// test or benchmark standing in for one) and the workers it starts: the
// environment it sets and the job-store keys both sides read and write.
// init_process_group() reads what a launcher writes here; anything that
// plays launcher must spell the names the same way, so they live in one place.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sinew::dist::launch {

// The items of a launcher's comma list (SLURM_TASKS_PER_NODE "2(x3),1",
// torchrun's --local-ranks-filter "0,2"); "" is one empty item.
inline std::vector<std::string> split_list(std::string_view text, char sep = ',') {
  std::vector<std::string> items;
  for (size_t pos = 0;;) {
    const size_t end = text.find(sep, pos);
    items.emplace_back(text.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos));
    if (end == std::string_view::npos) return items;
    pos = end + 1;
  }
}

// The worker environment, as torchrun sets it (and `sinew run` copies).
namespace env {
inline constexpr const char* kRank = "RANK";
inline constexpr const char* kWorldSize = "WORLD_SIZE";
inline constexpr const char* kLocalRank = "LOCAL_RANK";
inline constexpr const char* kLocalWorldSize = "LOCAL_WORLD_SIZE";
inline constexpr const char* kGroupRank = "GROUP_RANK";  // the node's rank
inline constexpr const char* kGroupWorldSize = "GROUP_WORLD_SIZE";
inline constexpr const char* kRoleRank = "ROLE_RANK";
inline constexpr const char* kRoleWorldSize = "ROLE_WORLD_SIZE";
inline constexpr const char* kRoleName = "ROLE_NAME";
inline constexpr const char* kMasterAddr = "MASTER_ADDR";  // the job store's host
inline constexpr const char* kMasterPort = "MASTER_PORT";  // and port
inline constexpr const char* kRestartCount = "TORCHELASTIC_RESTART_COUNT";
inline constexpr const char* kMaxRestarts = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr const char* kRunId = "TORCHELASTIC_RUN_ID";
// "True": torchrun's own c10d store listens on MASTER_PORT.
inline constexpr const char* kUseAgentStore = "TORCHELASTIC_USE_AGENT_STORE";

// What only a sinew launcher sets.
inline constexpr const char* kStoreToken = "SINEW_STORE_TOKEN";
// "1": the launcher hosts the store and every attempt has its own key space.
inline constexpr const char* kStoreHosted = "SINEW_STORE_HOSTED";
// The attempt whose key space the running group uses (a respawned joiner's
// restart count is higher than the members').
inline constexpr const char* kRunAttempt = "SINEW_RUN_ATTEMPT";
// "1": a respawned worker that joins the running group instead of forming one.
inline constexpr const char* kJoin = "SINEW_JOIN";
inline constexpr const char* kBackend = "SINEW_BACKEND";
// "1": the launcher prefixes every line, so the worker's log need not.
inline constexpr const char* kLogPrefixed = "SINEW_LOG_PREFIXED";

// Open MPI's and SLURM's own spellings of the same facts.
inline constexpr const char* kOmpiRank = "OMPI_COMM_WORLD_RANK";
inline constexpr const char* kOmpiSize = "OMPI_COMM_WORLD_SIZE";
inline constexpr const char* kOmpiLocalRank = "OMPI_COMM_WORLD_LOCAL_RANK";
inline constexpr const char* kOmpiLocalSize = "OMPI_COMM_WORLD_LOCAL_SIZE";
inline constexpr const char* kSlurmProcId = "SLURM_PROCID";
inline constexpr const char* kSlurmNtasks = "SLURM_NTASKS";
inline constexpr const char* kSlurmLocalId = "SLURM_LOCALID";
inline constexpr const char* kSlurmNodeId = "SLURM_NODEID";
inline constexpr const char* kSlurmNtasksPerNode = "SLURM_NTASKS_PER_NODE";
inline constexpr const char* kSlurmTasksPerNode = "SLURM_TASKS_PER_NODE";
inline constexpr const char* kSlurmStepNodelist = "SLURM_STEP_NODELIST";
inline constexpr const char* kSlurmJobNodelist = "SLURM_JOB_NODELIST";

// Every variable above that a launcher sets for its workers (not the MPI and
// SLURM ones): what a launcher started from inside a job must not inherit.
inline constexpr const char* kWorkerVars[] = {
    kRank,          kWorldSize,    kLocalRank,    kLocalWorldSize, kGroupRank,  kGroupWorldSize,
    kRoleRank,      kRoleWorldSize, kRoleName,    kMasterAddr,     kMasterPort, kRestartCount,
    kMaxRestarts,   kRunId,        kUseAgentStore, kStoreToken,    kStoreHosted, kRunAttempt,
    kJoin,          kBackend,      kLogPrefixed};

inline bool is_worker_var(std::string_view name) {
  for (const char* v : kWorkerVars)
    if (name == v) return true;
  return false;
}
// The value the launcher set for `name` (one of the names above), or nullopt
// when unset or empty. Each is read through its own EnvParam (launch_env.cc),
// so that `sinew env` lists them; a name declared nowhere is a logic_error.
std::optional<std::string> read(std::string_view name);

}  // namespace env

// Keys in the job store a sinew launcher hosts.
namespace keys {

// init_process_group()'s group: its name, and its key space in the job store.
inline constexpr const char* kDefaultGroup = "default";

// The key space every worker of run attempt `attempt` shares (as torchrun's
// agent store gives its workers "/worker/attempt_<n>"); the job store
// init_process_group() hands a worker is this prefix of the launcher's.
inline std::string attempt_space(int attempt) { return "worker/attempt_" + std::to_string(attempt); }

// In an attempt's key space: a worker the launcher lost (`sinew run
// --fault-tolerant`), its value why, and how many were lost.
inline constexpr const char* kLostCount = "lost/count";
inline std::string lost(int rank) { return "lost/" + std::to_string(rank); }
// The same, as the launcher writes them in the whole store.
inline std::string lost(int attempt, int rank) { return attempt_space(attempt) + "/" + lost(rank); }
inline std::string lost_count(int attempt) { return attempt_space(attempt) + "/" + kLostCount; }

// The default group's own namespace in the job store init_process_group()
// returns: the group's key space there, then the group's name.
inline std::string default_group_root() { return std::string(kDefaultGroup) + "/" + kDefaultGroup; }
// Where a joiner announces itself to the running default group, in that
// store. Non-empty past its leading ";" once a joiner waits.
inline std::string join_pending() { return default_group_root() + "/join/pending"; }

// The launchers' own rendezvous (`sinew run` on every node), under
// run_space(run id) of the same store: each node's worker count, the first
// failure, and the nodes done with and gone from an attempt.
inline std::string run_space(std::string_view run_id) { return "sinew_run/" + std::string(run_id); }
inline std::string run_key(int attempt, std::string_view name) {
  return "a" + std::to_string(attempt) + "/" + std::string(name);
}
inline std::string run_nproc(int attempt, int node) {
  return run_key(attempt, "nproc/" + std::to_string(node));
}
inline std::string run_failed(int attempt) { return run_key(attempt, "failed"); }
inline std::string run_done(int attempt) { return run_key(attempt, "done"); }
inline std::string run_left(int attempt) { return run_key(attempt, "left"); }

}  // namespace keys
}  // namespace sinew::dist::launch
