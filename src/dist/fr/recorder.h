// The Flight Recorder's ring (internal to dist). Writers claim a slot with
// one atomic increment and fill it under that slot's own spin lock (never
// contended on the op path: only a dump or a ring lapping itself touches the
// same slot), so recording takes no shared lock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

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
  std::atomic<uint64_t> dropped{0}, last_dropped_coll{0}, last_dropped_p2p{0};
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

struct Slot {
  std::atomic<bool> busy{false};     // the slot's lock
  std::atomic<uint64_t> version{0};  // 2*id+1 while written, 2*id+2 once published
  void lock() {
    while (busy.exchange(true, std::memory_order_acquire))
      while (busy.load(std::memory_order_relaxed)) {
      }
  }
  void unlock() { busy.store(false, std::memory_order_release); }
  uint64_t id = 0;
  GroupTrace* group = nullptr;
  const char* op = nullptr;
  bool is_event = false;
  bool is_p2p = false;
  uint64_t coll_seq = 0, p2p_seq = 0;
  int32_t peer = -1;
  int64_t created_ns = 0;
  std::atomic<int64_t> started_ns{0}, completed_ns{0};
  std::atomic<State> state{State::kScheduled};
  std::atomic<bool> failed{false};
  int32_t tid = 0;
  const char* thread_name = "";
  TensorList in, out;
  static constexpr int kMaxFrames = 24;
  uint8_t nframes = 0;
  void* frames[kMaxFrames];
  static constexpr int kMaxAwaited = 8;
  std::atomic<uint8_t> nawaited{0};
  int32_t awaited[kMaxAwaited];
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
  uint64_t begin(GroupTrace* g, const char* op, bool is_event, bool is_p2p, uint64_t seq, int peer,
                 int64_t created_ns);  // returns the record id; the slot is published by publish()
  Slot& slot(uint64_t id) { return slots_[id % slots_.size()]; }
  // Ends what begin() started (begin() returns with the slot locked).
  void publish(uint64_t id) {
    Slot& s = slot(id);
    s.version.store(2 * id + 2, std::memory_order_release);
    s.unlock();
  }
  // The slot for `id` when it still holds that record.
  Slot* live(uint64_t id) {
    Slot& s = slot(id);
    return s.version.load(std::memory_order_acquire) == 2 * id + 2 ? &s : nullptr;
  }
  void set_error(uint64_t id, std::string message);
  void record_event(GroupTrace* g, GroupEvent e, const std::string& detail);

  std::vector<EntryCopy> snapshot();
  std::vector<const GroupTrace*> groups();
  void reset();

 private:
  Recorder();
  Config config_;
  std::vector<Slot> slots_;
  std::atomic<uint64_t> next_id_{0};
  std::mutex mu_;  // groups_ and errors_
  std::deque<std::unique_ptr<GroupTrace>> groups_;
  std::map<uint64_t, std::string> errors_;
};

// The op this thread is executing now waits on `ranks` (group ranks): shown
// as awaited_ranks in a dump taken while it waits. Cheap; call it from wait
// loops' slow path.
void note_awaited(const std::vector<int>& ranks);

// Thread id and name of the calling thread, cached per thread.
struct ThreadTag {
  int32_t tid;
  const char* name;
};
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
