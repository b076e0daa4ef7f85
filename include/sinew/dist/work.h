// Work: the handle every asynchronous operation returns.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "sinew/core/deadline.h"
#include "sinew/core/error.h"
#include "sinew/dist/hooks.h"

namespace sinew::dist {

class Work {
 public:
  using Callback = std::function<void(const Status&)>;

  // `default_deadline` is what wait() uses when given none (the group timeout
  // counted from when the op was issued).
  Work(std::string op_name, uint64_t seq, Deadline default_deadline);
  virtual ~Work() = default;

  // Waits for completion. Returns normally on success; throws the op's error
  // (PeerLostError, AbortedError, InvalidArgument, ...) on failure, and
  // TimeoutError naming the op if the deadline passes first.
  void wait();
  void wait(Deadline deadline);
  // Like wait but returns the status instead of throwing; a passed deadline
  // gives a Timeout status and leaves the op running.
  Status wait_status(Deadline deadline);

  bool is_completed() const { return completed_.load(std::memory_order_acquire); }
  bool is_success() const;
  // The error, or Ok while running or on success.
  Status status() const;
  // Runs `cb` once, on completion (immediately if already complete), on the
  // thread that completes the work. Callbacks must not block.
  void on_complete(Callback cb);

  const std::string& op_name() const { return op_name_; }
  // The group timeout counted from when the op was issued.
  Deadline default_deadline() const { return default_deadline_; }
  uint64_t seq() const { return seq_; }

  // --- for backends ---------------------------------------------------------
  // Runs before waiters see completion (e.g. unpack a strided output).
  void add_finalizer(std::function<void()> f);
  // Completes the work; later calls are ignored.
  void complete(Status status);
  static std::shared_ptr<Work> completed(std::string op_name, uint64_t seq, Status status = {});

  // --- for the ProcessGroup base and the op queue ---------------------------
  // The group's hooks: started and completion are reported to them.
  // The set belongs to the group, which outlives the completion of its works.
  void attach_hooks(const HookSet* hooks) { hooks_ = hooks; }
  const HookSet* hooks() const { return hooks_; }
  // The backend begins executing the op; reported once.
  void mark_started();
  // The op's name as the static string the group passed (tracers keep it).
  const char* op_literal() const { return op_literal_; }
  void set_op_literal(const char* op) { op_literal_ = op; }
  // A tracer's id for this op (the Flight Recorder's record id).
  uint64_t trace_id() const { return trace_id_; }
  void set_trace_id(uint64_t id) { trace_id_ = id; }
  // Where the tracer keeps the op's record, so start and completion find it
  // without a lookup.
  void* trace_slot() const { return trace_slot_; }
  void set_trace_slot(void* slot) { trace_slot_ = slot; }
  // For the Flight Recorder (internal to dist): the op runs on the thread
  // that completes it, and each of its waits reports the clock reads it
  // makes while it spins and as it ends, so the recorder may stamp the
  // completion from those instead of reading a clock.
  bool waits_report_clock() const { return waits_report_clock_; }
  void set_waits_report_clock() { waits_report_clock_ = true; }

 private:
  std::string op_name_;
  uint64_t seq_;
  Deadline default_deadline_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> completed_{false};
  bool completing_ = false;
  int waiters_ = 0;
  Status status_;
  std::vector<Callback> callbacks_;
  std::vector<std::function<void()>> finalizers_;
  const HookSet* hooks_ = nullptr;
  uint64_t trace_id_ = 0;
  void* trace_slot_ = nullptr;
  const char* op_literal_ = nullptr;
  bool waits_report_clock_ = false;
  std::atomic<bool> started_{false};
};

using WorkPtr = std::shared_ptr<Work>;

// Waits for every work; throws the first error.
void wait_all(const std::vector<WorkPtr>& works, Deadline deadline = Deadline::never());

}  // namespace sinew::dist
