// Deadlines and abort on the native backend, ranks as threads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "rank_threads.h"
#include "sinew/core/error.h"

namespace sinew::dist {
namespace {

using namespace std::chrono_literals;

ProcessGroupPtr make(StorePtr store, int rank, int size, Millis timeout) {
  GroupOptions o;
  o.store = std::move(store);
  o.rank = rank;
  o.size = size;
  o.timeout = timeout;
  return create_process_group(o);
}

TEST(Deadline, CollectiveWithAMissingPeerTimesOutNamingIt) {
  auto store = make_memory_store();
  ProcessGroupPtr pg1;
  std::thread t([&] { pg1 = make(store, 1, 2, 400ms); pg1->wait_ready(Deadline::after(10s)); });
  auto pg0 = make(store, 0, 2, 400ms);
  pg0->wait_ready(Deadline::after(10s));
  t.join();
  float x = 1;
  auto start = Clock::now();
  try {
    pg0->allreduce(TensorView::flat(&x, DType::kF32, 1))->wait();  // rank 1 never joins
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("rank(s) [1]"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("allreduce"));
  }
  EXPECT_LT(Clock::now() - start, 5s);
  // The group is unusable after a timeout: later ops fail fast, no hang.
  EXPECT_THROW(pg0->allreduce(TensorView::flat(&x, DType::kF32, 1))->wait(), TimeoutError);
}

TEST(Deadline, WorkWaitDeadlineLeavesTheOpRunning) {
  auto store = make_memory_store();
  ProcessGroupPtr pg1;
  std::thread t([&] { pg1 = make(store, 1, 2, 10s); pg1->wait_ready(Deadline::after(10s)); });
  auto pg0 = make(store, 0, 2, 10s);
  pg0->wait_ready(Deadline::after(10s));
  t.join();
  std::vector<float> big(1 << 20, 1.0f);  // over the inline size: runs on the group's thread
  auto w = pg0->allreduce(TensorView::flat(big.data(), DType::kF32, static_cast<int64_t>(big.size())));
  EXPECT_THROW(w->wait(Deadline::after(50ms)), TimeoutError);
  EXPECT_FALSE(w->is_completed());
  pg1->allreduce(TensorView::flat(std::vector<float>(1 << 20, 2.0f).data(), DType::kF32, 1 << 20))->wait();
  w->wait(Deadline::after(10s));
  EXPECT_EQ(big[0], 3.0f);
}

TEST(Abort, FromAnotherThreadUnblocksEveryWaiterPromptly) {
  auto store = make_memory_store();
  ProcessGroupPtr pg1;
  std::thread t([&] { pg1 = make(store, 1, 2, 60s); pg1->wait_ready(Deadline::after(10s)); });
  auto pg0 = make(store, 0, 2, 60s);
  pg0->wait_ready(Deadline::after(10s));
  t.join();
  std::vector<float> a(1 << 20), b(16);
  float c = 0;
  auto w1 = pg0->allreduce(TensorView::flat(a.data(), DType::kF32, 1 << 20));  // queued, peer absent
  auto w2 = pg0->recv(TensorView::flat(b.data(), DType::kF32, 16), 1);
  auto w3 = pg0->broadcast(TensorView::flat(&c, DType::kF32, 1), 1);
  std::this_thread::sleep_for(50ms);
  auto start = Clock::now();
  std::thread aborter([&] { pg0->abort("test"); });
  for (auto& w : {w1, w2, w3}) EXPECT_THROW(w->wait(Deadline::after(5s)), AbortedError);
  EXPECT_LT(Clock::now() - start, 2s);  // a hang guard; the 100 ms figure is measured in the bench
  aborter.join();
  EXPECT_THROW(pg0->barrier()->wait(Deadline::after(5s)), AbortedError);
  pg1->abort("done");
}

TEST(Abort, DuringInitFailsQueuedOps) {
  auto store = make_memory_store();
  auto pg0 = make(store, 0, 2, 60s);  // rank 1 never comes
  float x = 0;
  auto w = pg0->allreduce(TensorView::flat(&x, DType::kF32, 1));
  EXPECT_TRUE(pg0->init_status().is_ok()) << "still connecting";
  pg0->abort("giving up");
  EXPECT_THROW(w->wait(Deadline::after(5s)), AbortedError);
  EXPECT_EQ(pg0->init_status().code(), ErrorCode::kAborted);
}

// Creating a group is collective: a member that destroys its group before
// the group's queued init ran must still take part in the rendezvous, or
// the others wait for it until their timeout (a subgroup made and dropped
// unused by one member).
TEST(Lifecycle, AGroupDestroyedBeforeItsInitRanStillJoinsTheRendezvous) {
  for (int i = 0; i < 10; ++i) {
    SCOPED_TRACE(i);
    auto store = make_memory_store();
    std::thread t([&] { make(store, 0, 2, 3s).reset(); });  // destroyed at once
    auto pg1 = make(store, 1, 2, 3s);
    EXPECT_NO_THROW(pg1->wait_ready(Deadline::after(10s)));
    t.join();
  }
}

TEST(Validation, BadArgumentsAreInvalidArgumentNamingThem) {
  sinew::testing::run_group(2, "sinew", [](ProcessGroup& pg) {
    float x[4] = {};
    try {
      pg.broadcast(TensorView::flat(x, DType::kF32, 4), 5);
      FAIL();
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("'root': got 5"));
    }
    try {
      pg.allreduce(TensorView::flat(x, DType::kF32, 4), ReduceKind::kBxor);
      FAIL();
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("float32"));
    }
    float out[3];
    EXPECT_THROW(pg.allgather_into_tensor(TensorView::flat(out, DType::kF32, 3), TensorView::flat(x, DType::kF32, 2)),
                 InvalidArgument);
    EXPECT_THROW(pg.send(TensorView::flat(x, DType::kF32, 4), pg.rank()), InvalidArgument);
    EXPECT_THROW(pg.all_to_all_v(TensorView::flat(x, DType::kF32, 4), TensorView::flat(x, DType::kF32, 4), {1, 1},
                                 {2, 2}),
                 InvalidArgument);
  });
}

}  // namespace
}  // namespace sinew::dist
