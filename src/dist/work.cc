#include "sinew/dist/work.h"

#include <fmt/format.h>

#include "sinew/core/log.h"

namespace sinew::dist {

Work::Work(std::string op_name, uint64_t seq, Deadline default_deadline)
    : op_name_(std::move(op_name)), seq_(seq), default_deadline_(default_deadline) {}

void Work::wait() { wait(default_deadline_); }

void Work::mark_started() {
  if (!hooks_ || started_.exchange(true, std::memory_order_relaxed)) return;
  for (const auto& h : hooks_->hooks) {
    try {
      h->on_start(*this);
    } catch (const std::exception& e) {
      SINEW_WARN(kColl, "a process-group hook failed on start of {} (seq {}): {}", op_name_, seq_, e.what());
    }
  }
}

void Work::wait(Deadline deadline) {
  // Fast path: completed successfully (status_ is immutable once completed_).
  if (completed_.load(std::memory_order_acquire) && status_.is_ok()) return;
  wait_status(deadline).throw_if_error();
}

Status Work::wait_status(Deadline deadline) {
  if (completed_.load(std::memory_order_acquire)) return status_;
  std::unique_lock<std::mutex> lk(mu_);
  auto done = [&] { return completed_.load(std::memory_order_acquire); };
  ++waiters_;
  bool ok = true;
  if (deadline.is_never()) cv_.wait(lk, done);
  else ok = cv_.wait_until(lk, deadline.time_point(), done);
  --waiters_;
  if (ok) return status_;
  lk.unlock();
  Status st(ErrorCode::kTimeout, fmt::format("wait() on {} (seq {}) passed its deadline; the operation is still "
                                             "running (abort() the group or wait longer)",
                                             op_name_, seq_));
  if (hooks_) {
    const GroupInfo& g = hooks_->group;
    st = Status(st.code(), fmt::format("{} [group '{}' (epoch {}), rank {} of {}]", st.message(), g.name, g.epoch,
                                       g.rank, g.size));
    for (const auto& h : hooks_->hooks) {
      try {
        h->on_wait_timeout(*this, st);
      } catch (const std::exception& e) {
        SINEW_WARN(kColl, "a process-group hook failed on a wait timeout of {} (seq {}): {}", op_name_, seq_,
                   e.what());
      }
    }
  }
  return st;
}

bool Work::is_success() const { return completed_.load(std::memory_order_acquire) && status_.is_ok(); }

Status Work::status() const {
  if (completed_.load(std::memory_order_acquire)) return status_;
  return Status::ok();
}

void Work::on_complete(Callback cb) {
  std::unique_lock<std::mutex> lk(mu_);
  if (completed_.load()) {
    Status s = status_;
    lk.unlock();
    cb(s);
    return;
  }
  callbacks_.push_back(std::move(cb));
}

void Work::add_finalizer(std::function<void()> f) {
  std::lock_guard<std::mutex> g(mu_);
  finalizers_.push_back(std::move(f));
}

void Work::complete(Status status) {
  std::unique_lock<std::mutex> lk(mu_);
  if (completed_.load() || completing_) return;
  completing_ = true;
  if (!finalizers_.empty()) {
    auto finalizers = std::move(finalizers_);
    lk.unlock();
    if (status.is_ok()) {
      try {
        for (auto& f : finalizers) f();
      } catch (...) {
        status = Status::from_current_exception();
      }
    }
    lk.lock();
  }
  if (hooks_) {
    if (!started_.load(std::memory_order_relaxed)) mark_started();
    if (status.code() == ErrorCode::kTimeout || status.code() == ErrorCode::kPeerLost) {
      const GroupInfo& g = hooks_->group;
      status = Status(status.code(),
                      fmt::format("{} [{} #{} on group '{}' (epoch {}), rank {} of {}]", status.message(), op_name_,
                                  seq_, g.name, g.epoch, g.rank, g.size),
                      status.ranks());
    }
    for (const auto& h : hooks_->hooks) {
      try {
        if (status.is_ok()) h->on_complete(*this);
        else h->on_error(*this, status);
      } catch (const std::exception& e) {
        SINEW_WARN(kColl, "a process-group hook failed on {} (seq {}): {}", op_name_, seq_, e.what());
      }
    }
  }
  status_ = std::move(status);
  completed_.store(true, std::memory_order_release);
  auto callbacks = std::move(callbacks_);
  const bool wake = waiters_ > 0;
  lk.unlock();
  if (wake) cv_.notify_all();
  for (auto& cb : callbacks) cb(status_);
}

std::shared_ptr<Work> Work::completed(std::string op_name, uint64_t seq, Status status) {
  auto w = std::make_shared<Work>(std::move(op_name), seq, Deadline::never());
  w->complete(std::move(status));
  return w;
}

void wait_all(const std::vector<WorkPtr>& works, Deadline deadline) {
  for (const auto& w : works) w->wait(deadline);
}

}  // namespace sinew::dist
