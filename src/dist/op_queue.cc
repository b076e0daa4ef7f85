#include "op_queue.h"

#include <pthread.h>

#include "sinew/core/log.h"

namespace sinew::dist {

OpQueue::OpQueue(std::string name) : name_(std::move(name)) {
  thread_ = std::thread([this] { loop(); });
}

OpQueue::~OpQueue() { shutdown(); }

void OpQueue::shutdown() {
  abort(Status(ErrorCode::kAborted, "process group destroyed with operations pending"));
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void OpQueue::post(WorkPtr work, Task task) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (abort_status_.is_ok() && (!init_done_ || init_status_.is_ok())) {
      pending_.fetch_add(1);
      items_.push_back({std::move(work), std::move(task)});
      cv_.notify_all();
      return;
    }
  }
  Status s = abort_status_.is_ok() ? init_status_ : abort_status_;
  work->complete(s);
}

bool OpQueue::begin_inline() {
  if (pending_.load(std::memory_order_acquire) != 0 || !inline_ok_.load(std::memory_order_acquire)) return false;
  if (!exec_mu_.try_lock()) return false;
  // Re-check under the lock: an op posted meanwhile must run first.
  if (pending_.load(std::memory_order_acquire) != 0) {
    exec_mu_.unlock();
    return false;
  }
  return true;
}

void OpQueue::end_inline(const WorkPtr& work, Status status) {
  exec_mu_.unlock();
  work->complete(std::move(status));
}

void OpQueue::post_init(Task task) {
  std::lock_guard<std::mutex> g(mu_);
  init_done_ = false;
  inline_ok_.store(false);
  pending_.fetch_add(1);
  auto w = std::make_shared<Work>("init", 0, Deadline::never());
  items_.push_back({std::move(w), std::move(task), true});
  cv_.notify_all();
}

void OpQueue::abort(const Status& status) {
  std::deque<Item> items;
  WorkPtr running;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (abort_status_.is_ok()) abort_status_ = status;
    inline_ok_.store(false);
    pending_.fetch_sub(static_cast<int>(items_.size()));
    items.swap(items_);
    running = running_;
    if (!init_done_) {
      init_done_ = true;
      init_status_ = status;
    }
  }
  cv_.notify_all();
  if (running) running->complete(status);
  for (auto& it : items) it.work->complete(status);
}

bool OpQueue::idle() const {
  std::lock_guard<std::mutex> g(mu_);
  return items_.empty() && !running_;
}

Status OpQueue::init_status() const {
  std::lock_guard<std::mutex> g(mu_);
  return init_status_;
}

bool OpQueue::init_done() const {
  std::lock_guard<std::mutex> g(mu_);
  return init_done_;
}

void OpQueue::wait_init(Deadline deadline) const {
  std::unique_lock<std::mutex> lk(mu_);
  auto done = [&] { return init_done_; };
  if (deadline.is_never()) cv_.wait(lk, done);
  else if (!cv_.wait_until(lk, deadline.time_point(), done))
    throw TimeoutError("process group init did not finish before the deadline");
  init_status_.throw_if_error();
}

void OpQueue::loop() {
  std::string tname = name_.substr(0, 15);
  pthread_setname_np(pthread_self(), tname.c_str());
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !items_.empty(); });
      if (items_.empty()) return;
      item = std::move(items_.front());
      items_.pop_front();
      running_ = item.work;
    }
    Status status;
    {
      std::lock_guard<std::mutex> exec(exec_mu_);  // after any inline op in flight
      if (item.work) item.work->mark_started();
      try {
        item.task();
      } catch (...) {
        status = Status::from_current_exception();
      }
    }
    std::deque<Item> failed;
    {
      std::lock_guard<std::mutex> g(mu_);
      running_.reset();
      pending_.fetch_sub(1);
      if (item.is_init) {
        init_done_ = true;
        if (init_status_.is_ok()) init_status_ = status;
        if (!status.is_ok()) {
          pending_.fetch_sub(static_cast<int>(items_.size()));
          failed.swap(items_);
        } else if (abort_status_.is_ok()) {
          inline_ok_.store(true);
        }
      }
    }
    cv_.notify_all();
    if (item.is_init && !status.is_ok())
      SINEW_WARN(kInit, "{}: init failed: {}", name_, status.to_string());
    item.work->complete(status);
    for (auto& f : failed) f.work->complete(status);
  }
}

}  // namespace sinew::dist
