// Work and the per-group op queue: completion, callbacks, deadlines, abort.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "dist/op_queue.h"
#include "sinew/dist/work.h"

namespace sinew::dist {
namespace {

using namespace std::chrono_literals;

TEST(Work, CompletesOnceRunsFinalizersBeforeWaitersAndCallbacks) {
  auto w = std::make_shared<Work>("allreduce", 3, Deadline::never());
  std::vector<std::string> order;
  w->add_finalizer([&] { order.push_back("finalizer"); });
  w->on_complete([&](const Status& s) { order.push_back(s.is_ok() ? "cb-ok" : "cb-err"); });
  EXPECT_FALSE(w->is_completed());
  w->complete(Status::ok());
  w->complete(Status(ErrorCode::kAborted, "late"));  // ignored
  EXPECT_TRUE(w->is_success());
  EXPECT_EQ(order, (std::vector<std::string>{"finalizer", "cb-ok"}));
  bool late_cb = false;
  w->on_complete([&](const Status&) { late_cb = true; });
  EXPECT_TRUE(late_cb) << "a callback added after completion runs at once";
}

TEST(Work, WaitPastDeadlineIsTimeoutNamingTheOp) {
  auto w = std::make_shared<Work>("broadcast", 9, Deadline::never());
  try {
    w->wait(Deadline::after(20ms));
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("broadcast (seq 9)"));
  }
  EXPECT_FALSE(w->is_completed());
}

TEST(Work, ErrorsSurfaceAsTheirTypes) {
  auto w = std::make_shared<Work>("recv", 1, Deadline::never());
  w->complete(Status(ErrorCode::kPeerLost, "rank 2 died", {2}));
  EXPECT_FALSE(w->is_success());
  try {
    w->wait();
    FAIL();
  } catch (const PeerLostError& e) {
    EXPECT_EQ(e.ranks(), std::vector<int>{2});
  }
}

TEST(OpQueue, RunsInOrderAndAbortUnblocksEveryWaiter) {
  OpQueue q("test");
  std::mutex ran_mu;  // the aborted op is still running when the test reads `ran`
  std::vector<int> ran;
  std::atomic<bool> release{false};
  std::vector<WorkPtr> works;
  for (int i = 0; i < 3; ++i) {
    auto w = std::make_shared<Work>("op", i, Deadline::never());
    q.post(w, [&, i] {
      {
        std::lock_guard<std::mutex> g(ran_mu);
        ran.push_back(i);
      }
      if (i == 1)
        while (!release.load()) std::this_thread::sleep_for(1ms);  // a stuck op
    });
    works.push_back(w);
  }
  works[0]->wait(Deadline::after(5s));
  std::thread aborter([&] {
    std::this_thread::sleep_for(20ms);
    q.abort(Status(ErrorCode::kAborted, "test abort"));
  });
  EXPECT_THROW(works[1]->wait(Deadline::after(5s)), AbortedError);
  EXPECT_THROW(works[2]->wait(Deadline::after(5s)), AbortedError);
  aborter.join();
  release.store(true);
  auto later = std::make_shared<Work>("op", 4, Deadline::never());
  q.post(later, [] {});
  EXPECT_THROW(later->wait(Deadline::after(5s)), AbortedError) << "ops after abort fail at once";
  std::lock_guard<std::mutex> g(ran_mu);
  EXPECT_EQ(ran, (std::vector<int>{0, 1}));
}

TEST(OpQueue, InitFailureFailsQueuedOps) {
  OpQueue q("test");
  q.post_init([] { throw IoError("cannot reach the store"); });
  auto w = std::make_shared<Work>("op", 1, Deadline::never());
  q.post(w, [] {});
  EXPECT_THROW(w->wait(Deadline::after(5s)), IoError);
  EXPECT_EQ(q.init_status().code(), ErrorCode::kIoError);
  EXPECT_THROW(q.wait_init(Deadline::after(1s)), IoError);
}

TEST(OpQueue, InlineRunsOnlyWhenIdle) {
  OpQueue q("test");
  auto w = std::make_shared<Work>("op", 1, Deadline::never());
  std::thread::id ran_on;
  EXPECT_TRUE(q.try_run_inline(w, [&] { ran_on = std::this_thread::get_id(); }));
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_TRUE(w->is_success());
  std::atomic<bool> release{false};
  auto busy = std::make_shared<Work>("op", 2, Deadline::never());
  q.post(busy, [&] {
    while (!release.load()) std::this_thread::sleep_for(1ms);
  });
  while (q.idle()) std::this_thread::sleep_for(1ms);
  auto w2 = std::make_shared<Work>("op", 3, Deadline::never());
  EXPECT_FALSE(q.try_run_inline(w2, [] {}));
  release.store(true);
  busy->wait(Deadline::after(5s));
}

}  // namespace
}  // namespace sinew::dist
