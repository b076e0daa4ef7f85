// A worker thread that runs a group's operations in issue order, so every
// backend gets asynchronous Work the same way. Internal to dist.
//
// Errors are values here: a task's exception is caught and recorded on its
// Work; nothing throws across the worker thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "sinew/dist/work.h"

namespace sinew::dist {

class OpQueue {
 public:
  using Task = std::function<void()>;  // throws on failure

  explicit OpQueue(std::string name);
  ~OpQueue();  // shutdown()
  // Aborts what is pending and joins the worker (the running task first ends);
  // idempotent. Owners call it before tearing down what tasks use.
  void shutdown();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // Queues `task`; the worker runs it and completes `work` with its outcome.
  // After abort(), the work completes at once with the abort status.
  void post(WorkPtr work, Task task);
  // Runs `task` on the calling thread when nothing is queued or running
  // (latency-bound small ops skip the thread hand-off); returns false, doing
  // nothing, otherwise. `work` is completed either way when it returns true.
  // An inline op is not tracked for abort(): it runs on the caller's own
  // thread, which sees the group's abort flag in its transport waits.
  template <class F>
  bool try_run_inline(const WorkPtr& work, F&& task) {
    if (!begin_inline()) return false;
    work->mark_started();
    Status status;
    try {
      task();
    } catch (...) {
      status = Status::from_current_exception();
    }
    end_inline(work, std::move(status));
    return true;
  }
  // Runs `f` on the calling thread while no op runs: the running one (op
  // deadlines bound it) ends first; ops still queued run after it.
  template <class F>
  auto run_exclusive(F&& f) {
    std::lock_guard<std::mutex> g(exec_mu_);
    return f();
  }
  // Queues the group's init step (rendezvous, connections): ops posted after
  // it wait behind it, and if it fails they all fail with its error.
  void post_init(Task task);

  // Completes every queued and running work with `status` (Aborted) now; the
  // running task keeps going until the backend notices and returns.
  void abort(const Status& status);
  bool idle() const;
  // The init step's outcome (Ok while it runs).
  Status init_status() const;
  bool init_done() const;
  void wait_init(Deadline deadline) const;

 private:
  bool begin_inline();
  void end_inline(const WorkPtr& work, Status status);
  void loop();
  struct Item {
    WorkPtr work;
    Task task;
    bool is_init = false;
  };
  std::string name_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::deque<Item> items_;
  WorkPtr running_;            // the worker's current op
  std::mutex exec_mu_;         // held by whoever runs an op: worker or inline caller
  std::atomic<int> pending_{0};  // posted ops not finished yet
  std::atomic<bool> inline_ok_{true};  // init succeeded (or none) and not aborted
  bool stop_ = false;
  Status abort_status_;
  Status init_status_;
  bool init_done_ = true;
  std::thread thread_;
};

}  // namespace sinew::dist
