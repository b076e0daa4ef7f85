// One EnvParam for each variable of the launch protocol that a worker reads
// (launch_protocol.h), so that `sinew env` lists them. RANK and
// SINEW_LOG_PREFIXED are declared in core, whose logger reads them too.
#include <string_view>

#include "sinew/core/env.h"
#include "sinew/dist/launch_protocol.h"

namespace sinew::dist::launch::env {
namespace {

const EnvParam<std::string> kWorldSizeParam{kWorldSize, "", "the job's number of ranks", EnvSource::kLauncher};
const EnvParam<std::string> kLocalRankParam{kLocalRank, "", "this process's rank on its host", EnvSource::kLauncher};
const EnvParam<std::string> kLocalWorldSizeParam{kLocalWorldSize, "", "ranks on this host", EnvSource::kLauncher};
const EnvParam<std::string> kGroupRankParam{kGroupRank, "", "the node's rank (torchrun)", EnvSource::kLauncher};
const EnvParam<std::string> kGroupWorldSizeParam{kGroupWorldSize, "", "nodes in the job (torchrun)",
                                                 EnvSource::kLauncher};
const EnvParam<std::string> kRoleRankParam{kRoleRank, "", "rank within the worker role (torchrun)",
                                           EnvSource::kLauncher};
const EnvParam<std::string> kRoleWorldSizeParam{kRoleWorldSize, "", "ranks in the worker role (torchrun)",
                                                EnvSource::kLauncher};
const EnvParam<std::string> kRoleNameParam{kRoleName, "", "the worker role's name (torchrun)", EnvSource::kLauncher};
const EnvParam<std::string> kMasterAddrParam{kMasterAddr, "", "host of the job store", EnvSource::kLauncher};
const EnvParam<std::string> kMasterPortParam{kMasterPort, "", "port of the job store", EnvSource::kLauncher};
const EnvParam<std::string> kRestartCountParam{kRestartCount, "", "how many times the launcher restarted the workers",
                                               EnvSource::kLauncher};
const EnvParam<std::string> kMaxRestartsParam{kMaxRestarts, "", "how many restarts the launcher allows",
                                              EnvSource::kLauncher};
const EnvParam<std::string> kRunIdParam{kRunId, "", "the job's run id", EnvSource::kLauncher};
const EnvParam<std::string> kUseAgentStoreParam{
    kUseAgentStore, "", "'True': torchrun's own store listens on MASTER_PORT (sinew uses the next port)",
    EnvSource::kLauncher};
const EnvParam<std::string> kStoreTokenParam{kStoreToken, "", "the job store's access token (sinew run)",
                                             EnvSource::kLauncher};
const EnvParam<std::string> kStoreHostedParam{
    kStoreHosted, "", "1: the launcher hosts the store, one key space per attempt (sinew run)", EnvSource::kLauncher};
const EnvParam<std::string> kRunAttemptParam{
    kRunAttempt, "", "the attempt whose key space the running group uses (sinew run)", EnvSource::kLauncher};
const EnvParam<std::string> kJoinParam{
    kJoin, "", "1: a respawned worker joins the running group (sinew run --max-restarts)", EnvSource::kLauncher};
const EnvParam<std::string> kBackendParam{
    kBackend, "sinew", "backend when init_process_group() is not given one: sinew, gloo or mpi", EnvSource::kTunable};
const EnvParam<std::string> kOmpiRankParam{kOmpiRank, "", "rank under mpirun", EnvSource::kLauncher};
const EnvParam<std::string> kOmpiSizeParam{kOmpiSize, "", "world size under mpirun", EnvSource::kLauncher};
const EnvParam<std::string> kOmpiLocalRankParam{kOmpiLocalRank, "", "local rank under mpirun", EnvSource::kLauncher};
const EnvParam<std::string> kOmpiLocalSizeParam{kOmpiLocalSize, "", "ranks on this host under mpirun",
                                                EnvSource::kLauncher};
const EnvParam<std::string> kSlurmProcIdParam{kSlurmProcId, "", "rank under srun", EnvSource::kLauncher};
const EnvParam<std::string> kSlurmNtasksParam{kSlurmNtasks, "", "world size under srun", EnvSource::kLauncher};
const EnvParam<std::string> kSlurmLocalIdParam{kSlurmLocalId, "", "local rank under srun", EnvSource::kLauncher};
const EnvParam<std::string> kSlurmNodeIdParam{kSlurmNodeId, "", "node rank under srun", EnvSource::kLauncher};
const EnvParam<std::string> kSlurmNtasksPerNodeParam{kSlurmNtasksPerNode, "", "ranks per node under srun",
                                                     EnvSource::kLauncher};
const EnvParam<std::string> kSlurmTasksPerNodeParam{kSlurmTasksPerNode, "", "ranks per node under srun, e.g. 2(x3),1",
                                                    EnvSource::kLauncher};
const EnvParam<std::string> kSlurmStepNodelistParam{
    kSlurmStepNodelist, "", "the step's nodes under srun (the first hosts the store)", EnvSource::kLauncher};
const EnvParam<std::string> kSlurmJobNodelistParam{kSlurmJobNodelist, "", "the job's nodes under srun",
                                                   EnvSource::kLauncher};

const EnvParam<std::string>* const kParams[] = {&kWorldSizeParam,
                                                &kLocalRankParam,
                                                &kLocalWorldSizeParam,
                                                &kGroupRankParam,
                                                &kGroupWorldSizeParam,
                                                &kRoleRankParam,
                                                &kRoleWorldSizeParam,
                                                &kRoleNameParam,
                                                &kMasterAddrParam,
                                                &kMasterPortParam,
                                                &kRestartCountParam,
                                                &kMaxRestartsParam,
                                                &kRunIdParam,
                                                &kUseAgentStoreParam,
                                                &kStoreTokenParam,
                                                &kStoreHostedParam,
                                                &kRunAttemptParam,
                                                &kJoinParam,
                                                &kBackendParam,
                                                &kOmpiRankParam,
                                                &kOmpiSizeParam,
                                                &kOmpiLocalRankParam,
                                                &kOmpiLocalSizeParam,
                                                &kSlurmProcIdParam,
                                                &kSlurmNtasksParam,
                                                &kSlurmLocalIdParam,
                                                &kSlurmNodeIdParam,
                                                &kSlurmNtasksPerNodeParam,
                                                &kSlurmTasksPerNodeParam,
                                                &kSlurmStepNodelistParam,
                                                &kSlurmJobNodelistParam};

}  // namespace

std::optional<std::string> read(std::string_view name) {
  if (name == launcher_rank_env().name()) return launcher_rank_env().read();
  for (const auto* p : kParams)
    if (name == p->name()) return p->read();
  throw std::logic_error("launch protocol: no EnvParam declares " + std::string(name));
}

}  // namespace sinew::dist::launch::env
