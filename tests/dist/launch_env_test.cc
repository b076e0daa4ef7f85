// read_launch_env() under each launcher's environment, and
// init_process_group() without a launcher.
#include "launcher_support.h"
#include "sinew/dist/init.h"

namespace sinew::dist {
namespace {

using namespace launcher_test;

TEST(InitProcessGroup, RankZeroHostsTheStoreWithoutALauncher) {
  std::string port = std::to_string(free_port());
  std::vector<std::unique_ptr<Launcher>> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(std::make_unique<Launcher>(
        std::vector<std::string>{"init"},
        std::vector<std::string>{"RANK=" + std::to_string(r), "WORLD_SIZE=2",
                                 "LOCAL_RANK=" + std::to_string(r), "MASTER_ADDR=127.0.0.1",
                                 "MASTER_PORT=" + port},
        kWorker));
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(ranks[r]->wait(), 0) << ranks[r]->err();
    EXPECT_EQ(ranks[r]->out(), "init rank=" + std::to_string(r) + " size=2 sum=3\n");
  }
}

struct Ranks {
  int rank, world_size, local_rank, local_world_size, node_rank;
};

// What read_launch_env() found the launcher and the ranks to be.
void expect_ranks(const LaunchEnv& e, const std::string& launcher, Ranks want) {
  EXPECT_EQ(e.launcher, launcher);
  EXPECT_EQ(e.rank, want.rank);
  EXPECT_EQ(e.world_size, want.world_size);
  EXPECT_EQ(e.local_rank, want.local_rank);
  EXPECT_EQ(e.local_world_size, want.local_world_size);
  EXPECT_EQ(e.node_rank, want.node_rank);
}

TEST(ReadLaunchEnv, SingleProcessWithoutALauncher) {
  ScopedEnv env({});
  auto e = read_launch_env();
  EXPECT_EQ(e.launcher, "single");
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
}

TEST(ReadLaunchEnv, TorchrunWithoutSinewStore) {
  ScopedEnv env({{"RANK", "2"},
                 {"WORLD_SIZE", "4"},
                 {"LOCAL_RANK", "0"},
                 {"LOCAL_WORLD_SIZE", "2"},
                 {"GROUP_RANK", "1"},
                 {"MASTER_ADDR", "node7"},
                 {"MASTER_PORT", "1234"},
                 {"TORCHELASTIC_RESTART_COUNT", "3"},
                 {"TORCHELASTIC_RUN_ID", "r9"}});
  auto e = read_launch_env();
  expect_ranks(e, "torchrun", {2, 4, 0, 2, 1});
  EXPECT_FALSE(e.store_hosted);
  EXPECT_EQ(e.master_addr, "node7");
  EXPECT_EQ(e.master_port, 1234);
  EXPECT_EQ(e.restart_count, 3);
  EXPECT_EQ(e.run_attempt, 3);  // without SINEW_RUN_ATTEMPT: the restart count
  EXPECT_FALSE(e.join);
  EXPECT_EQ(e.run_id, "r9");
  EXPECT_EQ(e.token, "");
}

TEST(ReadLaunchEnv, SinewRespawnJoinsTheRunningAttempt) {
  ScopedEnv env({{"RANK", "1"},
                 {"WORLD_SIZE", "3"},
                 {"SINEW_STORE_HOSTED", "1"},
                 {"TORCHELASTIC_RESTART_COUNT", "2"},
                 {"SINEW_RUN_ATTEMPT", "1"},
                 {"SINEW_JOIN", "1"}});
  auto e = read_launch_env();
  EXPECT_EQ(e.launcher, "sinew");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.restart_count, 2);
  EXPECT_EQ(e.run_attempt, 1);
  EXPECT_TRUE(e.join);
}

TEST(ReadLaunchEnv, OpenMpi) {
  ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "5"},
                 {"OMPI_COMM_WORLD_SIZE", "8"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                 {"MASTER_ADDR", "head"},
                 {"SINEW_STORE_TOKEN", "t"}});
  auto e = read_launch_env();
  expect_ranks(e, "mpirun", {5, 8, 1, 4, 1});
  EXPECT_EQ(e.master_addr, "head");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.token, "t");
  EXPECT_FALSE(e.store_hosted);
}

TEST(ReadLaunchEnv, SlurmWithBracketNodeList) {
  ScopedEnv env({{"SLURM_PROCID", "7"},
                 {"SLURM_NTASKS", "8"},
                 {"SLURM_LOCALID", "3"},
                 {"SLURM_NODEID", "1"},
                 {"SLURM_TASKS_PER_NODE", "4(x2)"},
                 {"SLURM_JOB_NODELIST", "gpu[03-04]"}});
  auto e = read_launch_env();
  expect_ranks(e, "srun", {7, 8, 3, 4, 1});
  EXPECT_EQ(e.master_addr, "gpu03");
}

TEST(ReadLaunchEnv, SlurmWithPlainNodeListAndUnevenTasks) {
  ScopedEnv env({{"SLURM_PROCID", "2"},
                 {"SLURM_NTASKS", "3"},
                 {"SLURM_LOCALID", "0"},
                 {"SLURM_NODEID", "1"},
                 {"SLURM_TASKS_PER_NODE", "2,1"},
                 {"SLURM_STEP_NODELIST", "alpha,beta"},
                 {"MASTER_PORT", "4000"}});
  auto e = read_launch_env();
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_EQ(e.master_addr, "alpha");
  EXPECT_EQ(e.master_port, 4000);
}

TEST(ReadLaunchEnv, SlurmPrefersExplicitMasterAndNtasksPerNode) {
  ScopedEnv env({{"SLURM_PROCID", "0"},
                 {"SLURM_NTASKS", "2"},
                 {"SLURM_NTASKS_PER_NODE", "2"},
                 {"SLURM_TASKS_PER_NODE", "9"},
                 {"SLURM_JOB_NODELIST", "n[1-2]"},
                 {"MASTER_ADDR", "10.0.0.1"}});
  auto e = read_launch_env();
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
}

TEST(ReadLaunchEnv, BadIntegerNamesTheVariable) {
  {
    ScopedEnv env({{"RANK", "x1"}, {"WORLD_SIZE", "2"}});
    try {
      read_launch_env();
      FAIL() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("RANK"));
      EXPECT_THAT(e.what(), HasSubstr("x1"));
    }
  }
  {
    ScopedEnv env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "two"}});
    try {
      read_launch_env();
      FAIL() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("SLURM_NTASKS"));
      EXPECT_THAT(e.what(), HasSubstr("two"));
    }
  }
  {
    ScopedEnv env({{"RANK", "4"}, {"WORLD_SIZE", "4"}});
    EXPECT_THROW(read_launch_env(), InvalidArgument);
  }
}


}  // namespace
}  // namespace sinew::dist
