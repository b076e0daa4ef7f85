// A fixed set of worker threads for compute kernels (GEMM, linalg batches).
// parallel_for(n, fn) runs fn(task, worker) for task in [0, n) on up to
// `threads` workers (the caller is worker 0) and returns when all are done.
// Workers spin briefly before sleeping so back-to-back kernel calls do not
// pay a futex wake-up each; the first call of a size starts its threads.
// Tasks go to whoever is running: the caller waits only for the workers
// that took part, never for one that was descheduled before it could (on a
// shared machine that used to stall every fork-join).
#pragma once

#include <cstdint>
#include <functional>

namespace sinew {

class ThreadPool {
 public:
  // The process-wide pool used by kernels.
  static ThreadPool& global();

  explicit ThreadPool(int max_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Runs fn(task, worker) for every task in [0, tasks) on min(threads, tasks)
  // workers; worker is in [0, threads). threads <= 0 means default_threads().
  // An exception thrown by fn is rethrown here (the first one) after every
  // task has finished or been skipped. Not reentrant: a nested call from a
  // task runs serially on the calling worker.
  void parallel_for(int64_t tasks, int threads, const std::function<void(int64_t task, int worker)>& fn);

  int max_threads() const;

  // SINEW_NUM_THREADS, else OMP_NUM_THREADS, else the CPUs this process may run on.
  static int default_threads();

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace sinew
