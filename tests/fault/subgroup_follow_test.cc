// Subgroups follow a reconfigure: four real processes make split() and
// new_group() subgroups, rank 2 is SIGKILLed, the survivors reconfigure the
// parent, and each subgroup is rebuilt (lost a member), kept (lost none) or
// gone, with exact allreduce results on every successor. The test re-runs
// this binary as the ranks (FollowWorker.Rank, skipped unless spawned).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>

#include "ft_job.h"
#include "sinew/core/error.h"
#include "sinew/dist/init.h"

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
  const int world = 4;
  ft::Job job(world, ft::JobSpec{"/proc/self/exe",
                                 {"--gtest_filter=FollowWorker.Rank"},
                                 {"SINEW_FOLLOW_WORKER=1", "SINEW_FR_BUFFER_SIZE=0"}});
  std::vector<int> hung;
  job.wait(60s, &hung);
  for (int r : hung) {
    job.reap(r);
    ADD_FAILURE() << "rank " << r << " hung:\n" << job.proc(r).output();
  }
  for (int r = 0; r < world; ++r) {
    const ft::Proc p = job.proc(r);
    if (std::count(hung.begin(), hung.end(), r)) continue;
    if (r == 2) {
      EXPECT_TRUE(WIFSIGNALED(p.status)) << p.output();
      continue;
    }
    EXPECT_TRUE(p.exited_ok()) << "rank " << r << ":\n" << p.output();
    EXPECT_THAT(p.output(), HasSubstr(fmt::format("FOLLOW OK rank {}", r))) << p.output();
  }
}

}  // namespace
}  // namespace sinew::dist
