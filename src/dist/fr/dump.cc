// The dump file's JSON (docs/flight_recorder.md).
#include <cxxabi.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>

#include <nlohmann/json.hpp>

#include "recorder.h"
#include "sinew/dist/fr_schema.h"
#include "sinew/dist/launch_protocol.h"
#include "../process_identity.h"

namespace sinew::dist::fr {
namespace {

namespace field = schema::field;

const char* torch_dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "Float";
    case DType::kF64: return "Double";
    case DType::kF16: return "Half";
    case DType::kBF16: return "BFloat16";
    case DType::kI8: return "Char";
    case DType::kU8: return "Byte";
    case DType::kI32: return "Int";
    case DType::kI64: return "Long";
    case DType::kBool: return "Bool";
    case DType::kF8E4M3FN: return "Float8_e4m3fn";
    case DType::kF8E5M2: return "Float8_e5m2";
  }
  return "Unknown";
}

const char* state_name(State s) {
  switch (s) {
    case State::kScheduled: return schema::kStateScheduled;
    case State::kStarted: return schema::kStateStarted;
    case State::kCompleted: return schema::kStateCompleted;
  }
  return "?";
}

// The launcher's value of `name`, else of `fallback_name` (when given), else
// `fallback`.
std::string env_or(const char* name, const char* fallback_name, const char* fallback) {
  if (auto v = launch::env::read(name)) return *v;
  if (fallback_name)
    if (auto v = launch::env::read(fallback_name)) return *v;
  return fallback;
}

int job_rank() {
  if (auto v = launch::env::read(launch::env::kRank)) return std::atoi(v->c_str());
  for (const GroupTrace* g : Recorder::get().groups())
    if (g->info.epoch == 0 && g->info.ranks.size() == static_cast<size_t>(g->info.size)) return g->info.rank;
  return 0;
}

nlohmann::ordered_json sizes(const TensorList& l) {
  auto out = nlohmann::ordered_json::array();
  const int n = std::min<int>(l.count, TensorList::kMaxShapes);
  for (int i = 0; i < n; ++i) {
    const Shape& s = l.shapes[i];
    auto dims = nlohmann::ordered_json::array();
    if (s.ndim < 0) dims.push_back(s.dims[0]);
    for (int d = 0; d < s.ndim; ++d) dims.push_back(s.dims[d]);
    out.push_back(dims);
  }
  return out;
}

nlohmann::ordered_json dtypes(const TensorList& l) {
  auto out = nlohmann::ordered_json::array();
  const int n = std::min<int>(l.count, TensorList::kMaxShapes);
  for (int i = 0; i < n; ++i) out.push_back(torch_dtype_name(l.dtype));
  return out;
}

nlohmann::ordered_json frames(const std::vector<void*>& pcs) {
  auto out = nlohmann::ordered_json::array();
  for (void* pc : pcs) {
    Dl_info info{};
    std::string name = "??", file = "??";
    if (dladdr(pc, &info)) {
      if (info.dli_fname) file = info.dli_fname;
      if (info.dli_sname) {
        int status = 0;
        char* dem = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
        name = status == 0 && dem ? dem : info.dli_sname;
        std::free(dem);
      }
    }
    out.push_back({{field::kName, name}, {field::kFilename, file}, {field::kLine, 0}});
  }
  return out;
}

// What each group's ring no longer holds, worked out here rather than
// counted on the op path (that read the overwritten slot: a cache miss per
// op). Group sequence numbers count from 1, so a group's ops are
// 1..last_enqueued, and those older than its oldest record still in the
// ring were dropped. The progress counters are read before the ring, so
// ops recorded during the dump do not read as dropped.
struct Kept {
  uint64_t enq_coll, enq_p2p, coll = 0, p2p = 0, min_coll = 0, min_p2p = 0;

  uint64_t dropped_coll() const { return enq_coll > coll ? enq_coll - coll : 0; }
  uint64_t dropped_p2p() const { return enq_p2p > p2p ? enq_p2p - p2p : 0; }
  uint64_t last_dropped_coll() const { return dropped_coll() == 0 ? 0 : coll == 0 ? enq_coll : min_coll - 1; }
  uint64_t last_dropped_p2p() const { return dropped_p2p() == 0 ? 0 : p2p == 0 ? enq_p2p : min_p2p - 1; }
};

void count_kept(std::map<const GroupTrace*, Kept>& kept, const std::vector<EntryCopy>& snapshot) {
  for (const EntryCopy& e : snapshot) {
    auto it = kept.find(e.group);
    if (e.is_event || it == kept.end()) continue;
    Kept& k = it->second;
    const uint64_t seq = e.is_p2p ? e.p2p_seq : e.coll_seq;
    if (seq == 0 || seq > (e.is_p2p ? k.enq_p2p : k.enq_coll)) continue;
    uint64_t& n = e.is_p2p ? k.p2p : k.coll;
    uint64_t& lo = e.is_p2p ? k.min_p2p : k.min_coll;
    ++n;
    if (lo == 0 || seq < lo) lo = seq;
  }
}

nlohmann::ordered_json group_config(const GroupInfo& i) {
  nlohmann::ordered_json c = {{field::kName, i.name},   {field::kDesc, i.desc}, {field::kBackend, i.backend},
                              {field::kEpoch, i.epoch}, {field::kRank, i.rank}, {field::kSize, i.size},
                              {field::kTimeoutMs, i.timeout_ms}};
  if (!i.ranks.empty()) c[field::kRanks] = i.ranks;
  return c;
}

nlohmann::ordered_json group_status(const GroupTrace& g, const Kept& k) {
  return {{field::kLastEnqueuedCollective, g.last_enqueued_coll.load()},
          {field::kLastStartedCollective, g.last_started_coll.load()},
          {field::kLastCompletedCollective, g.last_completed_coll.load()},
          {field::kLastEnqueuedP2p, g.last_enqueued_p2p.load()},
          {field::kLastStartedP2p, g.last_started_p2p.load()},
          {field::kLastCompletedP2p, g.last_completed_p2p.load()},
          {field::kDropped, k.dropped_coll() + k.dropped_p2p()},
          {field::kLastDroppedCollective, k.last_dropped_coll()},
          {field::kLastDroppedP2p, k.last_dropped_p2p()}};
}

// Steady-clock stamps (0: not yet) as wall-clock nanoseconds.
struct WallClock {
  int64_t to_system;
  nlohmann::ordered_json operator()(int64_t steady) const {
    if (steady == 0) return nullptr;
    return steady + to_system;
  }
};

nlohmann::ordered_json entry_json(const EntryCopy& e, bool exact, const WallClock& wall) {
  const GroupInfo& gi = e.group->info;
  auto or_null = [](bool has, auto v) { return has ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr); };
  nlohmann::ordered_json x;
  x[field::kRecordId] = e.id;
  x[field::kPgId] = gi.pg_id;
  x[field::kProcessGroup] = {gi.name, gi.desc};
  x[field::kCollectiveSeqId] = e.coll_seq;
  x[field::kP2pSeqId] = e.p2p_seq;
  x[field::kOpId] = e.is_p2p ? e.p2p_seq : e.coll_seq;
  x[field::kProfilingName] = e.is_event ? std::string(e.op) : std::string(gi.backend) + ":" + e.op;
  x[field::kTimeCreatedNs] = wall(e.created_ns);
  x[field::kTimeDiscoveredStartedNs] = wall(e.started_ns);
  // Without exact timing the completion time comes from the coarse
  // clock, which can read a little before the (exact) start.
  const int64_t completed = e.completed_ns == 0 ? 0 : std::max(e.completed_ns, e.started_ns);
  x[field::kTimeDiscoveredCompletedNs] = wall(completed);
  // As PyTorch: a duration only with exact timing (TORCH_NCCL_ENABLE_TIMING).
  x[field::kDurationMs] = or_null(exact && completed != 0 && e.started_ns != 0, (completed - e.started_ns) / 1e6);
  x[field::kInputSizes] = sizes(e.in);
  x[field::kInputDtypes] = dtypes(e.in);
  x[field::kOutputSizes] = sizes(e.out);
  x[field::kOutputDtypes] = dtypes(e.out);
  x[field::kInputCount] = e.in.count;
  x[field::kOutputCount] = e.out.count;
  x[field::kState] = state_name(e.state);
  x[field::kRetired] = e.state == State::kCompleted;
  x[field::kTimeoutMs] = gi.timeout_ms;
  x[field::kIsP2p] = e.is_p2p;
  x[field::kThreadId] = std::to_string(e.tid);
  x[field::kThreadName] = e.thread_name;
  x[field::kFrames] = frames(e.frames);
  x[field::kEpoch] = gi.epoch;
  x[field::kEvent] = or_null(e.is_event, e.is_event ? std::string(e.op).substr(6) : std::string());
  x[field::kAwaitedRanks] = e.awaited;
  x[field::kError] = or_null(!e.error.empty(), e.error);
  x[field::kPeer] = or_null(e.peer >= 0, e.peer);
  return x;
}

// The top-level fields before the groups and entries.
nlohmann::ordered_json header_json(const std::string& reason, const std::string& detail, int64_t steady_now,
                                   int64_t system_now) {
  nlohmann::ordered_json j;
  j[field::kFormat] = schema::kFormatName;
  j[field::kFormatVersion] = schema::kFormatVersion;
  j[field::kVersion] = schema::kTorchVersion;
  j[field::kJobId] = env_or(launch::env::kRunId, nullptr, "");
  j[field::kHost] = host_identity();
  j[field::kPid] = static_cast<int64_t>(::getpid());
  j[field::kRank] = job_rank();
  j[field::kWorldSize] = std::atoi(env_or(launch::env::kWorldSize, nullptr, "0").c_str());
  j[field::kAttempt] = std::atoi(env_or(launch::env::kRunAttempt, launch::env::kRestartCount, "0").c_str());
  j[field::kDumpReason] = reason;
  j[field::kDumpDetail] = detail;
  j[field::kDumpTimeNs] = system_now;
  j[field::kClock] = {{field::kSteadyNs, steady_now},
                      {field::kSystemNs, system_now},
                      {field::kOffsetNs, g_clock_offset_known.load() ? nlohmann::ordered_json(g_clock_offset_ns.load())
                                                                     : nlohmann::ordered_json(nullptr)}};
  j[field::kBufferSize] = Recorder::get().config().capacity;
  return j;
}

}  // namespace

std::string dump_path() { return Recorder::get().config().prefix + std::to_string(job_rank()); }

std::string render_json(const std::string& reason, const std::string& detail) {
  Recorder& r = Recorder::get();
  const int64_t steady_now = steady_ns();
  const int64_t system_now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  nlohmann::ordered_json j = header_json(reason, detail, steady_now, system_now);

  std::map<const GroupTrace*, Kept> kept;
  const auto groups = r.groups();
  for (const GroupTrace* g : groups) kept[g] = {g->last_enqueued_coll.load(), g->last_enqueued_p2p.load()};
  const std::vector<EntryCopy> snapshot = r.snapshot();
  count_kept(kept, snapshot);
  auto config = nlohmann::ordered_json::object();
  auto status = nlohmann::ordered_json::object();
  for (const GroupTrace* g : groups) {
    config[g->info.pg_id] = group_config(g->info);
    status[g->info.pg_id] = group_status(*g, kept[g]);
  }
  j[field::kPgConfig] = std::move(config);
  j[field::kPgStatus] = std::move(status);

  const bool exact = r.clock().exact();
  j[field::kExactTiming] = exact;
  const WallClock wall{system_now - steady_now};
  auto entries = nlohmann::ordered_json::array();
  for (const EntryCopy& e : snapshot) entries.push_back(entry_json(e, exact, wall));
  j[field::kEntries] = std::move(entries);
  return j.dump();
}

}  // namespace sinew::dist::fr
