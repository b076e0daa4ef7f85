#include "recorder.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <cmath>
#include <cstdio>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sinew/core/env.h"
#include "sinew/core/error.h"
#include "sinew/core/log.h"
#include "sinew/dist/flight_recorder.h"
#include "sinew/dist/work.h"

namespace sinew::dist {
namespace fr {
namespace {

// Each setting under sinew's name first, then PyTorch's spellings (the
// Flight Recorder's, then ProcessGroupNCCL's), so an unchanged PyTorch job
// configures it.
using Spelling = EnvParam<std::string>;
const EnvParam<std::string> kBufferSize{"SINEW_FR_BUFFER_SIZE", "2000",
                                        "Flight Recorder ring entries per process (0: off)"};
const EnvParam<std::string> kTorchBufferSize{"TORCH_FR_BUFFER_SIZE", "", "PyTorch's spelling of SINEW_FR_BUFFER_SIZE"};
const EnvParam<std::string> kNcclBufferSize{"TORCH_NCCL_TRACE_BUFFER_SIZE", "",
                                            "ProcessGroupNCCL's SINEW_FR_BUFFER_SIZE"};
const EnvParam<std::string> kDumpOnTimeout{"SINEW_FR_DUMP_ON_TIMEOUT", "1",
                                           "dump every rank's trace when a collective times out or a peer is lost"};
const EnvParam<std::string> kTorchDumpOnTimeout{"TORCH_FR_DUMP_ON_TIMEOUT", "",
                                                "PyTorch's spelling of SINEW_FR_DUMP_ON_TIMEOUT"};
const EnvParam<std::string> kNcclDumpOnTimeout{"TORCH_NCCL_DUMP_ON_TIMEOUT", "",
                                               "ProcessGroupNCCL's SINEW_FR_DUMP_ON_TIMEOUT"};
const EnvParam<std::string> kDumpTempFile{"SINEW_FR_DUMP_TEMP_FILE", "/tmp/sinew_fr_trace_rank_",
                                          "dump file prefix (the rank is appended)"};
const EnvParam<std::string> kTorchDumpTempFile{"TORCH_FR_DUMP_TEMP_FILE", "",
                                               "PyTorch's spelling of SINEW_FR_DUMP_TEMP_FILE"};
const EnvParam<std::string> kNcclDumpTempFile{"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "",
                                              "ProcessGroupNCCL's SINEW_FR_DUMP_TEMP_FILE"};
const EnvParam<std::string> kCppStack{"SINEW_FR_CPP_STACK", "0", "record the C++ stack of every op"};
const EnvParam<std::string> kTorchCppStack{"TORCH_FR_CPP_STACK", "", "PyTorch's spelling of SINEW_FR_CPP_STACK"};
const EnvParam<std::string> kNcclCppStack{"TORCH_NCCL_TRACE_CPP_STACK", "", "ProcessGroupNCCL's SINEW_FR_CPP_STACK"};
const EnvParam<std::string> kEnableTiming{"SINEW_FR_ENABLE_TIMING", "0", "exact start/end times for every op"};
const EnvParam<std::string> kNcclEnableTiming{"TORCH_NCCL_ENABLE_TIMING", "",
                                              "ProcessGroupNCCL's SINEW_FR_ENABLE_TIMING"};
const EnvParam<std::string> kPipeFile{"SINEW_FR_PIPE_FILE", "", "prefix of a named pipe per rank: writing to it dumps"};
const EnvParam<std::string> kNcclPipeFile{"TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "",
                                          "ProcessGroupNCCL's SINEW_FR_PIPE_FILE"};
const EnvParam<std::string> kDumpSignal{"SINEW_FR_DUMP_SIGNAL", "SIGUSR2",
                                        "signal that dumps the trace: SIGUSR1, SIGUSR2 or none"};
const EnvParam<std::string> kDumpTimeoutMs{"SINEW_FR_DUMP_TIMEOUT_MS", "1000",
                                           "how long a dump requested through the store waits for every rank"};

// The first of `spellings` that is set, and its value; logged once so users
// see which of PyTorch's spellings took effect.
std::optional<std::pair<std::string, std::string>> first_env(std::initializer_list<const Spelling*> spellings) {
  for (const Spelling* p : spellings)
    if (auto v = p->read()) return std::make_pair(std::string(p->name()), *v);
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
  if (auto e = first_env({&kBufferSize, &kTorchBufferSize, &kNcclBufferSize})) {
    c.capacity = static_cast<size_t>(parse_int(e->first, e->second));
    note("buffer size", e->first, e->second);
  }
  if (auto e = first_env({&kDumpOnTimeout, &kTorchDumpOnTimeout, &kNcclDumpOnTimeout})) {
    c.dump_on_failure = parse_bool(e->first, e->second);
    note("dump on timeout", e->first, e->second);
  }
  if (auto e = first_env({&kDumpTempFile, &kTorchDumpTempFile, &kNcclDumpTempFile})) {
    if (e->second.empty()) throw InvalidArgument::make(e->first, "''", "a path prefix for dump files");
    c.prefix = e->second;
    note("dump file prefix", e->first, e->second);
  }
  if (auto e = first_env({&kCppStack, &kTorchCppStack, &kNcclCppStack})) {
    c.cpp_stack = parse_bool(e->first, e->second);
    note("C++ stacks", e->first, e->second);
  }
  if (auto e = first_env({&kEnableTiming, &kNcclEnableTiming})) {
    c.timing = parse_bool(e->first, e->second);
    note("exact timing", e->first, e->second);
  }
  if (auto e = first_env({&kPipeFile, &kNcclPipeFile})) {
    c.pipe_prefix = e->second;
    note("dump pipe prefix", e->first, e->second);
  }
  c.dump_signal = SIGUSR2;
  if (auto e = first_env({&kDumpSignal})) {
    std::string v = e->second;
    if (v == "none" || v == "0") c.dump_signal = 0;
    else if (v == "SIGUSR1" || v == "USR1") c.dump_signal = SIGUSR1;
    else if (v == "SIGUSR2" || v == "USR2") c.dump_signal = SIGUSR2;
    else throw InvalidArgument::make(e->first, fmt::format("'{}'", v), "SIGUSR1, SIGUSR2 or none");
  }
  if (auto e = first_env({&kDumpTimeoutMs})) c.dump_timeout_ms = parse_int(e->first, e->second);
  return c;
}

// One tensor's shape as the ring stores it: up to kMaxDims dims, else its
// element count alone (ndim -1).
int8_t fill_shape(const TensorView& t, int64_t* dims) {
  const auto shape = t.shape();
  if (shape.size() > Shape::kMaxDims) {
    dims[0] = t.numel();
    return -1;
  }
  for (size_t d = 0; d < shape.size(); ++d) dims[d] = shape[d];
  return static_cast<int8_t>(shape.size());
}

// Inline, not std::ranges::equal: that becomes a memcmp call per op.
inline bool same_shape(const TensorView& a, const TensorView& b) {
  const auto x = a.shape(), y = b.shape();
  if (x.size() != y.size()) return false;
  for (size_t d = 0; d < x.size(); ++d)
    if (x[d] != y[d]) return false;
  return true;
}

constexpr int8_t kSameAsInput = -2;  // an output ndim: the input's shape
constexpr int8_t kInSide = -3;       // the first shape is in the side record

// A `tensors` half: the list's count (16 bits), its first tensor's dtype
// (8) and ndim (8).
inline uint32_t head_of(std::span<const TensorView> tensors, int8_t ndim) {
  return static_cast<uint32_t>(std::min<size_t>(tensors.size(), 0xffff)) |
         uint32_t{static_cast<uint8_t>(tensors[0].dtype())} << 16 | uint32_t{static_cast<uint8_t>(ndim)} << 24;
}

// The first tensor of a list as the common op's record holds it: its
// `tensors` half and its dims, two to a word. Four dims are read and packed
// whatever the view's ndim (a view holds its dims inline, the unused ones
// zero): no loop and no branch per dim.
static_assert(TensorView::kMaxDims >= 4 && Shape::kMaxDims == 4);
struct PackedShape {
  uint32_t head = 0;
  uint64_t dims[Shape::kMaxDims / 2];
  // False when the shape needs more than the slot (over four dims, or a
  // dim past 32 bits). An empty list packs as nothing (head 0).
  [[gnu::always_inline]] bool pack(std::span<const TensorView> tensors) {
    if (tensors.empty()) return true;
    const auto shape = tensors[0].shape();
    const int64_t* d = shape.data();
    const int64_t d0 = d[0], d1 = d[1], d2 = d[2], d3 = d[3];
    // Dims are >= 0: one is past INT32_MAX exactly when bit 31 or above is set.
    if (shape.size() > Shape::kMaxDims || ((d0 | d1 | d2 | d3) >> 31) != 0) return false;
    dims[0] = pair(d0, d1);
    dims[1] = pair(d2, d3);
    head = head_of(tensors, static_cast<int8_t>(shape.size()));
    return true;
  }
  void store(std::atomic<uint64_t>* out) const {
    if (head == 0) return;
    out[0].store(dims[0], std::memory_order_relaxed);
    if ((head >> 24) > 2) out[1].store(dims[1], std::memory_order_relaxed);
  }
  static uint64_t pair(int64_t a, int64_t b) {
    return uint64_t{static_cast<uint32_t>(a)} | uint64_t{static_cast<uint32_t>(b)} << 32;
  }
};

// The first tensor's `tensors` half; its dims go to `out`, or, past four
// dims, its element count (ndim -1), or to `big` (ndim kInSide) when that
// or a dim does not fit in 32 bits.
inline uint32_t record_first(std::span<const TensorView> tensors, std::atomic<uint64_t>* out, Shape& big) {
  PackedShape p;
  if (p.pack(tensors)) {
    p.store(out);
    return p.head;
  }
  const TensorView& t = tensors[0];
  const int64_t n = t.numel();
  const int8_t nd = t.shape().size() > Shape::kMaxDims && n <= INT32_MAX ? int8_t{-1} : kInSide;
  if (nd == -1) out[0].store(static_cast<uint32_t>(n), std::memory_order_relaxed);
  else big.ndim = fill_shape(t, big.dims);
  return head_of(tensors, nd);
}

inline bool in_side(uint32_t packed) { return static_cast<int8_t>(packed >> 24) == kInSide && (packed & 0xffff); }

void record_more(std::span<const TensorView> tensors, Shape* more) {
  const size_t n = std::min<size_t>(tensors.size(), TensorList::kMaxShapes);
  for (size_t i = 1; i < n; ++i) more[i - 1].ndim = fill_shape(tensors[i], more[i - 1].dims);
}

void unpack_tensors(uint32_t packed, const std::atomic<uint64_t>* first, const Shape& first_big, const Shape* more,
                    bool more_valid, TensorList& list) {
  list.count = static_cast<uint16_t>(packed & 0xffff);
  list.dtype = static_cast<DType>((packed >> 16) & 0xff);
  if (list.count == 0) return;
  Shape& s = list.shapes[0];
  s.ndim = static_cast<int8_t>(packed >> 24);
  if (s.ndim == kSameAsInput) return;  // the caller copies the input's shape
  if (s.ndim == kInSide) {
    if (more_valid) {
      s = first_big;
    } else {
      s.ndim = -1;
      s.dims[0] = -1;
    }
  } else {
    for (int d = 0; d < (s.ndim < 0 ? 1 : s.ndim); ++d)
      s.dims[d] = static_cast<int32_t>(first[d / 2].load(std::memory_order_relaxed) >> (d % 2 * 32));
  }
  const int n = std::min<int>(list.count, TensorList::kMaxShapes);
  for (int i = 1; i < n; ++i) {
    if (more_valid) {
      list.shapes[i] = more[i - 1];
    } else {  // the side record was reused before the dump read it
      list.shapes[i].ndim = -1;
      list.shapes[i].dims[0] = -1;
    }
  }
}

std::atomic<bool> g_recording{true};

}  // namespace

std::atomic<int64_t> g_clock_offset_ns{0};
std::atomic<bool> g_clock_offset_known{false};

namespace {

// initial-exec: these are read on every op, and the default TLS model of a
// shared library makes each access a call into the dynamic linker.
#define SINEW_FAST_TLS __attribute__((tls_model("initial-exec")))
// What the recorder keeps per thread, in one block (one TLS offset to load).
struct ThreadState {
  // Record ids this thread may use: [next, end).
  uint64_t next = 0, end = 0;
  size_t index = 0;  // next's slot
  uint64_t last_enqueued = 0;  // trace id of this thread's last enqueue
  uint64_t running = 0;  // trace id of the op this thread executes
  int64_t wait_clock_ns = 0;  // the last clock read a wait loop reported
  const ThreadTag* tag = nullptr;
};
thread_local ThreadState t_state SINEW_FAST_TLS;

}  // namespace

// Inlined into the op path (a call with this many arguments spills them).
[[gnu::always_inline]] inline uint64_t Recorder::take_id(size_t& index) {
  ThreadState& b = t_state;
  // A block is given up once other threads have taken half a ring of ids
  // since it was handed out: its records would land among much newer ones,
  // and a dump (which scans the last `capacity` ids) would not see them.
  // After reset() next_id_ is below b.end, which also reads as stale.
  if (b.next == b.end || next_id_.load(std::memory_order_relaxed) - b.end > stale_after_) [[unlikely]] {
    b.next = next_id_.fetch_add(block_, std::memory_order_relaxed);
    b.end = b.next + block_;
    b.index = this->index(b.next);
  }
  index = b.index;
  b.index = b.index + 1 == capacity_ ? 0 : b.index + 1;
  return b.next++;
}

[[gnu::always_inline]] inline Slot& Recorder::begin(GroupTrace* g, const char* op, bool is_event, bool is_p2p,
                                                    uint64_t seq, int peer, int64_t created_ns, uint64_t& id) {
  size_t index;
  id = take_id(index);
  Slot& s = slots_[index];
  s.version.store(2 * id + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);  // the odd version is seen before any field changes
  s.group.store(g, std::memory_order_relaxed);
  s.op.store(op, std::memory_order_relaxed);
  s.seq.store(is_event ? 0 : seq, std::memory_order_relaxed);
  s.created_ns.store(created_ns, std::memory_order_relaxed);
  s.started_ns.store(created_ns, std::memory_order_relaxed);
  s.meta.store(Slot::pack_meta(peer, static_cast<uint8_t>((is_event ? Slot::kEvent : 0) | (is_p2p ? Slot::kP2P : 0)),
                               State::kScheduled),
               std::memory_order_relaxed);
  const ThreadTag* tag = t_state.tag;
  s.thread.store(tag ? tag : &this_thread_tag(), std::memory_order_relaxed);
  // The next record's slot is written on the next op: start fetching its
  // lines for writing now, while this op runs.
  const char* next = reinterpret_cast<const char*>(&slots_[index + 1 == capacity_ ? 0 : index + 1]);
  for (size_t line = 0; line < sizeof(Slot); line += 64) __builtin_prefetch(next + line, 1);
  return s;
}

namespace {

class Hooks final : public ProcessGroupHooks {
 public:
  explicit Hooks(GroupTrace* g) : g_(g), r_(Recorder::get()) {}

  void on_enqueue(Work& work, bool is_p2p, int peer, std::span<const TensorView> inputs,
                  std::span<const TensorView> outputs) override {
    if (!g_recording.load(std::memory_order_relaxed)) return;
    // The common op, at most one tensor in and one out (allreduce and
    // broadcast pass the same one as both), each with up to four dims that
    // fit in 32 bits, takes a straight path: its shapes are packed in
    // registers, then stored with the rest of the record. Anything else
    // takes the general path, with the side record.
    const bool same = inputs.size() == 1 && outputs.size() == 1 && outputs.data() == inputs.data();
    PackedShape in, out;
    if (inputs.size() <= 1 && outputs.size() <= 1 && !cpp_stack_ && in.pack(inputs) && (same || out.pack(outputs)))
        [[likely]] {
      uint64_t id;
      Slot& s = begin_op(work, is_p2p, peer, id);
      in.store(s.in_dims);
      if (!same) out.store(s.out_dims);
      const uint32_t out_head = same ? (in.head & 0x00ffffffu) | uint32_t{static_cast<uint8_t>(kSameAsInput)} << 24
                                     : out.head;
      s.tensors.store(uint64_t{in.head} | uint64_t{out_head} << 32, std::memory_order_relaxed);
      end_op(work, is_p2p, id, s);
    } else {
      enqueue_general(work, is_p2p, peer, inputs, outputs);
    }
  }

  void on_start(Work& work) override {
    const uint64_t tid = work.trace_id();
    if (tid == 0) return;
    if (Slot* s = live(work)) {
      ThreadState& t = t_state;
      // Started on the thread that issued it, right away (the inline path):
      // the issue time, already in the slot, is the start time.
      if (tid != t.last_enqueued) s->started_ns.store(steady_ns(), std::memory_order_relaxed);
      s->meta.store(Slot::with_state(s->meta.load(std::memory_order_relaxed), State::kStarted),
                    std::memory_order_release);
      t.running = tid;
      ((tid & 1) ? g_->last_started_p2p : g_->last_started_coll).store(work.seq(), std::memory_order_relaxed);
    }
  }

  void on_complete(Work& work) override { finish(work); }

  void on_error(Work& work, Status& status) override {
    Recorder& r = Recorder::get();
    Slot* s = finish(work);
    const uint64_t tid = work.trace_id();
    if (s) {
      r.set_awaited(tid / 2 - 1, status.ranks());
      s->meta.fetch_or(uint64_t{Slot::kFailed} << 32, std::memory_order_release);
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
    if (const uint64_t id = work.trace_id() / 2 - 1; work.trace_id() != 0 && r.live(id)) {
      SideRecord& side = r.side(id);
      side.lock();
      if (side.id == id) awaited.assign(side.awaited, side.awaited + side.nawaited);
      side.unlock();
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
  [[gnu::always_inline]] Slot& begin_op(Work& work, bool is_p2p, int peer, uint64_t& id) {
    // The Work's deadline was computed from "now" a moment ago: reuse it
    // rather than reading the clock again on the op path (unless the
    // timeout was too long for a deadline: never).
    const Deadline d = work.default_deadline();
    const int64_t created =
        d.is_never()
            ? steady_ns()
            : std::chrono::duration_cast<std::chrono::nanoseconds>(d.time_point().time_since_epoch()).count() -
                  g_->info.timeout_ms * 1'000'000;
    const char* op = work.op_literal() ? work.op_literal() : "unknown";
    return r_.begin(g_, op, false, is_p2p, work.seq(), peer, created, id);
  }

  [[gnu::always_inline]] void end_op(Work& work, bool is_p2p, uint64_t id, Slot& s) {
    Recorder::publish(s, id);
    (is_p2p ? g_->last_enqueued_p2p : g_->last_enqueued_coll).store(work.seq(), std::memory_order_relaxed);
    // The trace id carries whether the op is p2p, so start and completion
    // need not read the slot's (lock-guarded) fields.
    const uint64_t trace = 2 * (id + 1) + (is_p2p ? 1 : 0);
    work.set_trace_id(trace);
    work.set_trace_slot(&s);
    t_state.last_enqueued = trace;
  }

  [[gnu::noinline]] void enqueue_general(Work& work, bool is_p2p, int peer, std::span<const TensorView> inputs,
                                         std::span<const TensorView> outputs) {
    Recorder& r = r_;
    uint64_t id;
    Slot& s = begin_op(work, is_p2p, peer, id);
    Shape big_in, big_out;  // written only when used (ndim kInSide)
    const uint32_t in = record_first(inputs, s.in_dims, big_in);
    // An in-place op whose output is a view identical to its input: the
    // outputs' shape is not stored again (out ndim kSameAsInput).
    const bool same = inputs.size() == 1 && outputs.size() == 1 && outputs[0].data() == inputs[0].data() &&
                      outputs[0].dtype() == inputs[0].dtype() && same_shape(outputs[0], inputs[0]);
    const uint32_t out = same ? (in & 0x00ffffffu) | uint32_t{static_cast<uint8_t>(kSameAsInput)} << 24
                              : record_first(outputs, s.out_dims, big_out);
    s.tensors.store(uint64_t{in} | uint64_t{out} << 32, std::memory_order_relaxed);
    if (inputs.size() > 1 || outputs.size() > 1 || cpp_stack_ || in_side(in) || in_side(out)) {
      SideRecord& side = r.side(id);
      side.claim(id);
      record_more(inputs, side.more_in);
      record_more(outputs, side.more_out);
      if (in_side(in)) side.first_in = big_in;
      if (in_side(out)) side.first_out = big_out;
      if (cpp_stack_) side.nframes = static_cast<uint8_t>(::backtrace(side.frames, SideRecord::kMaxFrames));
      side.unlock();
    }
    end_op(work, is_p2p, id, s);
  }

  Slot* finish(Work& work) {
    const uint64_t tid = work.trace_id();
    if (tid == 0) return nullptr;
    ThreadState& t = t_state;
    if (t.running == tid) t.running = 0;
    Slot* s = live(work);
    if (!s) return nullptr;
    // Such an op's last wait read the clock as it ended (or it never waited
    // long enough to read it: its creation time is then within microseconds
    // of its completion).
    const uint64_t done = work.waits_report_clock() && !exact_
                              ? static_cast<uint64_t>(std::max(t.wait_clock_ns,
                                                               s->created_ns.load(std::memory_order_relaxed)))
                              : r_.clock().now();
    s->completed_tick.store(done, std::memory_order_relaxed);
    s->meta.store(Slot::with_state(s->meta.load(std::memory_order_relaxed), State::kCompleted),
                  std::memory_order_release);
    ((tid & 1) ? g_->last_completed_p2p : g_->last_completed_coll).store(work.seq(), std::memory_order_relaxed);
    return s;
  }

  // The op's slot while it still holds the op's record (a ring that
  // wrapped during a long op has reused it).
  static Slot* live(const Work& work) {
    Slot* s = static_cast<Slot*>(work.trace_slot());
    return s && s->version.load(std::memory_order_acquire) == work.trace_id() - (work.trace_id() & 1) ? s : nullptr;
  }

  GroupTrace* g_;
  Recorder& r_;
  const bool cpp_stack_ = r_.config().cpp_stack;
  const bool exact_ = r_.clock().exact();
};

std::mutex g_names_mu;
std::deque<std::string>& thread_names() {
  // Never destroyed: entries point into it, and a dump may run during exit.
  static auto* names = new std::deque<std::string>();
  return *names;
}

}  // namespace

void note_awaited(const std::vector<int>& ranks) {
  const uint64_t running = t_state.running;
  if (running == 0) return;
  Recorder& r = Recorder::get();
  const uint64_t id = running / 2 - 1;
  if (r.live(id)) r.set_awaited(id, ranks);
}

void note_wait_clock(int64_t steady_ns) { t_state.wait_clock_ns = steady_ns; }

const ThreadTag& this_thread_tag() {
  ThreadState& t = t_state;
  if (t.tag) return *t.tag;
  char buf[32] = {};
  pthread_getname_np(pthread_self(), buf, sizeof(buf));
  std::lock_guard<std::mutex> g(g_names_mu);
  // Tags live as long as the process: records point at them.
  static auto* tags = new std::deque<ThreadTag>();
  thread_names().emplace_back(buf);
  tags->push_back(ThreadTag{static_cast<int32_t>(::syscall(SYS_gettid)), thread_names().back().c_str()});
  t.tag = &tags->back();
  return *t.tag;
}

namespace {

// The vDSO's clock_gettime, when the kernel maps one and it reads the
// clocks we use; else glibc's.
int (*kernel_clock_gettime())(clockid_t, timespec*) {
  using Fn = int (*)(clockid_t, timespec*);
  if (void* vdso = ::dlopen("linux-vdso.so.1", RTLD_LAZY | RTLD_NOLOAD))
    for (const char* name : {"__vdso_clock_gettime", "__kernel_clock_gettime"})
      if (auto f = reinterpret_cast<Fn>(::dlsym(vdso, name))) {
        timespec a, b;
        if (f(CLOCK_MONOTONIC_COARSE, &a) == 0 && f(CLOCK_MONOTONIC, &b) == 0) return f;
      }
  return &::clock_gettime;
}

}  // namespace

Clock::Clock(bool exact) : read_(kernel_clock_gettime()) {
  mode_ = exact ? Mode::kSteady : Mode::kCoarse;
#if defined(__x86_64__)
  // The TSC is usable across cores when the kernel chose it as its own
  // clocksource (it checks invariance and synchronisation).
  if (exact)
    if (std::FILE* f = std::fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r")) {
      char buf[32] = {};
      if (std::fgets(buf, sizeof(buf), f) && std::strncmp(buf, "tsc", 3) == 0 && (buf[3] == '\n' || !buf[3]))
        mode_ = Mode::kTsc;
      std::fclose(f);
    }
#endif
  tick0_ = now();
  ns0_ = steady_ns();
}

double Clock::rate() const {
  if (mode_ != Mode::kTsc) return 1.0;
  // The rate is measured over the recorder's whole life; a young recorder
  // waits until 20 ms have passed so the rate is good to ~1e-6.
  int64_t ns1 = steady_ns();
  while (ns1 - ns0_ < 20'000'000) {
    ::usleep(static_cast<useconds_t>((20'000'000 - (ns1 - ns0_)) / 1000 + 1));
    ns1 = steady_ns();
  }
#if defined(__x86_64__)
  const uint64_t tick1 = __rdtsc();
  return static_cast<double>(ns1 - ns0_) / static_cast<double>(tick1 - tick0_);
#else
  return 1.0;
#endif
}

int64_t Clock::to_ns(uint64_t tick, double rate) const {
  if (tick == 0) return 0;
  if (mode_ != Mode::kTsc) return static_cast<int64_t>(tick);
  return ns0_ + static_cast<int64_t>(std::llround((static_cast<double>(tick) - static_cast<double>(tick0_)) * rate));
}

Recorder& Recorder::get() {
  static Recorder* r = new Recorder();  // never destroyed: hooks may run during static destruction
  return *r;
}

Recorder::Recorder()
    : config_(load_config()),
      capacity_(std::max<size_t>(config_.capacity, 1)),
      inv_(~uint64_t{0} / capacity_),
      slots_(new Slot[capacity_]),
      side_(new SideRecord[capacity_]),
      block_(std::clamp<uint64_t>(capacity_ / 32, 1, 64)),
      stale_after_(capacity_ / 2),
      clock_(config_.timing) {}

GroupTrace* Recorder::register_group(const GroupInfo& info) {
  auto g = std::make_unique<GroupTrace>();
  g->info = info;
  std::lock_guard<std::mutex> l(mu_);
  groups_.push_back(std::move(g));
  return groups_.back().get();
}

void Recorder::set_awaited(uint64_t id, std::span<const int> ranks) {
  SideRecord& s = side(id);
  s.claim(id);
  s.set_awaited(ranks);
  s.unlock();
}

void Recorder::set_error(uint64_t id, std::string message) {
  std::lock_guard<std::mutex> l(mu_);
  errors_[id] = std::move(message);
  // Keep only errors whose records can still be in the ring.
  const uint64_t next = next_id_.load(std::memory_order_relaxed);
  if (next > capacity_) errors_.erase(errors_.begin(), errors_.lower_bound(next - capacity_));
}

void Recorder::record_event(GroupTrace* g, GroupEvent e, const std::string& detail) {
  if (!enabled()) return;
  static const char* const kNames[] = {"sinew:create", "sinew:split", "sinew:reconfigure", "sinew:abort",
                                       "sinew:revoke"};
  uint64_t id;
  Slot& s = begin(g, kNames[static_cast<int>(e)], true, false, 0, -1, steady_ns(), id);
  s.tensors.store(0, std::memory_order_relaxed);
  s.completed_tick.store(clock_.now(), std::memory_order_relaxed);
  s.meta.store(Slot::with_state(s.meta.load(std::memory_order_relaxed), State::kCompleted),
               std::memory_order_relaxed);
  publish(s, id);
  if (!detail.empty()) set_error(id, detail);
}

std::vector<EntryCopy> Recorder::snapshot() {
  std::vector<EntryCopy> out;
  if (!enabled()) return out;
  const double rate = clock_.rate();
  out.reserve(capacity_);
  std::map<uint64_t, std::string> errors;
  {
    std::lock_guard<std::mutex> l(mu_);
    errors = errors_;
  }
  // Every slot, not the last `capacity` ids: ids come in per-thread blocks,
  // so the newest ids can be unused while their slots still hold records.
  for (size_t i = 0; i < capacity_; ++i) {
    Slot& s = slots_[i];
    const uint64_t v1 = s.version.load(std::memory_order_acquire);
    if (v1 == 0 || v1 % 2 == 1) continue;  // never written, or being written
    const uint64_t id = v1 / 2 - 1;
    EntryCopy e{};
    e.id = id;
    e.group = s.group.load(std::memory_order_relaxed);
    e.op = s.op.load(std::memory_order_relaxed);
    // The state first (acquire): the times it makes valid are read after it.
    const uint64_t meta = s.meta.load(std::memory_order_acquire);
    const uint8_t f = Slot::flags_of(meta);
    e.is_event = f & Slot::kEvent;
    e.is_p2p = f & Slot::kP2P;
    e.failed = f & Slot::kFailed;
    const uint64_t seq = s.seq.load(std::memory_order_relaxed);
    e.coll_seq = e.is_p2p || e.is_event ? 0 : seq;
    e.p2p_seq = e.is_p2p ? seq : 0;
    e.peer = Slot::peer_of(meta);
    e.created_ns = s.created_ns.load(std::memory_order_relaxed);
    e.state = Slot::state_of(meta);
    e.started_ns = e.state != State::kScheduled ? s.started_ns.load(std::memory_order_relaxed) : 0;
    const uint64_t done = e.state == State::kCompleted ? s.completed_tick.load(std::memory_order_relaxed) : 0;
    const ThreadTag* t = s.thread.load(std::memory_order_relaxed);
    const uint64_t packed = s.tensors.load(std::memory_order_relaxed);
    // Shapes beyond the first, frames and awaited ranks, when this record has them.
    SideRecord& side = this->side(id);
    side.lock();
    const bool side_valid = side.id == id;
    if (side_valid) {
      e.frames.assign(side.frames, side.frames + side.nframes);
      e.awaited.assign(side.awaited, side.awaited + side.nawaited);
    }
    unpack_tensors(static_cast<uint32_t>(packed), s.in_dims, side.first_in, side.more_in, side_valid, e.in);
    unpack_tensors(static_cast<uint32_t>(packed >> 32), s.out_dims, side.first_out, side.more_out, side_valid,
                   e.out);
    if (e.out.count && e.out.shapes[0].ndim == kSameAsInput) e.out = e.in;
    side.unlock();
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.version.load(std::memory_order_relaxed) != v1) continue;  // overwritten while copied
    e.completed_ns = clock_.to_ns(done, rate);
    e.tid = t ? t->tid : 0;
    e.thread_name = t ? t->name : "";
    if (auto it = errors.find(id); it != errors.end()) e.error = it->second;
    out.push_back(std::move(e));
  }
  std::sort(out.begin(), out.end(), [](const EntryCopy& a, const EntryCopy& b) { return a.id < b.id; });
  return out;
}

std::vector<const GroupTrace*> Recorder::groups() {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<const GroupTrace*> out;
  for (auto& g : groups_) out.push_back(g.get());
  return out;
}

void Recorder::reset() {
  for (size_t i = 0; i < capacity_; ++i) {
    slots_[i].version.store(0, std::memory_order_relaxed);
    // Ids start again at 0: an old side record must not pass for a new one's.
    side_[i].lock();
    side_[i].id = ~uint64_t{0};
    side_[i].unlock();
  }
  next_id_.store(0);
  std::lock_guard<std::mutex> l(mu_);
  errors_.clear();
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
