// Subgroups follow a reconfigure: four real processes make split() and
// new_group() subgroups, rank 2 is SIGKILLed, the survivors reconfigure the
// parent, and each subgroup is rebuilt (lost a member), kept (lost none) or
// gone, with exact allreduce results on every successor. The test re-runs
// this binary as the ranks (FollowWorker.Rank, skipped unless spawned).
#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "sinew/core/error.h"
#include "sinew/dist/init.h"
#include "sinew/dist/tcp_store.h"

extern char** environ;

namespace sinew::dist {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

int64_t allreduce_sum(ProcessGroup& g, int64_t x) {
  std::vector<int64_t> v(64, x);
  g.allreduce(TensorView::flat(v.data(), DType::kI64, 64))->wait();
  EXPECT_EQ(v[0], v[63]);
  return v[0];
}

TEST(FollowWorker, Rank) {
  if (!std::getenv("SINEW_FOLLOW_WORKER")) GTEST_SKIP() << "a rank of SubgroupsFollow.*, spawned by it";
  InitOptions io;
  io.timeout = 20s;
  auto pg = init_process_group(io);
  const int r = pg->rank();
  auto parity = pg->split(r % 2, r);           // {0,2} and {1,3}
  auto first3 = pg->new_group({0, 1, 2});      // nullptr on rank 3
  auto pair23 = pg->new_group({2, 3});         // nullptr on ranks 0, 1
  ASSERT_EQ(allreduce_sum(*parity, r + 1), r % 2 ? 2 + 4 : 1 + 3);
  if (first3) ASSERT_EQ(allreduce_sum(*first3, r + 1), 6);
  if (pair23) ASSERT_EQ(allreduce_sum(*pair23, r + 1), 7);
  allreduce_sum(*pg, 1);
  if (r == 2) ::raise(SIGKILL);
  std::shared_ptr<ProcessGroup> next;
  try {
    for (int i = 0; i < 100; ++i) allreduce_sum(*pg, 1);
    FAIL() << "no PeerLostError after rank 2 was killed";
  } catch (const PeerLostError&) {
    next = pg->reconfigure(Deadline::after(20s));
  }
  ASSERT_EQ(next->size(), 3);
  ASSERT_EQ(next->rank(), r == 3 ? 2 : r);
  ASSERT_EQ(allreduce_sum(*next, r + 1), 1 + 2 + 4);
  // parity: {0,2} lost rank 2 and is rebuilt as {0}; {1,3} is kept as it is.
  auto parity2 = next->successor(parity.get());
  ASSERT_TRUE(parity2);
  if (r == 0) {
    EXPECT_NE(parity2, parity);
    EXPECT_EQ(parity2->size(), 1);
    EXPECT_EQ(allreduce_sum(*parity2, 5), 5);
    try {
      allreduce_sum(*parity, 1);
      ADD_FAILURE() << "the superseded subgroup still ran an op";
    } catch (const AbortedError& e) {
      EXPECT_THAT(e.what(), HasSubstr("successor()"));
    }
  } else {
    EXPECT_EQ(parity2, parity);
    EXPECT_EQ(allreduce_sum(*parity2, r + 1), 2 + 4);
  }
  // new_group({0,1,2}) lost rank 2: rebuilt as ranks 0, 1 of the new group.
  if (r != 3) {
    auto first2 = next->successor(first3.get());
    ASSERT_TRUE(first2);
    EXPECT_EQ(first2->size(), 2);
    EXPECT_EQ(first2->rank(), r);
    EXPECT_EQ(allreduce_sum(*first2, r + 10), 10 + 11);
  }
  // new_group({2,3}) lost rank 2: rebuilt as rank 3 alone.
  if (r == 3) {
    auto alone = next->successor(pair23.get());
    ASSERT_TRUE(alone);
    EXPECT_EQ(alone->size(), 1);
    EXPECT_EQ(allreduce_sum(*alone, 9), 9);
  }
  // Not a subgroup of the group `next` came from.
  try {
    next->successor(next.get());
    ADD_FAILURE() << "successor() accepted a group that is not an old subgroup";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("split() or new_group()"));
  }
  // Subgroups of the new group follow the next reconfigure as well.
  auto again = next->split(0, next->rank());
  EXPECT_EQ(allreduce_sum(*again, 1), 3);
  auto next2 = next->reconfigure(Deadline::after(20s));
  EXPECT_EQ(next2->successor(again.get()), again);
  // Two epochs on, the first rank drops epoch 0's and 1's records; the
  // subgroups kept since epoch 0 (rooted in its namespace) still work.
  auto next3 = next2->reconfigure(Deadline::after(20s));
  EXPECT_EQ(allreduce_sum(*next3, 1), 3);
  if (r != 0) EXPECT_EQ(allreduce_sum(*parity2, r + 1), 2 + 4);
  EXPECT_EQ(allreduce_sum(*again, 1), 3);
  std::printf("FOLLOW OK rank %d\n", r);
}

TEST(SubgroupsFollow, SplitAndNewGroupSubgroupsAreRebuiltOrKeptAfterAShrink) {
  TcpStoreServer server("127.0.0.1", 0, "tok");
  char tmpl[] = "/tmp/sinew-follow-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const int world = 4;
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    for (auto v : {fmt::format("RANK={}", r), fmt::format("LOCAL_RANK={}", r), fmt::format("WORLD_SIZE={}", world),
                   fmt::format("LOCAL_WORLD_SIZE={}", world), std::string("MASTER_ADDR=127.0.0.1"),
                   fmt::format("MASTER_PORT={}", server.port()), std::string("SINEW_STORE_TOKEN=tok"),
                   std::string("SINEW_STORE_HOSTED=1"), std::string("SINEW_FOLLOW_WORKER=1"),
                   std::string("SINEW_FR_BUFFER_SIZE=0")})
      env.push_back(v);
    std::vector<std::string> argv = {"/proc/self/exe", "--gtest_filter=FollowWorker.Rank"};
    std::vector<char*> av, ev;
    for (auto& a : argv) av.push_back(a.data());
    av.push_back(nullptr);
    for (auto& e : env) ev.push_back(e.data());
    ev.push_back(nullptr);
    const std::string out = fmt::format("{}/rank{}.out", dir, r);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid = -1;
    EXPECT_EQ(posix_spawn(&pid, av[0], &fa, nullptr, av.data(), ev.data()), 0);
    posix_spawn_file_actions_destroy(&fa);
    pids.push_back(pid);
  }
  auto output = [&](int r) {
    std::ifstream f(fmt::format("{}/rank{}.out", dir, r));
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  auto deadline = Deadline::after(60s);
  for (int r = 0; r < world; ++r) {
    int st = 0;
    while (::waitpid(pids[r], &st, WNOHANG) == 0 && !deadline.expired()) std::this_thread::sleep_for(10ms);
    if (deadline.expired()) {
      ::kill(pids[r], SIGKILL);
      ::waitpid(pids[r], &st, 0);
      ADD_FAILURE() << "rank " << r << " hung:\n" << output(r);
      continue;
    }
    if (r == 2) {
      EXPECT_TRUE(WIFSIGNALED(st)) << output(r);
      continue;
    }
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "rank " << r << ":\n" << output(r);
    EXPECT_THAT(output(r), HasSubstr(fmt::format("FOLLOW OK rank {}", r))) << output(r);
  }
  (void)!std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
}  // namespace sinew::dist
