// The PyTorch-shaped external reconfigure API on the sinew backend, ranks as
// threads: an outside "coordinator" (the test) collects handles and gives
// every member of the new group the same list.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <barrier>

#include "../dist/rank_threads.h"
#include "sinew/core/error.h"

namespace sinew::dist {
namespace {

using namespace std::chrono_literals;

// Runs `world` ranks; each builds its group, publishes its handle, then runs
// body(rank, pg, handles) once all handles are known.
void with_handles(int world,
                  const std::function<void(int, ProcessGroupPtr&, const std::vector<std::string>&)>& body,
                  Millis timeout = Millis(20000), const std::string& backend = "sinew") {
  auto store = make_memory_store();
  std::vector<std::string> handles(world);
  std::barrier sync(world);
  sinew::testing::run_ranks(world, [&](int r) {
    auto pg = create_process_group(sinew::testing::group_options(store, r, world, timeout, backend));
    pg->wait_ready(Deadline::after(10s));
    handles[r] = pg->reconfigure_handle();
    sync.arrive_and_wait();
    body(r, pg, handles);
  });
}

int64_t allreduce_sum(ProcessGroup& pg, int64_t v) {
  pg.allreduce(TensorView::flat(&v, DType::kI64, 1))->wait();
  return v;
}

TEST(ReconfigureApi, PermutedHandlesRenumberByIndexThenAllreduceAndSendRecv) {
  with_handles(3, [](int r, ProcessGroupPtr& pg, const std::vector<std::string>& h) {
    std::vector<std::string> order = {h[2], h[0], h[1]};
    auto next = pg->reconfigure("perm", order, Millis(20000));
    EXPECT_EQ(next->rank(), (r + 1) % 3);
    EXPECT_EQ(next->size(), 3);
    EXPECT_EQ(next->epoch(), 1u);
    EXPECT_EQ(allreduce_sum(*next, r + 1), 6);
    int64_t v = next->rank() == 0 ? 99 : 0;
    if (next->rank() == 0) next->send(TensorView::flat(&v, DType::kI64, 1), 1)->wait();
    if (next->rank() == 1) {
      next->recv(TensorView::flat(&v, DType::kI64, 1), 0)->wait();
      EXPECT_EQ(v, 99);
    }
  });
}

TEST(ReconfigureApi, IdentityKeepsRanks) {
  with_handles(3, [](int r, ProcessGroupPtr& pg, const std::vector<std::string>& h) {
    auto next = pg->reconfigure("identity", h, Millis(20000));
    EXPECT_EQ(next->rank(), r);
    EXPECT_EQ(allreduce_sum(*next, 1), 3);
  });
}

TEST(ReconfigureApi, ShrinkLastAndMiddleRank) {
  with_handles(4, [](int r, ProcessGroupPtr& pg, const std::vector<std::string>& h) {
    if (r != 3) {
      auto a = pg->reconfigure("drop-last", {h[0], h[1], h[2]}, Millis(20000));
      EXPECT_EQ(a->rank(), r);
      EXPECT_EQ(allreduce_sum(*a, r), 0 + 1 + 2);
    }
    if (r != 1) {
      auto b = pg->reconfigure("drop-middle", {h[0], h[2], h[3]}, Millis(20000));
      EXPECT_EQ(b->rank(), r == 0 ? 0 : r - 1);
      EXPECT_EQ(allreduce_sum(*b, r), 0 + 2 + 3);
    }
  });
}

TEST(ReconfigureApi, ScaleDownThenUpAgain) {
  with_handles(3, [](int r, ProcessGroupPtr& pg, const std::vector<std::string>& h) {
    // Down to two ranks, then back up to all three from the small group.
    ProcessGroupPtr small;
    if (r != 2) {
      small = pg->reconfigure("down", {h[0], h[1]}, Millis(20000));
      EXPECT_EQ(allreduce_sum(*small, 1), 2);
    }
    auto up = pg->reconfigure("up", h, Millis(20000));
    EXPECT_EQ(up->size(), 3);
    EXPECT_EQ(allreduce_sum(*up, 1), 3);
  });
}

TEST(ReconfigureApi, ReusedUuidIsRejected) {
  with_handles(2, [](int r, ProcessGroupPtr& pg, const std::vector<std::string>& h) {
    auto next = pg->reconfigure("once", h, Millis(20000));
    EXPECT_EQ(allreduce_sum(*next, 1), 2);
    try {
      pg->reconfigure("once", {h[1], h[0]}, Millis(20000));
      ADD_FAILURE() << "reused uuid accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("'once'"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("not used before"));
    }
  });
}

TEST(ReconfigureApi, HandleMustBeInTheList) {
  with_handles(2, [](int r, ProcessGroupPtr& pg, const std::vector<std::string>& h) {
    if (r == 0) {
      EXPECT_THROW(pg->reconfigure("missing", {h[1]}, Millis(1000)), InvalidArgument);
      EXPECT_THROW(pg->reconfigure("a/b", h, Millis(1000)), InvalidArgument);
    }
  });
}

TEST(ReconfigureApi, RecoverAfterAbortWithHooksAndErrorState) {
  with_handles(2, [](int r, ProcessGroupPtr& pg, const std::vector<std::string>& h) {
    std::string hooked;
    pg->add_abort_hook([&](const std::string& why) { hooked = why; });
    EXPECT_EQ(pg->error_state(), ProcessGroup::ErrorState::kSuccess);
    pg->abort("coordinator says so");
    EXPECT_EQ(hooked, "coordinator says so");
    EXPECT_THROW(pg->barrier()->wait(Deadline::after(5s)), AbortedError);
    auto next = pg->reconfigure("after-abort", h, Millis(20000));
    EXPECT_EQ(allreduce_sum(*next, 1), 2);
  });
}

TEST(ReconfigureApi, RecoverAfterTimeout) {
  with_handles(
      2,
      [](int r, ProcessGroupPtr& pg, const std::vector<std::string>& h) {
        if (r == 0) {  // rank 1 skips this allreduce: rank 0 times out
          EXPECT_THROW(allreduce_sum(*pg, 1), TimeoutError);
          EXPECT_EQ(pg->error_state(), ProcessGroup::ErrorState::kTimeout);
        }
        auto next = pg->reconfigure("after-timeout", h, Millis(20000));
        EXPECT_EQ(allreduce_sum(*next, 1), 2);
      },
      Millis(300));
}

TEST(ReconfigureApi, GlooRebuildsItsContextInANewNamespace) {
  bool have_gloo = false;
  for (const auto& b : available_backends()) have_gloo |= b == "gloo";
  if (!have_gloo) GTEST_SKIP() << "built without gloo";
  with_handles(
      3,
      [](int r, ProcessGroupPtr& pg, const std::vector<std::string>& h) {
        std::string hooked;
        pg->add_abort_hook([&](const std::string& why) { hooked = why; });
        pg->abort("recover");
        EXPECT_EQ(hooked, "recover");
        auto next = pg->reconfigure("gloo-perm", {h[1], h[2], h[0]}, Millis(20000));
        EXPECT_EQ(next->backend_name(), "gloo");
        EXPECT_EQ(next->rank(), (r + 2) % 3);
        EXPECT_EQ(allreduce_sum(*next, r + 1), 6);
        EXPECT_THROW(pg->reconfigure("gloo-perm", {h[0], h[1], h[2]}, Millis(1000)), InvalidArgument);
      },
      Millis(20000), "gloo");
}

// The contract's "single to all" and "merge/split" cases, on every
// in-process backend.
std::vector<std::string> reconfigurable_backends() {
  std::vector<std::string> out;
  for (const auto& b : available_backends())
    if (b != "mpi") out.push_back(b);
  return out;
}

class ReconfigureContract : public ::testing::TestWithParam<std::string> {};

TEST_P(ReconfigureContract, SingleToAll) {
  with_handles(
      3,
      [](int r, ProcessGroupPtr& pg, const std::vector<std::string>& h) {
        if (r == 0) {  // rank 0 alone first (say, while the others restart)...
          auto single = pg->reconfigure("single", {h[0]}, Millis(20000));
          EXPECT_EQ(single->size(), 1);
          EXPECT_EQ(allreduce_sum(*single, 7), 7);
        }
        // ...then everyone again
        auto all = pg->reconfigure("all", h, Millis(20000));
        EXPECT_EQ(all->rank(), r);
        EXPECT_EQ(all->size(), 3);
        EXPECT_EQ(allreduce_sum(*all, r + 1), 6);
      },
      Millis(20000), GetParam());
}

TEST_P(ReconfigureContract, SplitIntoTwoThenMergeBack) {
  with_handles(
      4,
      [](int r, ProcessGroupPtr& pg, const std::vector<std::string>& h) {
        // Split: {0, 1} and {3, 2} (the second renumbered by list order).
        const bool low = r < 2;
        auto half = low ? pg->reconfigure("low", {h[0], h[1]}, Millis(20000))
                        : pg->reconfigure("high", {h[3], h[2]}, Millis(20000));
        EXPECT_EQ(half->size(), 2);
        EXPECT_EQ(half->rank(), low ? r : 3 - r);
        EXPECT_EQ(allreduce_sum(*half, r), low ? 0 + 1 : 2 + 3);
        // Merge, from the halves' handles, in a new order.
        std::vector<std::string> merged = {h[2], h[3], h[0], h[1]};
        auto whole = pg->reconfigure("merged", merged, Millis(20000));
        EXPECT_EQ(whole->rank(), (r + 2) % 4);
        EXPECT_EQ(allreduce_sum(*whole, r), 0 + 1 + 2 + 3);
      },
      Millis(20000), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Backends, ReconfigureContract, ::testing::ValuesIn(reconfigurable_backends()));

}  // namespace
}  // namespace sinew::dist
