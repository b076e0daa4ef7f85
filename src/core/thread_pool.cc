#include "sinew/core/thread_pool.h"

#include <immintrin.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "sinew/core/env.h"
#include "sinew/core/error.h"

namespace sinew {
namespace {

inline const EnvParam<int64_t> kNumThreads{"SINEW_NUM_THREADS", 0,
                                           "threads for compute kernels (0: OMP_NUM_THREADS, else the CPUs "
                                           "this process may run on)"};
inline const EnvParam<int64_t> kSpinRounds{"SINEW_POOL_SPIN", 20000,
                                           "pause rounds an idle kernel worker spins before sleeping"};
// A string, read as its leading integer as OpenMP does ("4,2" nests: 4 here).
inline const EnvParam<std::string> kOmpNumThreads{"OMP_NUM_THREADS", "",
                                                  "compute threads when SINEW_NUM_THREADS is unset (torchrun "
                                                  "sets 1 per worker)"};

thread_local bool t_inside_pool = false;

}  // namespace

struct ThreadPool::Impl {
  int max_threads;
  std::vector<std::thread> workers;  // worker i + 1

  std::mutex mu;
  std::condition_variable cv;
  // (job count << 16) | threads of that job, read in one load so a worker
  // joins exactly the job whose thread count it saw.
  std::atomic<uint64_t> generation{0};
  bool stop = false;

  std::mutex call_mu;  // one parallel_for at a time
  const std::function<void(int64_t, int)>* fn = nullptr;
  int64_t tasks = 0;
  std::atomic<int64_t> next{0};
  // Who works on the current job: (job << 17) | kClosed | workers joined.
  // A worker joins only while the job is open; the caller closes it once
  // it has run out of tasks and then waits only for the workers that
  // joined. A worker that was descheduled before joining (common on a
  // loaded machine) is then not waited for: it finds the job closed, or a
  // newer one, when it runs again.
  static constexpr uint64_t kClosed = uint64_t{1} << 16;
  std::atomic<uint64_t> join_state{0};
  std::atomic<int> left{0};  // joined workers that are done with the job
  std::mutex error_mu;
  std::exception_ptr error;

  void run_tasks(int worker) {
    t_inside_pool = true;
    for (;;) {
      int64_t t = next.fetch_add(1, std::memory_order_relaxed);
      if (t >= tasks) break;
      try {
        (*fn)(t, worker);
      } catch (...) {
        std::lock_guard<std::mutex> g(error_mu);
        if (!error) error = std::current_exception();
        next.store(tasks, std::memory_order_relaxed);  // skip what is left
      }
    }
    t_inside_pool = false;
  }

  bool join(uint64_t job) {
    uint64_t st = join_state.load(std::memory_order_acquire);
    while ((st >> 17) == job && !(st & kClosed))
      if (join_state.compare_exchange_weak(st, st + 1, std::memory_order_acq_rel)) return true;
    return false;
  }

  void worker_loop(int index, uint64_t seen) {
    const int64_t spin = kSpinRounds.get();
    for (;;) {
      uint64_t g = generation.load(std::memory_order_acquire);
      for (int64_t i = 0; g == seen && i < spin; ++i) {
        _mm_pause();
        g = generation.load(std::memory_order_acquire);
      }
      if (g == seen) {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return stop || generation.load(std::memory_order_acquire) != seen; });
        if (stop) return;
        g = generation.load(std::memory_order_acquire);
      }
      seen = g;
      if (index < static_cast<int>(g & 0xffff) && join(g >> 16)) {
        run_tasks(index);
        left.fetch_add(1, std::memory_order_acq_rel);
      }
    }
  }
};

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(std::max(default_threads(), static_cast<int>(std::thread::hardware_concurrency())));
  return pool;
}

ThreadPool::ThreadPool(int max_threads) : impl_(nullptr) {
  if (max_threads < 1 || max_threads > 0xffff)
    throw InvalidArgument::make("max_threads", std::to_string(max_threads), "1 to 65535");
  impl_ = new Impl;
  impl_->max_threads = max_threads;
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  for (auto& t : impl_->workers) t.join();
  delete impl_;
}

int ThreadPool::max_threads() const { return impl_->max_threads; }

int ThreadPool::default_threads() {
  if (int64_t n = kNumThreads.get(); n > 0) return static_cast<int>(n);
  if (auto omp = kOmpNumThreads.read()) {
    int n = std::atoi(omp->c_str());
    if (n > 0) return n;
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

void ThreadPool::parallel_for(int64_t tasks, int threads, const std::function<void(int64_t, int)>& fn) {
  if (tasks <= 0) return;
  if (threads <= 0) threads = default_threads();
  threads = static_cast<int>(std::min<int64_t>({threads, impl_->max_threads, tasks}));
  if (threads == 1 || t_inside_pool) {
    for (int64_t t = 0; t < tasks; ++t) fn(t, 0);
    return;
  }
  Impl& s = *impl_;
  std::lock_guard<std::mutex> call(s.call_mu);
  while (static_cast<int>(s.workers.size()) < threads - 1) {
    const int index = static_cast<int>(s.workers.size()) + 1;
    const uint64_t seen = s.generation.load(std::memory_order_acquire);
    s.workers.emplace_back([&s, index, seen] { s.worker_loop(index, seen); });
  }
  s.fn = &fn;
  s.tasks = tasks;
  s.error = nullptr;
  s.next.store(0, std::memory_order_relaxed);
  s.left.store(0, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> g(s.mu);
    const uint64_t count = (s.generation.load(std::memory_order_relaxed) >> 16) + 1;
    s.join_state.store(count << 17, std::memory_order_release);
    s.generation.store(count << 16 | static_cast<uint64_t>(threads), std::memory_order_release);
  }
  s.cv.notify_all();
  s.run_tasks(0);
  const int joined = static_cast<int>(s.join_state.fetch_or(Impl::kClosed, std::memory_order_acq_rel) & 0xffff);
  // A joined worker may itself be descheduled mid-task: spin briefly, then
  // give the core away while waiting for it.
  for (int i = 0; s.left.load(std::memory_order_acquire) != joined; ++i) {
    if (i < 4096) _mm_pause();
    else sched_yield();
  }
  if (s.error) std::rethrow_exception(s.error);
}

}  // namespace sinew
