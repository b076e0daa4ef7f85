// Deadlines and abort on the native backend, ranks as threads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "rank_threads.h"
#include "sinew/core/error.h"
#include "sinew/dist/hooks.h"
#include "sinew/dist/work.h"

namespace sinew::dist {
namespace {

using namespace std::chrono_literals;

ProcessGroupPtr make(StorePtr store, int rank, int size, Millis timeout) {
  return create_process_group(sinew::testing::group_options(std::move(store), rank, size, timeout));
}

// Two ranks of one group, both ready.
std::pair<ProcessGroupPtr, ProcessGroupPtr> ready_pair(Millis timeout) {
  auto store = make_memory_store();
  ProcessGroupPtr pg1;
  std::thread t([&] {
    pg1 = make(store, 1, 2, timeout);
    pg1->wait_ready(Deadline::after(10s));
  });
  auto pg0 = make(store, 0, 2, timeout);
  pg0->wait_ready(Deadline::after(10s));
  t.join();
  return {pg0, pg1};
}

// The works a backend has started executing (ProcessGroupHooks::on_start):
// proof that an op is inside the backend where a sleep could only hope so.
class StartedWorks {
 public:
  // Registers its hooks for the groups created from now on.
  static StartedWorks& get() {
    static StartedWorks* s = new StartedWorks;  // outlives every group's hooks
    return *s;
  }
  bool wait_started(const Work& w, Deadline deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, deadline.time_point(), [&] { return started_.count(&w) > 0; });
  }

 private:
  struct Hooks : ProcessGroupHooks {
    explicit Hooks(StartedWorks& s) : s(s) {}
    void on_start(Work& w) override {
      std::lock_guard<std::mutex> g(s.mu_);
      s.started_.insert(&w);
      s.cv_.notify_all();
    }
    StartedWorks& s;
  };
  StartedWorks() {
    register_hooks_factory([this](const GroupInfo&) { return std::make_shared<Hooks>(*this); });
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<const Work*> started_;
};

TEST(Deadline, CollectiveWithAMissingPeerTimesOutNamingIt) {
  auto [pg0, pg1] = ready_pair(400ms);
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
  auto [pg0, pg1] = ready_pair(10s);
  std::vector<float> big(1 << 20, 1.0f);  // over the inline size: runs on the group's thread
  auto w = pg0->allreduce(TensorView::flat(big.data(), DType::kF32, static_cast<int64_t>(big.size())));
  EXPECT_THROW(w->wait(Deadline::after(50ms)), TimeoutError);
  EXPECT_FALSE(w->is_completed());
  pg1->allreduce(TensorView::flat(std::vector<float>(1 << 20, 2.0f).data(), DType::kF32, 1 << 20))->wait();
  w->wait(Deadline::after(10s));
  EXPECT_EQ(big[0], 3.0f);
}

TEST(Abort, FromAnotherThreadUnblocksEveryWaiterPromptly) {
  auto& started = StartedWorks::get();
  auto [pg0, pg1] = ready_pair(60s);
  std::vector<float> a(1 << 20), b(16);
  float c = 0;
  auto w1 = pg0->allreduce(TensorView::flat(a.data(), DType::kF32, 1 << 20));  // queued, peer absent
  auto w2 = pg0->recv(TensorView::flat(b.data(), DType::kF32, 16), 1);
  auto w3 = pg0->broadcast(TensorView::flat(&c, DType::kF32, 1), 1);
  // The allreduce is inside the backend, waiting for its peer; the others queue behind it.
  ASSERT_TRUE(started.wait_started(*w1, Deadline::after(10s)));
  for (auto& w : {w1, w2, w3}) ASSERT_FALSE(w->is_completed());
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
