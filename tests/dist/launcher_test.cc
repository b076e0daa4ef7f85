// `sinew run` end to end: the built binary launching launch_worker (and
// ft_worker, the examples) as its workers.
#include <sys/prctl.h>

#include "launcher_support.h"

namespace sinew::dist {
namespace {

using namespace launcher_test;

TEST(SinewRun, WorkersGetTorchrunEnvironmentAndPrefixedOutput) {
  Launcher l({"run", "--standalone", "--nproc-per-node", "3", kWorker, "print-env", "launch-env"});
  ASSERT_EQ(l.wait(), 0) << l.err();
  std::smatch m;
  std::regex re("sinew run: standalone rendezvous at 127\\.0\\.0\\.1:(\\d+) \\(run id (\\w+)\\)");
  ASSERT_TRUE(std::regex_search(l.err(), m, re)) << l.err();
  const std::string port = m[1], run_id = m[2];
  EXPECT_THAT(l.err(),
              HasSubstr("Setting OMP_NUM_THREADS environment variable for each process to be 1"));
  std::string token;
  for (int r = 0; r < 3; ++r) {
    auto lines = rank_lines(l.out(), r);
    ASSERT_EQ(lines.size(), 2u) << l.out();
    auto env = parse_kv(lines[0]);
    EXPECT_EQ(env["RANK"], std::to_string(r));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(r));
    EXPECT_EQ(env["ROLE_RANK"], std::to_string(r));
    EXPECT_EQ(env["WORLD_SIZE"], "3");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(env["ROLE_WORLD_SIZE"], "3");
    EXPECT_EQ(env["GROUP_RANK"], "0");
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "1");
    EXPECT_EQ(env["ROLE_NAME"], "default");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["MASTER_PORT"], port);
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "0");
    EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "0");
    EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], run_id);
    EXPECT_EQ(env["TORCHELASTIC_USE_AGENT_STORE"], "False");
    EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
    EXPECT_EQ(env["SINEW_STORE_HOSTED"], "1");
    EXPECT_TRUE(std::regex_match(env["SINEW_STORE_TOKEN"], std::regex("[0-9a-f]{32}")))
        << env["SINEW_STORE_TOKEN"];
    if (r == 0) token = env["SINEW_STORE_TOKEN"];
    EXPECT_EQ(env["SINEW_STORE_TOKEN"], token);
    EXPECT_EQ(lines[1], "launcher=sinew rank=" + std::to_string(r) +
                            " world_size=3 local_rank=" + std::to_string(r) +
                            " local_world_size=3 node_rank=0 master=127.0.0.1:" + port +
                            " hosted=1 restart=0 run_id=" + run_id);
  }
  EXPECT_THAT(l.err(), HasSubstr("attempt 0 succeeded"));
}

TEST(SinewRun, LocalRanksFilterShowsOnlyThoseRanks) {
  Launcher l({"run", "--standalone", "--nproc-per-node", "3", "--local-ranks-filter", "1", kWorker,
              "print-env", "stderr:hello"});
  ASSERT_EQ(l.wait(), 0) << l.err();
  EXPECT_EQ(rank_lines(l.out(), 0).size(), 0u);
  EXPECT_EQ(rank_lines(l.out(), 2).size(), 0u);
  ASSERT_EQ(rank_lines(l.out(), 1).size(), 1u) << l.out();
  EXPECT_EQ(parse_kv(rank_lines(l.out(), 1)[0])["RANK"], "1");
  EXPECT_EQ(rank_lines(l.err(), 1), std::vector<std::string>{"hello"});
  EXPECT_EQ(rank_lines(l.err(), 0).size(), 0u);
  EXPECT_EQ(rank_lines(l.err(), 2).size(), 0u);
}

TEST(SinewRun, FailingWorkerSetsExitCodeAndStopsTheOthers) {
  Launcher l(
      {"run", "--standalone", "--nproc-per-node", "2", kWorker, "fail-rank:1:3", "sleep:30"});
  ASSERT_EQ(l.wait(), 3) << l.err();
  EXPECT_THAT(l.err(), HasSubstr("rank 1 (pid"));
  EXPECT_THAT(l.err(), HasSubstr("failed: 3; stopping the other workers"));
  EXPECT_THAT(l.err(), HasSubstr("attempt 0 failed"));
  EXPECT_TRUE(has_table_row(l.err(), 1, 1, "3", "<- first failure"));
  EXPECT_TRUE(has_table_row(l.err(), 0, 0, "SIGTERM", "\\(stopped by sinew run\\)"));
}

TEST(SinewRun, RestartAfterFailureSucceeds) {
  Launcher l({"run", "--standalone", "--nproc-per-node", "2", "--max-restarts", "1", kWorker,
              "exit-on-attempt:0:5", "print-env"});
  ASSERT_EQ(l.wait(), 0) << l.err();
  EXPECT_THAT(l.err(), HasSubstr("attempt 0 failed"));
  EXPECT_THAT(l.err(), HasSubstr("restarting all workers (restart 1 of 1)"));
  EXPECT_THAT(l.err(), HasSubstr("attempt 1 succeeded"));
  for (int r = 0; r < 2; ++r) {
    auto lines = rank_lines(l.out(), r);
    ASSERT_EQ(lines.size(), 1u) << l.out();
    EXPECT_EQ(parse_kv(lines[0])["TORCHELASTIC_RESTART_COUNT"], "1");
    EXPECT_EQ(parse_kv(lines[0])["TORCHELASTIC_MAX_RESTARTS"], "1");
  }
}

TEST(SinewRun, NoRestartsLeftExitsWithTheWorkersCode) {
  Launcher l({"run", "--standalone", "--nproc-per-node", "2", kWorker, "exit-on-attempt:0:5"});
  EXPECT_EQ(l.wait(), 5) << l.err();
  EXPECT_THAT(l.err(), Not(HasSubstr("restarting")));
}

TEST(SinewRun, SigtermStopsSleepingWorkers) {
  Launcher l({"run", "--standalone", "--nproc-per-node", "2", kWorker, "print-pid", "sleep:60"});
  ASSERT_TRUE(l.read_until([&] { return l.worker_pids().size() == 2; }, seconds(10)))
      << l.out() << l.err();
  auto pids = l.worker_pids();
  kill(l.pid(), SIGTERM);
  EXPECT_EQ(l.wait(seconds(10)), 128 + SIGTERM) << l.err();
  EXPECT_TRUE(all_gone(pids));
  EXPECT_THAT(l.err(), HasSubstr("received SIGTERM, forwarding it to the workers"));
  EXPECT_THAT(l.err(), HasSubstr("attempt 0 interrupted"));
  EXPECT_TRUE(has_table_row(l.err(), 1, 1, "SIGTERM", "\\(stopped by sinew run\\)"));
}

TEST(SinewRun, WorkerIgnoringSigtermIsKilledAfterGrace) {
  Launcher l({"run", "--standalone", "--nproc-per-node", "1", kWorker, "ignore-term", "print-pid",
              "sleep:60"},
             {"SINEW_RUN_KILL_GRACE_S=1"});
  ASSERT_TRUE(l.read_until([&] { return l.worker_pids().size() == 1; }, seconds(10))) << l.err();
  auto pids = l.worker_pids();
  kill(l.pid(), SIGTERM);
  EXPECT_EQ(l.wait(seconds(10)), 128 + SIGTERM) << l.err();
  EXPECT_TRUE(all_gone(pids));
  EXPECT_TRUE(has_table_row(l.err(), 0, 0, "SIGKILL", "\\(stopped by sinew run\\)"));
}

TEST(SinewRun, KillingTheLauncherKillsTheWorkers) {
  // Orphaned workers are re-parented to this process, which reaps them.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  Launcher l({"run", "--standalone", "--nproc-per-node", "2", kWorker, "print-pid", "sleep:60"});
  ASSERT_TRUE(l.read_until([&] { return l.worker_pids().size() == 2; }, seconds(10))) << l.err();
  auto pids = l.worker_pids();
  kill(l.pid(), SIGKILL);
  EXPECT_EQ(l.wait(seconds(10)), 128 + SIGKILL);
  EXPECT_TRUE(all_gone(pids));
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST(SinewRun, FaultTolerantKeepsTheSurvivorsOfAKilledWorker) {
  // ft_worker's rank 1 SIGKILLs itself; ranks 0 and 2 reconfigure and finish.
  Launcher l({"run", "--standalone", "--fault-tolerant", "--nproc-per-node", "3",
              SINEW_BIN_DIR "/ft_worker", "--fail-rank", "1", "--at-step", "3", "--steps", "10"});
  ASSERT_EQ(l.wait(seconds(30)), 0) << l.out() << l.err();
  EXPECT_THAT(l.err(), HasSubstr("lost: SIGKILL; --fault-tolerant: the other workers continue"));
  EXPECT_THAT(l.err(), HasSubstr("attempt 0 succeeded (run id"));
  EXPECT_THAT(l.err(), HasSubstr(", 1 of 3 workers lost):"));
  EXPECT_TRUE(has_table_row(l.err(), 1, 1, "SIGKILL", "\\(lost; the others continued\\)"));
  EXPECT_THAT(rank_lines(l.out(), 0),
              ::testing::Contains(HasSubstr("RESULT orig 0 rank 0 size 2 epoch 1 reconfigs 1")))
      << l.out();
  EXPECT_THAT(rank_lines(l.out(), 2),
              ::testing::Contains(HasSubstr("RESULT orig 2 rank 1 size 2 epoch 1 reconfigs 1")))
      << l.out();
  // A worker that exits with an error code still fails the job (here with
  // the environment spelling of the option).
  Launcher bad({"run", "--standalone", "--nproc-per-node", "2", kWorker, "fail-rank:1:3"},
               {"SINEW_RUN_FAULT_TOLERANT=1"});
  EXPECT_EQ(bad.wait(), 3) << bad.err();
  EXPECT_THAT(bad.err(), HasSubstr("failed: 3; stopping the other workers"));
}

TEST(SinewRun, FaultTolerantMaxRestartsRespawnsAKilledWorkerAsAJoiner) {
  // Rank 1 SIGKILLs itself at step 10; sinew run respawns it with SINEW_JOIN=1,
  // the survivors admit it at a regroup (every 10 steps) and hand it their state.
  const std::string example = SINEW_BIN_DIR "/fault_tolerant_loop";
  if (access(example.c_str(), X_OK) != 0)
    GTEST_SKIP() << example << " is not built (SINEW_BUILD_EXAMPLES=OFF)";
  Launcher l({"run", "--standalone", "--fault-tolerant", "--max-restarts", "1", "--nproc-per-node",
              "3", example, "--kill-rank", "1", "--at-step", "10", "--steps", "60", "--admit-every",
              "10", "--elems", "256"});
  ASSERT_EQ(l.wait(seconds(60)), 0) << l.out() << l.err();
  EXPECT_THAT(l.err(), HasSubstr("sinew run: respawning local rank 1 as a joiner (restart 1 of 1)"));
  EXPECT_THAT(l.err(), HasSubstr("attempt 0 succeeded (run id"));
  EXPECT_THAT(l.err(), HasSubstr(", 1 of 3 workers lost, 1 respawned as joiner (--max-restarts 1)):"));
  EXPECT_TRUE(has_table_row(l.err(), 1, 1, "SIGKILL", "\\(lost; respawned as a joiner\\)"));
  EXPECT_TRUE(has_table_row(l.err(), 1, 1, "0", "\\(respawned as a joiner\\)"));
  // The joiner (slot rank 1) gets the last rank and resumes at a multiple of 10.
  std::regex rejoined("rank 1 rejoined as rank 2 of 3 \\(epoch \\d+\\); resuming at step [1-6]0");
  auto slot1 = rank_lines(l.out(), 1);
  EXPECT_TRUE(std::any_of(slot1.begin(), slot1.end(),
                          [&](const std::string& s) { return std::regex_search(s, rejoined); }))
      << l.out();
  auto rank0 = rank_lines(l.out(), 0);
  EXPECT_THAT(rank0, ::testing::Contains(::testing::ContainsRegex(
                         "^\\[step [1-6]0\\] admitted 1 joiner \\(rank 1\\): world size 3")))
      << l.out();
  EXPECT_THAT(rank0, ::testing::Contains(HasSubstr(
                         "done: 60 steps, every average exact, weights identical on every rank; "
                         "final world size 3 (started with 3, lost [1], joined [1])")))
      << l.out();
}

// A rank killed while its group is still initializing: the launcher records
// it lost in the job store, the others' init fails with PeerLost naming it at
// once (not after the group timeout), and they agree, shrink and finish.
class RankDyingDuringInit : public ::testing::TestWithParam<const char*> {};

TEST_P(RankDyingDuringInit, OthersShrinkAndFinish) {
  const std::string example = SINEW_BIN_DIR "/fault_tolerant_loop";
  if (access(example.c_str(), X_OK) != 0)
    GTEST_SKIP() << example << " is not built (SINEW_BUILD_EXAMPLES=OFF)";
  for (int trial = 0; trial < 3; ++trial) {
    Launcher l({"run", "--standalone", "--fault-tolerant", "--nproc-per-node", "4", example, "--kill-rank", "2",
                "--at-step", "-1", "--steps", "30", "--admit-every", "0", "--elems", "256"},
               {std::string("SINEW_TRANSPORT=") + GetParam(), "UCX_NET_DEVICES=lo", "SINEW_FR_BUFFER_SIZE=0"});
    ASSERT_EQ(l.wait(seconds(60)), 0) << l.out() << l.err();
    EXPECT_THAT(l.err(), HasSubstr("sinew run: rank 2 (pid"));
    EXPECT_THAT(l.err(), HasSubstr("attempt 0 succeeded"));
    EXPECT_THAT(rank_lines(l.out(), 0),
                ::testing::Contains(HasSubstr("done: 30 steps, every average exact, weights identical on every rank; "
                                              "final world size 3 (started with 4, lost [2], joined [])")))
        << l.out() << l.err();
  }
}

// Over UCX the rank dies before, while or after it publishes its worker
// address: the others' address wait polls the launcher's record, and a rank
// that gives up during the wire-up leaves a record naming whom it lost, so
// its peers do not take it for dead.
INSTANTIATE_TEST_SUITE_P(Transports, RankDyingDuringInit, ::testing::Values("shm", "ucx"));

TEST(SinewRun, UnderscoreSpellingsAndPetEnvironment) {
  Launcher l({"run", "--rdzv_id", "job7", "--master_addr", "127.0.0.1", "--max_restarts", "0",
              "--local_ranks_filter", "0,1", "--store-token", "tok123", "--backend", "gloo",
              kWorker, "print-env"},
             {"PET_NPROC_PER_NODE=2", "PET_MONITOR_INTERVAL=0.05"});
  ASSERT_EQ(l.wait(), 0) << l.err();
  EXPECT_EQ(rank_lines(l.out(), 2).size(), 0u);
  for (int r = 0; r < 2; ++r) {
    auto lines = rank_lines(l.out(), r);
    ASSERT_EQ(lines.size(), 1u) << l.out();
    auto env = parse_kv(lines[0]);
    EXPECT_EQ(env["WORLD_SIZE"], "2");
    EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "job7");
    EXPECT_EQ(env["SINEW_STORE_TOKEN"], "tok123");
    EXPECT_EQ(env["SINEW_BACKEND"], "gloo");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_NE(env["MASTER_PORT"], "0");
  }
}

TEST(SinewRun, LogDirHoldsPerRankFiles) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("sinew_launcher_test_" + std::to_string(getpid()));
  Launcher l({"run", "--rdzv-id", "logs", "--log-dir", dir.string(), "--nproc-per-node", "2",
              kWorker, "print-env", "stderr:oops", "partial:tail"});
  ASSERT_EQ(l.wait(), 0) << l.err();
  for (int r = 0; r < 2; ++r) {
    fs::path rank_dir = dir / "logs" / "attempt_0" / std::to_string(r);
    std::ifstream out(rank_dir / "stdout.log"), err(rank_dir / "stderr.log");
    std::string out_text((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
    std::string err_text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
    auto lines = lines_of(out_text);
    ASSERT_EQ(lines.size(), 2u) << out_text;
    EXPECT_EQ(parse_kv(lines[0])["RANK"], std::to_string(r));
    EXPECT_EQ(lines[1], "tail");
    EXPECT_EQ(err_text, "oops\n");
    // The console still shows everything, the partial last line included.
    auto console = rank_lines(l.out(), r);
    ASSERT_EQ(console.size(), 2u) << l.out();
    EXPECT_EQ(console[1], "tail");
  }
  fs::remove_all(dir);
}

TEST(SinewRun, TwoNodesOnOneHostShareOneJob) {
  std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  std::vector<std::string> common{"run",    "--nnodes",  "2",   "--rdzv-endpoint",
                                  endpoint, "--rdzv-id", "two", "--nproc-per-node",
                                  "2"};
  auto node = [&](int rank) {
    auto args = common;
    args.insert(args.end(), {"--node-rank", std::to_string(rank), kWorker, "print-env"});
    return args;
  };
  Launcher n1(node(1), {"SINEW_STORE_TOKEN=shared"});
  Launcher n0(node(0), {"SINEW_STORE_TOKEN=shared"});
  ASSERT_EQ(n0.wait(), 0) << n0.err();
  ASSERT_EQ(n1.wait(), 0) << n1.err();
  for (int r = 0; r < 4; ++r) {
    auto lines = rank_lines(r < 2 ? n0.out() : n1.out(), r);
    ASSERT_EQ(lines.size(), 1u) << n0.out() << n1.out();
    auto env = parse_kv(lines[0]);
    EXPECT_EQ(env["WORLD_SIZE"], "4");
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(r % 2));
    EXPECT_EQ(env["GROUP_RANK"], std::to_string(r / 2));
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "2");
    EXPECT_EQ(env["MASTER_ADDR"] + ":" + env["MASTER_PORT"], endpoint);
    EXPECT_EQ(env["SINEW_STORE_TOKEN"], "shared");
  }
}

TEST(SinewRun, WorkersJoinTheLaunchersStore) {
  Launcher l({"run", "--standalone", "--nproc-per-node", "3", kWorker, "init"});
  ASSERT_EQ(l.wait(), 0) << l.out() << l.err();
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(rank_lines(l.out(), r),
              std::vector<std::string>{"init rank=" + std::to_string(r) + " size=3 sum=6"})
        << l.out();
}


TEST(SinewRun, AFailureOnOneNodeRestartsEveryNode) {
  std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  auto node = [&](int rank, std::vector<std::string> steps) {
    std::vector<std::string> args{"run",
                                  "--nnodes",
                                  "2",
                                  "--node-rank",
                                  std::to_string(rank),
                                  "--rdzv-endpoint",
                                  endpoint,
                                  "--max-restarts",
                                  "1",
                                  "--monitor-interval",
                                  "0.02",
                                  kWorker};
    args.insert(args.end(), steps.begin(), steps.end());
    return args;
  };
  // Node 0's workers wait in attempt 0 and succeed at once in attempt 1;
  // node 1's fail in attempt 0.
  Launcher n0(node(0, {"exit-on-attempt:1:0", "sleep:20"}), {"SINEW_STORE_TOKEN=t2"});
  Launcher n1(node(1, {"exit-on-attempt:0:7", "print-env"}), {"SINEW_STORE_TOKEN=t2"});
  ASSERT_EQ(n0.wait(), 0) << n0.err();
  ASSERT_EQ(n1.wait(), 0) << n1.err();
  EXPECT_THAT(n0.err(), HasSubstr("rank 1 on another node failed (exit 7)"));
  EXPECT_THAT(n0.err(), HasSubstr("attempt 0 failed on another node"));
  EXPECT_THAT(n0.err(), HasSubstr("restarting all workers (restart 1 of 1)"));
  EXPECT_THAT(n0.err(), HasSubstr("attempt 1 succeeded"));
  auto lines = rank_lines(n1.out(), 1);
  ASSERT_EQ(lines.size(), 1u) << n1.out();
  EXPECT_EQ(parse_kv(lines[0])["TORCHELASTIC_RESTART_COUNT"], "1");
  EXPECT_EQ(parse_kv(lines[0])["WORLD_SIZE"], "2");
}

TEST(SinewRun, MultiNodeRequiresAToken) {
  Launcher l({"run", "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:1", kWorker});
  EXPECT_EQ(l.wait(), 2);
  EXPECT_THAT(l.err(), HasSubstr("--store-token"));
  EXPECT_THAT(l.err(), HasSubstr("SINEW_STORE_TOKEN"));
}

TEST(SinewRun, MissingProgramIsAnError) {
  Launcher l({"run", "--standalone", "/nonexistent/prog"});
  EXPECT_EQ(l.wait(), 2);
  EXPECT_THAT(l.err(), HasSubstr("/nonexistent/prog"));
}

}  // namespace
}  // namespace sinew::dist
