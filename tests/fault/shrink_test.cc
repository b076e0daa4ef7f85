// Fault injection with real processes: a rank is SIGKILLed or SIGSTOPped in
// the middle of an allreduce loop; the survivors get PeerLostError, agree on
// the failed set, reconfigure in place and finish with exact results.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "ft_job.h"

namespace sinew::dist::ft {
namespace {

// Waits for the ranks except `skip` (a stopped one), then kills that one.
void finish(Job& job, std::chrono::seconds limit, int skip = -1) {
  std::vector<int> hung;
  const bool done = job.wait(limit, &hung, {skip});
  for (int r : hung)
    ADD_FAILURE() << "rank " << r << " did not finish in " << limit.count() << " s (hang)\n" << job.proc(r).output();
  ASSERT_TRUE(done);
  if (skip >= 0) job.reap(skip);
}

void expect_survivor(const Job& job, int r, int new_rank, int size, const std::string& members) {
  const Proc k = job.proc(r);
  EXPECT_TRUE(WIFEXITED(k.status) && WEXITSTATUS(k.status) == 0) << "rank " << r << ":\n" << k.output();
  EXPECT_THAT(k.output(), ::testing::HasSubstr(fmt::format("RESULT orig {} rank {} size {} epoch 1 reconfigs 1",
                                                           r, new_rank, size)))
      << k.output();
  EXPECT_THAT(k.output(), ::testing::HasSubstr("members " + members)) << k.output();
  // Detection latency is a benchmark figure; print it, never assert on it.
  auto pos = k.output().find("detect_ms ");
  if (pos != std::string::npos) std::printf("rank %d %s", r, k.output().substr(pos).c_str());
}

TEST(Shrink, KilledMiddleRankSurvivorsRenumberAndContinue) {
  Job job(4, {"--fail-rank", "1", "--at-step", "5", "--steps", "30"});
  finish(job, 60s);
  EXPECT_TRUE(WIFSIGNALED(job.proc(1).status) && WTERMSIG(job.proc(1).status) == SIGKILL);
  expect_survivor(job, 0, 0, 3, "0,2,3");
  expect_survivor(job, 2, 1, 3, "0,2,3");
  expect_survivor(job, 3, 2, 3, "0,2,3");
}

// A second rank dies while the survivors agree on the first: every survivor
// still ends with the same failed set, {1, 3}.
TEST(Shrink, SecondDeathDuringAgreement) {
  Job job(4, {"--fail-rank", "1", "--at-step", "5", "--steps", "20", "--also-fail", "3"});
  finish(job, 60s);
  EXPECT_TRUE(WIFSIGNALED(job.proc(3).status));
  expect_survivor(job, 0, 0, 2, "0,2");
  expect_survivor(job, 2, 1, 2, "0,2");
}

TEST(Shrink, KilledLastRank) {
  Job job(3, {"--fail-rank", "2", "--at-step", "3", "--steps", "20"});
  finish(job, 60s);
  expect_survivor(job, 0, 0, 2, "0,1");
  expect_survivor(job, 1, 1, 2, "0,1");
}

TEST(Shrink, KilledRankZero) {
  Job job(3, {"--fail-rank", "0", "--at-step", "4", "--steps", "20"});
  finish(job, 60s);
  expect_survivor(job, 1, 0, 2, "1,2");
  expect_survivor(job, 2, 1, 2, "1,2");
}

// Between hosts (UCX, no shared memory): the peer that sees the endpoint fail
// revokes through the job store; the others' watchdogs pick it up.
TEST(Shrink, KilledRankOverUcxRevokesThroughTheStore) {
  Job job(4, {"--fail-rank", "1", "--at-step", "5", "--steps", "20"},
          {"SINEW_TRANSPORT=ucx", "UCX_NET_DEVICES=lo", "SINEW_FT_STORE_HEARTBEAT_MS=50"});
  finish(job, 90s);
  expect_survivor(job, 0, 0, 3, "0,2,3");
  expect_survivor(job, 2, 1, 3, "0,2,3");
  expect_survivor(job, 3, 2, 3, "0,2,3");
}

// The gloo backend recovers the same way: agreement through the store, then
// its context rebuilt in the next epoch's namespace.
TEST(Shrink, GlooBackendRebuildsItsContextForTheSurvivors) {
  Job job(3, {"--fail-rank", "1", "--at-step", "4", "--steps", "15"}, {"SINEW_BACKEND=gloo", "FT_TIMEOUT_S=3"});
  finish(job, 90s);
  expect_survivor(job, 0, 0, 2, "0,2");
  expect_survivor(job, 2, 1, 2, "0,2");
}

// No false positive: a rank that blocks on the job store for twice the
// heartbeat timeout keeps heartbeating over its own store connection.
TEST(Shrink, LongJobStoreWaitIsNotAFailureBetweenHosts) {
  Job job(3, {"--fail-rank", "1", "--at-step", "3", "--steps", "8", "--how", "store-wait"},
          {"SINEW_TRANSPORT=ucx", "UCX_NET_DEVICES=lo", "SINEW_FT_STORE_HEARTBEAT_MS=50"});
  finish(job, 60s);
  for (int r = 0; r < 3; ++r) {
    const Proc k = job.proc(r);
    EXPECT_TRUE(WIFEXITED(k.status) && WEXITSTATUS(k.status) == 0) << "rank " << r << ":\n" << k.output();
    EXPECT_THAT(k.output(), ::testing::HasSubstr(fmt::format("RESULT orig {} rank {} size 3 epoch 0 reconfigs 0", r, r)))
        << k.output();
  }
}

TEST(Shrink, StoppedRankIsDetectedByItsStalledHeartbeat) {
  Job job(3, {"--fail-rank", "1", "--at-step", "4", "--steps", "20", "--how", "stop"});
  finish(job, 60s, /*skip=*/1);
  expect_survivor(job, 0, 0, 2, "0,2");
  expect_survivor(job, 2, 1, 2, "0,2");
}

// Seeded random trials: world size, victim, step and kind of failure drawn
// from SINEW_FT_SEED (default 1); SINEW_FT_TRIALS trials (default 4 in CI;
// run with e.g. SINEW_FT_TRIALS=1000 outside CI). Every trial must finish
// with no hang and every survivor must report the same membership.
TEST(Shrink, SeededRandomTrials) {
  const char* t = std::getenv("SINEW_FT_TRIALS");
  const char* sd = std::getenv("SINEW_FT_SEED");
  const int trials = t ? std::atoi(t) : 4;
  std::mt19937 gen(sd ? static_cast<uint32_t>(std::atoi(sd)) : 1u);
  for (int trial = 0; trial < trials; ++trial) {
    const int world = std::uniform_int_distribution<int>(2, 4)(gen);
    const int victim = std::uniform_int_distribution<int>(0, world - 1)(gen);
    // From step 1: the group has formed. A rank dying during init is not a
    // recoverable failure yet (survivors' init times out; see the issue note).
    const int step = std::uniform_int_distribution<int>(1, 12)(gen);
    const bool stop = std::uniform_int_distribution<int>(0, 4)(gen) == 0;  // 1 in 5: SIGSTOP
    SCOPED_TRACE(fmt::format("trial {}: world {} victim {} step {} {}", trial, world, victim, step,
                             stop ? "SIGSTOP" : "SIGKILL"));
    Job job(world, {"--fail-rank", std::to_string(victim), "--at-step", std::to_string(step), "--steps", "15",
                    "--how", stop ? "stop" : "kill"});
    finish(job, 60s, stop ? victim : -1);
    std::string members;
    for (int r = 0; r < world; ++r)
      if (r != victim) members += (members.empty() ? "" : ",") + std::to_string(r);
    int new_rank = 0;
    for (int r = 0; r < world; ++r) {
      if (r == victim) continue;
      expect_survivor(job, r, new_rank++, world - 1, members);
    }
    if (::testing::Test::HasFailure()) break;
  }
}

}  // namespace
}  // namespace sinew::dist::ft
