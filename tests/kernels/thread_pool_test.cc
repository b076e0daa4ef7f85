#include "sinew/core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "sinew/core/error.h"

namespace sinew {
namespace {

TEST(ThreadPool, EveryTaskRunsOnceOnAValidWorker) {
  ThreadPool pool(4);
  for (int threads : {1, 2, 3, 4, 8}) {
    for (int64_t tasks : {1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(tasks);
      std::atomic<int> bad_worker{0};
      pool.parallel_for(tasks, threads, [&](int64_t t, int w) {
        hits[t].fetch_add(1);
        if (w < 0 || w >= std::min(threads, 4)) bad_worker.fetch_add(1);
      });
      for (int64_t t = 0; t < tasks; ++t) ASSERT_EQ(hits[t].load(), 1) << "task " << t << " threads " << threads;
      EXPECT_EQ(bad_worker.load(), 0);
    }
  }
}

TEST(ThreadPool, ManyBackToBackCallsWithChangingThreadCounts) {
  ThreadPool pool(3);
  int64_t total = 0;
  for (int i = 0; i < 5000; ++i) {
    std::atomic<int64_t> sum{0};
    pool.parallel_for(5, 1 + i % 3, [&](int64_t t, int) { sum.fetch_add(t + 1); });
    total += sum.load();
  }
  EXPECT_EQ(total, 5000 * 15);
}

TEST(ThreadPool, FirstExceptionIsRethrownAfterTheOthersFinish) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100, 2,
                                 [&](int64_t t, int) {
                                   if (t == 10) throw std::runtime_error("task 10 failed");
                                 }),
               std::runtime_error);
  std::atomic<int> n{0};
  pool.parallel_for(10, 2, [&](int64_t, int) { n.fetch_add(1); });  // still usable
  EXPECT_EQ(n.load(), 10);
}

TEST(ThreadPool, NestedCallRunsSerially) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.parallel_for(4, 2, [&](int64_t, int) { pool.parallel_for(3, 2, [&](int64_t, int) { inner.fetch_add(1); }); });
  EXPECT_EQ(inner.load(), 12);
}

TEST(ThreadPool, RejectsABadSize) {
  try {
    ThreadPool pool(0);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("max_threads"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sinew
