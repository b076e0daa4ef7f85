#include "recorder.h"

#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sinew/core/error.h"
#include "sinew/core/log.h"
#include "sinew/dist/flight_recorder.h"
#include "sinew/dist/work.h"

namespace sinew::dist {
namespace fr {
namespace {

// The first of `names` that is set, and its value; logged once so users see
// which of PyTorch's spellings took effect.
std::optional<std::pair<std::string, std::string>> first_env(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (const char* v = std::getenv(n)) return std::make_pair(std::string(n), std::string(v));
  return std::nullopt;
}

int64_t parse_int(const std::string& name, const std::string& v) {
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < 0)
    throw InvalidArgument::make(name, fmt::format("'{}'", v), "a non-negative integer");
  return x;
}

bool parse_bool(const std::string& name, const std::string& v) {
  std::string l = v;
  std::transform(l.begin(), l.end(), l.begin(), ::tolower);
  if (l == "1" || l == "true" || l == "yes" || l == "on") return true;
  if (l == "0" || l == "false" || l == "no" || l == "off") return false;
  throw InvalidArgument::make(name, fmt::format("'{}'", v), "1/0, true/false, yes/no or on/off");
}

Config load_config() {
  Config c;
  auto note = [](const char* what, const std::string& name, const std::string& value) {
    SINEW_INFO(kColl, "[FR] {} {} from {}", what, value, name);
  };
  if (auto e = first_env({"SINEW_FR_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"})) {
    c.capacity = static_cast<size_t>(parse_int(e->first, e->second));
    note("buffer size", e->first, e->second);
  }
  if (auto e = first_env({"SINEW_FR_DUMP_ON_TIMEOUT", "TORCH_FR_DUMP_ON_TIMEOUT", "TORCH_NCCL_DUMP_ON_TIMEOUT"})) {
    c.dump_on_failure = parse_bool(e->first, e->second);
    note("dump on timeout", e->first, e->second);
  }
  if (auto e = first_env({"SINEW_FR_DUMP_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"})) {
    if (e->second.empty()) throw InvalidArgument::make(e->first, "''", "a path prefix for dump files");
    c.prefix = e->second;
    note("dump file prefix", e->first, e->second);
  }
  if (auto e = first_env({"SINEW_FR_CPP_STACK", "TORCH_FR_CPP_STACK", "TORCH_NCCL_TRACE_CPP_STACK"})) {
    c.cpp_stack = parse_bool(e->first, e->second);
    note("C++ stacks", e->first, e->second);
  }
  if (auto e = first_env({"SINEW_FR_PIPE_FILE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"})) {
    c.pipe_prefix = e->second;
    note("dump pipe prefix", e->first, e->second);
  }
  c.dump_signal = SIGUSR2;
  if (auto e = first_env({"SINEW_FR_DUMP_SIGNAL"})) {
    std::string v = e->second;
    if (v == "none" || v == "0") c.dump_signal = 0;
    else if (v == "SIGUSR1" || v == "USR1") c.dump_signal = SIGUSR1;
    else if (v == "SIGUSR2" || v == "USR2") c.dump_signal = SIGUSR2;
    else throw InvalidArgument::make(e->first, fmt::format("'{}'", v), "SIGUSR1, SIGUSR2 or none");
  }
  if (auto e = first_env({"SINEW_FR_DUMP_TIMEOUT_MS"})) c.dump_timeout_ms = parse_int(e->first, e->second);
  return c;
}

void record_tensors(TensorList& list, std::span<const TensorView> tensors) {
  list.count = static_cast<uint16_t>(std::min<size_t>(tensors.size(), 0xffff));
  if (tensors.empty()) return;
  list.dtype = tensors[0].dtype();
  const size_t n = std::min<size_t>(tensors.size(), TensorList::kMaxShapes);
  for (size_t i = 0; i < n; ++i) {
    const auto shape = tensors[i].shape();
    Shape& s = list.shapes[i];
    if (shape.size() <= Shape::kMaxDims) {
      s.ndim = static_cast<int8_t>(shape.size());
      for (size_t d = 0; d < shape.size(); ++d) s.dims[d] = shape[d];
    } else {
      s.ndim = -1;
      s.dims[0] = tensors[i].numel();
    }
  }
}

std::atomic<bool> g_recording{true};

}  // namespace

std::atomic<int64_t> g_clock_offset_ns{0};
std::atomic<bool> g_clock_offset_known{false};

namespace {

thread_local uint64_t t_last_enqueued = 0;  // trace id of this thread's last enqueue
thread_local int64_t t_last_enqueued_ns = 0;
thread_local uint64_t t_running = 0;  // trace id of the op this thread executes

class Hooks final : public ProcessGroupHooks {
 public:
  explicit Hooks(GroupTrace* g) : g_(g) {}

  void on_enqueue(Work& work, bool is_p2p, int peer, std::span<const TensorView> inputs,
                  std::span<const TensorView> outputs) override {
    if (!g_recording.load(std::memory_order_relaxed)) return;
    Recorder& r = Recorder::get();
    // The Work's deadline was computed from "now" a moment ago: reuse it
    // rather than reading the clock again on the op path.
    const int64_t created =
        std::chrono::duration_cast<std::chrono::nanoseconds>(work.default_deadline().time_point().time_since_epoch())
            .count() -
        g_->info.timeout_ms * 1'000'000;
    const char* op = work.op_literal() ? work.op_literal() : "unknown";
    const uint64_t id = r.begin(g_, op, false, is_p2p, work.seq(), peer, created);
    Slot& s = r.slot(id);
    record_tensors(s.in, inputs);
    record_tensors(s.out, outputs);
    if (r.config().cpp_stack) s.nframes = static_cast<uint8_t>(::backtrace(s.frames, Slot::kMaxFrames));
    r.publish(id);
    (is_p2p ? g_->last_enqueued_p2p : g_->last_enqueued_coll).store(work.seq(), std::memory_order_relaxed);
    // The trace id carries whether the op is p2p, so start and completion
    // need not read the slot's (lock-guarded) fields.
    const uint64_t trace = 2 * (id + 1) + (is_p2p ? 1 : 0);
    work.set_trace_id(trace);
    t_last_enqueued = trace;
    t_last_enqueued_ns = created;
  }

  void on_start(Work& work) override {
    const uint64_t tid = work.trace_id();
    if (tid == 0) return;
    if (Slot* s = Recorder::get().live(tid / 2 - 1)) {
      // Started on the thread that issued it, right away (the inline path):
      // the issue time is the start time.
      const int64_t now = tid == t_last_enqueued ? t_last_enqueued_ns : steady_ns();
      s->started_ns.store(now, std::memory_order_relaxed);
      s->state.store(State::kStarted, std::memory_order_release);
      t_running = tid;
      ((tid & 1) ? g_->last_started_p2p : g_->last_started_coll).store(work.seq(), std::memory_order_relaxed);
    }
  }

  void on_complete(Work& work) override { finish(work); }

  void on_error(Work& work, Status& status) override {
    Recorder& r = Recorder::get();
    Slot* s = finish(work);
    const uint64_t tid = work.trace_id();
    if (s) {
      const auto& ranks = status.ranks();
      const size_t n = std::min<size_t>(ranks.size(), Slot::kMaxAwaited);
      s->lock();
      for (size_t i = 0; i < n; ++i) s->awaited[i] = ranks[i];
      s->nawaited.store(static_cast<uint8_t>(n), std::memory_order_release);
      s->unlock();
      s->failed.store(true, std::memory_order_release);
      r.set_error(tid / 2 - 1, status.message());
    }
    const bool failure = status.code() == ErrorCode::kTimeout || status.code() == ErrorCode::kPeerLost;
    if (!failure || !r.config().dump_on_failure) return;
    const std::string reason = status.code() == ErrorCode::kTimeout ? "timeout" : "peer_lost";
    const std::string detail = fmt::format("{} #{} on group {}: {}", work.op_name(), work.seq(), g_->info.pg_id,
                                           status.message());
    request_flight_recorder_dumps(reason);
    std::string path = dump_now(reason, detail);
    if (!path.empty())
      status = Status(status.code(), fmt::format("{}; flight recorder dump: {}", status.message(), path),
                      status.ranks());
  }

  void on_wait_timeout(Work& work, Status& status) override {
    Recorder& r = Recorder::get();
    if (!r.config().dump_on_failure) return;
    request_flight_recorder_dumps("timeout");
    // Who the op is still waiting for, as its wait loop last noted it.
    std::vector<int> awaited;
    if (work.trace_id() != 0)
      if (Slot* s = r.live(work.trace_id() / 2 - 1)) {
        s->lock();
        const uint8_t n = s->nawaited.load(std::memory_order_acquire);
        awaited.assign(s->awaited, s->awaited + n);
        s->unlock();
      }
    std::string path = dump_now("timeout", fmt::format("wait on {} #{} on group {} passed its deadline",
                                                       work.op_name(), work.seq(), g_->info.pg_id));
    std::string msg = status.message();
    if (!awaited.empty()) msg += fmt::format("; still waiting for rank(s) {}", awaited);
    if (!path.empty()) msg += fmt::format("; flight recorder dump: {}", path);
    status = Status(status.code(), msg, awaited.empty() ? status.ranks() : awaited);
  }

  void on_abort(const std::string& reason) override {
    Recorder& r = Recorder::get();
    r.record_event(g_, GroupEvent::kAbort, reason);
    // An abort with nothing in flight (a group torn down after its last op)
    // has nothing to diagnose.
    const bool in_flight = g_->last_enqueued_coll.load() != g_->last_completed_coll.load() ||
                           g_->last_enqueued_p2p.load() != g_->last_completed_p2p.load();
    if (r.config().dump_on_failure && in_flight)
      dump_now("abort", fmt::format("group {}: {}", g_->info.pg_id, reason));
  }

  void on_event(GroupEvent event, const std::string& detail) override {
    Recorder& r = Recorder::get();
    r.record_event(g_, event, detail);
    // A revoke means a peer failed: dump before anything is torn down.
    if (event == GroupEvent::kRevoke && r.config().dump_on_failure) {
      request_flight_recorder_dumps("revoke");
      // Not waited for: the watchdog that revokes must not stall. The ops
      // that fail next wait for this dump before their error reaches the user.
      dump_now("revoke", fmt::format("group {}: {}", g_->info.pg_id, detail), /*wait=*/false);
    }
  }

 private:
  Slot* finish(Work& work) {
    const uint64_t tid = work.trace_id();
    if (tid == 0) return nullptr;
    if (t_running == tid) t_running = 0;
    Slot* s = Recorder::get().live(tid / 2 - 1);
    if (!s) return nullptr;
    s->completed_ns.store(steady_ns(), std::memory_order_relaxed);
    s->state.store(State::kCompleted, std::memory_order_release);
    ((tid & 1) ? g_->last_completed_p2p : g_->last_completed_coll).store(work.seq(), std::memory_order_relaxed);
    return s;
  }

  GroupTrace* g_;
};

std::mutex g_names_mu;
std::deque<std::string>& thread_names() {
  // Never destroyed: entries point into it, and a dump may run during exit.
  static auto* names = new std::deque<std::string>();
  return *names;
}

}  // namespace

void note_awaited(const std::vector<int>& ranks) {
  if (t_running == 0) return;
  Slot* s = Recorder::get().live(t_running / 2 - 1);
  if (!s) return;
  const size_t n = std::min<size_t>(ranks.size(), Slot::kMaxAwaited);
  s->lock();
  for (size_t i = 0; i < n; ++i) s->awaited[i] = ranks[i];
  s->nawaited.store(static_cast<uint8_t>(n), std::memory_order_release);
  s->unlock();
}

const ThreadTag& this_thread_tag() {
  thread_local ThreadTag tag = [] {
    char buf[32] = {};
    pthread_getname_np(pthread_self(), buf, sizeof(buf));
    std::lock_guard<std::mutex> g(g_names_mu);
    thread_names().emplace_back(buf);
    return ThreadTag{static_cast<int32_t>(::syscall(SYS_gettid)), thread_names().back().c_str()};
  }();
  return tag;
}

Recorder& Recorder::get() {
  static Recorder* r = new Recorder();  // never destroyed: hooks may run during static destruction
  return *r;
}

Recorder::Recorder() : config_(load_config()), slots_(config_.capacity) {}

GroupTrace* Recorder::register_group(const GroupInfo& info) {
  auto g = std::make_unique<GroupTrace>();
  g->info = info;
  std::lock_guard<std::mutex> l(mu_);
  groups_.push_back(std::move(g));
  return groups_.back().get();
}

uint64_t Recorder::begin(GroupTrace* g, const char* op, bool is_event, bool is_p2p, uint64_t seq, int peer,
                         int64_t created_ns) {
  const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
  Slot& s = slot(id);
  s.lock();
  // The record this one overwrites is counted as dropped for its group, so
  // an analyser can tell a wrapped ring from a skipped collective.
  const uint64_t old = s.version.load(std::memory_order_relaxed);
  if (old != 0 && s.group && !s.is_event) {
    GroupTrace* og = s.group;
    og->dropped.fetch_add(1, std::memory_order_relaxed);
    auto& last = s.is_p2p ? og->last_dropped_p2p : og->last_dropped_coll;
    const uint64_t seq_dropped = s.is_p2p ? s.p2p_seq : s.coll_seq;
    if (seq_dropped > last.load(std::memory_order_relaxed)) last.store(seq_dropped, std::memory_order_relaxed);
  }
  s.version.store(2 * id + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s.id = id;
  s.group = g;
  s.op = op;
  s.is_event = is_event;
  s.is_p2p = is_p2p;
  s.coll_seq = is_p2p || is_event ? 0 : seq;
  s.p2p_seq = is_p2p ? seq : 0;
  s.peer = peer;
  s.created_ns = created_ns;
  s.started_ns.store(0, std::memory_order_relaxed);
  s.completed_ns.store(0, std::memory_order_relaxed);
  s.state.store(State::kScheduled, std::memory_order_relaxed);
  s.failed.store(false, std::memory_order_relaxed);
  s.nawaited.store(0, std::memory_order_relaxed);
  s.nframes = 0;
  s.in.count = 0;
  s.out.count = 0;
  const ThreadTag& t = this_thread_tag();
  s.tid = t.tid;
  s.thread_name = t.name;
  return id;
}

void Recorder::set_error(uint64_t id, std::string message) {
  std::lock_guard<std::mutex> l(mu_);
  errors_[id] = std::move(message);
  // Keep only errors whose records can still be in the ring.
  const uint64_t next = next_id_.load(std::memory_order_relaxed);
  if (next > slots_.size()) errors_.erase(errors_.begin(), errors_.lower_bound(next - slots_.size()));
}

void Recorder::record_event(GroupTrace* g, GroupEvent e, const std::string& detail) {
  if (!enabled()) return;
  static const char* const kNames[] = {"sinew:create", "sinew:split", "sinew:reconfigure", "sinew:abort",
                                       "sinew:revoke"};
  const uint64_t id = begin(g, kNames[static_cast<int>(e)], true, false, 0, -1, steady_ns());
  Slot& s = slot(id);
  s.started_ns.store(s.created_ns, std::memory_order_relaxed);
  s.completed_ns.store(s.created_ns, std::memory_order_relaxed);
  s.state.store(State::kCompleted, std::memory_order_relaxed);
  publish(id);
  if (!detail.empty()) set_error(id, detail);
}

std::vector<EntryCopy> Recorder::snapshot() {
  std::vector<EntryCopy> out;
  if (!enabled()) return out;
  const uint64_t next = next_id_.load(std::memory_order_acquire);
  const uint64_t first = next > slots_.size() ? next - slots_.size() : 0;
  out.reserve(next - first);
  std::map<uint64_t, std::string> errors;
  {
    std::lock_guard<std::mutex> l(mu_);
    errors = errors_;
  }
  for (uint64_t id = first; id < next; ++id) {
    Slot& s = slot(id);
    s.lock();
    const uint64_t v1 = s.version.load(std::memory_order_acquire);
    if (v1 != 2 * id + 2) {  // being written, or already overwritten
      s.unlock();
      continue;
    }
    EntryCopy e{};
    e.id = s.id;
    e.group = s.group;
    e.op = s.op;
    e.is_event = s.is_event;
    e.is_p2p = s.is_p2p;
    e.coll_seq = s.coll_seq;
    e.p2p_seq = s.p2p_seq;
    e.peer = s.peer;
    e.created_ns = s.created_ns;
    e.state = s.state.load(std::memory_order_acquire);
    e.started_ns = s.started_ns.load(std::memory_order_relaxed);
    e.completed_ns = s.completed_ns.load(std::memory_order_relaxed);
    e.failed = s.failed.load(std::memory_order_acquire);
    e.tid = s.tid;
    e.thread_name = s.thread_name;
    e.in = s.in;
    e.out = s.out;
    e.frames.assign(s.frames, s.frames + s.nframes);
    const uint8_t na = s.nawaited.load(std::memory_order_acquire);
    e.awaited.assign(s.awaited, s.awaited + na);
    s.unlock();
    if (auto it = errors.find(id); it != errors.end()) e.error = it->second;
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<const GroupTrace*> Recorder::groups() {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<const GroupTrace*> out;
  for (auto& g : groups_) out.push_back(g.get());
  return out;
}

void Recorder::reset() {
  for (auto& s : slots_) {
    s.lock();
    s.version.store(0, std::memory_order_relaxed);
    s.unlock();
  }
  next_id_.store(0);
  std::lock_guard<std::mutex> l(mu_);
  errors_.clear();
  for (auto& g : groups_) {
    g->dropped = 0;
    g->last_dropped_coll = 0;
    g->last_dropped_p2p = 0;
  }
}

}  // namespace fr

void install_flight_recorder() {
  static std::once_flag once;
  std::call_once(once, [] {
    fr::Recorder& r = fr::Recorder::get();
    if (!r.enabled()) return;
    register_hooks_factory([](const GroupInfo& info) -> std::shared_ptr<ProcessGroupHooks> {
      return std::make_shared<fr::Hooks>(fr::Recorder::get().register_group(info));
    });
    fr::start_service();
  });
}

size_t flight_recorder_capacity() { return fr::Recorder::get().config().capacity; }

std::string flight_recorder_json(const std::string& reason, const std::string& detail) {
  return fr::render_json(reason, detail);
}

std::string dump_flight_recorder(const std::string& reason, const std::string& detail) {
  if (!fr::Recorder::get().enabled()) return "";
  return fr::dump_now(reason, detail);
}

void reset_flight_recorder() { fr::Recorder::get().reset(); }

void set_flight_recorder_clock_offset(int64_t offset_ns) {
  fr::g_clock_offset_ns.store(offset_ns, std::memory_order_relaxed);
  fr::g_clock_offset_known.store(true, std::memory_order_release);
}

void set_flight_recorder_recording(bool on) { fr::g_recording.store(on, std::memory_order_relaxed); }

}  // namespace sinew::dist
