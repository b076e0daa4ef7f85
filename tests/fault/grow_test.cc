// Grow: a new process joins a running group at the next epoch without the
// members restarting, and receives the state from a survivor.
#include <gtest/gtest.h>

#include <thread>

#include "../dist/rank_threads.h"
#include "sinew/core/error.h"
#include "sinew/dist/launch_protocol.h"

namespace sinew::dist {
namespace {

using namespace std::chrono_literals;

GroupOptions opts(StorePtr store, int rank, int size) {
  return sinew::testing::group_options(std::move(store), rank, size, Millis(20000));
}

TEST(Grow, JoinerGetsTheNextRankAndTheStateThenAllreduces) {
  auto store = make_memory_store();
  std::vector<int64_t> results(3, -1);
  std::vector<double> state_seen(3, -1);
  sinew::testing::run_ranks(3, [&](int who) {
    ProcessGroupPtr pg;
    std::vector<double> state(4, 0.0);
    if (who < 2) {
      pg = create_process_group(opts(store, who, 2));
      pg->wait_ready(Deadline::after(10s));
      state = {1.5, 2.5, 3.5, static_cast<double>(who)};
      // Wait until the joiner has asked, then admit it (no failure needed).
      // The group (named "default") keeps its join requests under its name.
      wait_keys(*store, {std::string(launch::keys::kDefaultGroup) + "/join/pending"}, Deadline::after(10s), nullptr);
      auto next = pg->reconfigure(Deadline::after(20s));
      EXPECT_EQ(next->epoch(), 1u);
      EXPECT_EQ(next->rank(), who);
      pg = next;
    } else {
      pg = join_process_group(opts(store, -1, -1), Deadline::after(20s));
      EXPECT_EQ(pg->rank(), 2);
      EXPECT_EQ(pg->epoch(), 1u);
    }
    EXPECT_EQ(pg->size(), 3);
    broadcast_state(*pg, {TensorView::flat(state.data(), DType::kF64, 4)}, 0);
    state_seen[who] = state[0] + state[1] + state[2] + state[3];
    int64_t v = who + 1;
    pg->allreduce(TensorView::flat(&v, DType::kI64, 1))->wait();
    results[who] = v;
  });
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(results[i], 6) << i;
    EXPECT_EQ(state_seen[i], 7.5) << "rank 0's state reached " << i;
  }
}

TEST(Grow, JoinerTimesOutWhenNobodyAdmitsIt) {
  auto store = make_memory_store();
  EXPECT_THROW(join_process_group(opts(store, -1, -1), Deadline::after(200ms)), TimeoutError);
}

TEST(Grow, OnlyTheSinewBackendGrows) {
  auto o = opts(make_memory_store(), -1, -1);
  o.backend = "gloo";
  EXPECT_THROW(join_process_group(o, Deadline::after(200ms)), InvalidArgument);
}

}  // namespace
}  // namespace sinew::dist
