// The Flight Recorder's ring (internal to dist). Recording an op is on
// every collective's path, so it is kept to a few plain stores into a slot
// that stays in L2 (ids come from per-thread blocks: no locked instruction
// on the common path), branch-free shape packing, and at most one coarse
// clock read at completion (docs/flight_recorder.md, "Cost"): slots are written under
// a seqlock (the slot's version) with relaxed atomics, and what only some
// ops need (C++ frames, awaited ranks, the second and later tensors'
// shapes) lives in a side record taken under a lock, off the common path.
#pragma once

#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "sinew/dist/hooks.h"
#include "sinew/tensor/dtype.h"

namespace sinew::dist::fr {

inline int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One group's identity and progress; lives as long as the process, so
// entries may point at it after the group is gone.
struct GroupTrace {
  GroupInfo info;
  std::atomic<uint64_t> last_enqueued_coll{0}, last_started_coll{0}, last_completed_coll{0};
  std::atomic<uint64_t> last_enqueued_p2p{0}, last_started_p2p{0}, last_completed_p2p{0};
};

struct Shape {
  static constexpr int kMaxDims = 4;
  int64_t dims[kMaxDims];
  int8_t ndim;  // -1: more dims than fit; dims[0] holds numel
};

struct TensorList {
  static constexpr int kMaxShapes = 4;
  uint16_t count = 0;  // tensors in the op; the first kMaxShapes are recorded
  DType dtype = DType::kF32;
  Shape shapes[kMaxShapes];
};

enum class State : uint8_t { kScheduled, kStarted, kCompleted };

// Thread id and name of the calling thread, cached per thread.
struct ThreadTag {
  int32_t tid;
  const char* name;
};

// One record as every op writes it: two cache lines (a ring of 2000 is
// 250 KB and stays in L2). version is 2*id+1 while the record is written
// and 2*id+2 once published; a reader copies the fields and keeps the copy
// only when version was the same before and after. start and completion
// update started/completed and the state (in meta, stored last, with
// release) of a published record in place; started_ns and completed_tick
// mean something only once the state says so, so a new record need not
// clear them.
struct alignas(64) Slot {
  std::atomic<uint64_t> version{0};
  std::atomic<GroupTrace*> group{nullptr};
  std::atomic<const char*> op{nullptr};
  std::atomic<uint64_t> seq{0};
  std::atomic<int64_t> created_ns{0};
  // Written as the creation time: an op started inline keeps it.
  std::atomic<int64_t> started_ns{0};
  std::atomic<uint64_t> completed_tick{0};  // Clock ticks; converted when dumped
  // peer (low 32 bits), flags (8), state (8): one store per hook.
  std::atomic<uint64_t> meta{0};
  std::atomic<const ThreadTag*> thread{nullptr};
  // count (16 bits), dtype (8), ndim (8) of the inputs, then of the outputs
  std::atomic<uint64_t> tensors{0};
  // The first input's and output's dims, two int32 to a word. A dim past
  // 32 bits is rare: that shape goes to the side record (ndim kInSide),
  // and the slot stays two cache lines.
  std::atomic<uint64_t> in_dims[Shape::kMaxDims / 2];
  std::atomic<uint64_t> out_dims[Shape::kMaxDims / 2];
  static constexpr uint8_t kEvent = 1, kP2P = 2, kFailed = 4;
  static uint64_t pack_meta(int32_t peer, uint8_t flags, State st) {
    return uint64_t{static_cast<uint32_t>(peer)} | uint64_t{flags} << 32 | uint64_t{static_cast<uint8_t>(st)} << 40;
  }
  static uint64_t with_state(uint64_t meta, State st) {
    return (meta & ~(uint64_t{0xff} << 40)) | uint64_t{static_cast<uint8_t>(st)} << 40;
  }
  static int32_t peer_of(uint64_t meta) { return static_cast<int32_t>(static_cast<uint32_t>(meta)); }
  static uint8_t flags_of(uint64_t meta) { return static_cast<uint8_t>(meta >> 32); }
  static State state_of(uint64_t meta) { return static_cast<State>(static_cast<uint8_t>(meta >> 40)); }
};
static_assert(sizeof(Slot) == 128, "a slot is two cache lines");

// What only some records carry, tagged with the record id it belongs to
// (a stale tag means "nothing"); guarded by its own lock, never on the
// common path.
struct SideRecord {
  std::atomic<bool> busy{false};
  void lock() {
    while (busy.exchange(true, std::memory_order_acquire))
      while (busy.load(std::memory_order_relaxed)) {
#if defined(__x86_64__)
        _mm_pause();
#endif
      }
  }
  void unlock() { busy.store(false, std::memory_order_release); }
  uint64_t id = ~uint64_t{0};
  static constexpr int kMaxFrames = 24;
  uint8_t nframes = 0;
  void* frames[kMaxFrames];
  static constexpr int kMaxAwaited = 8;
  uint8_t nawaited = 0;
  int32_t awaited[kMaxAwaited];
  Shape more_in[TensorList::kMaxShapes - 1], more_out[TensorList::kMaxShapes - 1];
  Shape first_in, first_out;  // when the slot's dims could not hold them
  // Claims the record for `id` (locked), clearing what an older id left.
  void claim(uint64_t for_id) {
    lock();
    if (id != for_id) {
      id = for_id;
      nframes = 0;
      nawaited = 0;
    }
  }
  void set_awaited(std::span<const int> ranks) {
    const size_t n = std::min<size_t>(ranks.size(), kMaxAwaited);
    for (size_t i = 0; i < n; ++i) awaited[i] = ranks[i];
    nawaited = static_cast<uint8_t>(n);
  }
};

// The clock that stamps completions. With timing on (PyTorch's
// TORCH_NCCL_ENABLE_TIMING) it is exact and cheap: the TSC where the kernel
// itself trusts it (clocksource "tsc"), CLOCK_MONOTONIC otherwise; ticks
// become steady_clock nanoseconds when a dump converts them. Off (the
// default, as in PyTorch, whose watchdog only discovers completions later)
// it is the kernel's coarse monotonic clock: the same time base, updated
// every tick (1-4 ms), for a third of the cost of a TSC read on every op.
// The kernel's clocks are read through the vDSO's clock_gettime directly:
// glibc's wrapper around it costs nearly as much again.
class Clock {
 public:
  explicit Clock(bool exact);
  uint64_t now() const {
#if defined(__x86_64__)
    if (mode_ == Mode::kTsc) return __rdtsc();
#endif
    timespec ts;
    read_(mode_ == Mode::kCoarse ? CLOCK_MONOTONIC_COARSE : CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec);
  }
  bool exact() const { return mode_ != Mode::kCoarse; }
  // Nanoseconds per tick, measured now over the clock's whole life.
  double rate() const;
  int64_t to_ns(uint64_t tick, double rate) const;
 private:
  enum class Mode { kTsc, kSteady, kCoarse };
  Mode mode_ = Mode::kSteady;
  int (*read_)(clockid_t, timespec*) = &::clock_gettime;
  uint64_t tick0_ = 0;
  int64_t ns0_ = 0;
};

// A slot's contents copied out for a dump.
struct EntryCopy {
  uint64_t id;
  const GroupTrace* group;
  const char* op;
  bool is_event, is_p2p;
  uint64_t coll_seq, p2p_seq;
  int32_t peer;
  int64_t created_ns, started_ns, completed_ns;
  State state;
  bool failed;
  int32_t tid;
  const char* thread_name;
  TensorList in, out;
  std::vector<void*> frames;
  std::vector<int> awaited;
  std::string error;
};

struct Config {
  size_t capacity = 2000;
  bool dump_on_failure = true;
  std::string prefix = "/tmp/sinew_fr_trace_rank_";
  bool cpp_stack = false;
  bool timing = false;  // exact completion times and durations
  std::string pipe_prefix;
  int dump_signal = 0;
  int64_t dump_timeout_ms = 1000;
};

class Recorder {
 public:
  static Recorder& get();  // the process's recorder, configured from the environment
  const Config& config() const { return config_; }
  bool enabled() const { return config_.capacity > 0; }

  GroupTrace* register_group(const GroupInfo& info);
  // Starts a record in the slot it returns, its id in `id`; publish() ends
  // it. The caller stores the record's tensors. Inline in recorder.cc,
  // the only place that records.
  Slot& begin(GroupTrace* g, const char* op, bool is_event, bool is_p2p, uint64_t seq, int peer,
              int64_t created_ns, uint64_t& id);
  Slot& slot(uint64_t id) { return slots_[index(id)]; }
  SideRecord& side(uint64_t id) { return side_[index(id)]; }
  // Ends what begin() started in `s`.
  static void publish(Slot& s, uint64_t id) { s.version.store(2 * id + 2, std::memory_order_release); }
  const Clock& clock() const { return clock_; }
  // The slot for `id` when it still holds that record.
  Slot* live(uint64_t id) {
    Slot& s = slot(id);
    return s.version.load(std::memory_order_acquire) == 2 * id + 2 ? &s : nullptr;
  }
  void set_error(uint64_t id, std::string message);
  void set_awaited(uint64_t id, std::span<const int> ranks);  // the ranks the op waits on
  void record_event(GroupTrace* g, GroupEvent e, const std::string& detail);

  std::vector<EntryCopy> snapshot();
  std::vector<const GroupTrace*> groups();
  void reset();

 private:
  Recorder();
  // id % capacity_ without a 64-bit division (~40 cycles on the op path):
  // Barrett reduction with inv_ = floor((2^64 - 1) / capacity_); the estimate is
  // at most one short.
  size_t index(uint64_t id) const {
    const uint64_t q = static_cast<uint64_t>((static_cast<unsigned __int128>(id) * inv_) >> 64);
    uint64_t r = id - q * capacity_;
    if (r >= capacity_) r -= capacity_;
    return static_cast<size_t>(r);
  }
  // A record id for the calling thread. Ids are handed to each thread in
  // blocks, so that the common op takes no locked instruction (an atomic
  // add drains the store buffer: about 9 ns per op here). Ids stay unique
  // and increase per thread; across threads they follow the blocks, not
  // time (a dump orders by id; analysers match by group and sequence).
  // Returns the id and sets `index` to its slot.
  uint64_t take_id(size_t& index);
  Config config_;
  size_t capacity_;
  uint64_t inv_;
  std::unique_ptr<Slot[]> slots_;
  std::unique_ptr<SideRecord[]> side_;
  uint64_t block_, stale_after_;
  Clock clock_;
  std::atomic<uint64_t> next_id_{0};
  std::mutex mu_;  // groups_ and errors_
  std::deque<std::unique_ptr<GroupTrace>> groups_;
  std::map<uint64_t, std::string> errors_;
};

// The op this thread is executing now waits on `ranks` (group ranks): shown
// as awaited_ranks in a dump taken while it waits. Cheap; call it from wait
// loops' slow path.
void note_awaited(const std::vector<int>& ranks);

// A wait loop read the clock (steady_clock nanoseconds). An op whose waits
// all report their reads, the last one as each wait ends
// (Work::waits_report_clock), is stamped complete with the last one, or
// its creation time if it never waited long enough to read it,
// rather than with a clock read of its own (4-5 ns per op here, a third of
// recording's cost, with timing off).
void note_wait_clock(int64_t steady_ns);

const ThreadTag& this_thread_tag();

// Clock offset to the store host, once measured (dump.cc writes it).
extern std::atomic<int64_t> g_clock_offset_ns;
extern std::atomic<bool> g_clock_offset_known;

// Dumps (dump.cc / service.cc).
std::string render_json(const std::string& reason, const std::string& detail);
std::string dump_path();
// Writes a dump (on the service thread); waits for it up to the configured
// dump timeout when `wait`. Returns the path.
std::string dump_now(const std::string& reason, const std::string& detail, bool wait = true);
void start_service();
void wake();  // the service thread: a request is pending

}  // namespace sinew::dist::fr
