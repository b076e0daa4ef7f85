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
#include "../process_identity.h"

namespace sinew::dist::fr {
namespace {

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
    case State::kScheduled: return "scheduled";
    case State::kStarted: return "started";
    case State::kCompleted: return "completed";
  }
  return "?";
}

std::string env_or(const char* a, const char* b, const char* fallback) {
  if (const char* v = std::getenv(a)) return v;
  if (b)
    if (const char* v = std::getenv(b)) return v;
  return fallback;
}

int job_rank() {
  if (const char* v = std::getenv("RANK")) return std::atoi(v);
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
    out.push_back({{"name", name}, {"filename", file}, {"line", 0}});
  }
  return out;
}

}  // namespace

std::string dump_path() { return Recorder::get().config().prefix + std::to_string(job_rank()); }

std::string render_json(const std::string& reason, const std::string& detail) {
  Recorder& r = Recorder::get();
  const int64_t steady_now = steady_ns();
  const int64_t system_now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const int64_t to_system = system_now - steady_now;
  auto wall = [&](int64_t steady) -> nlohmann::ordered_json {
    if (steady == 0) return nullptr;
    return steady + to_system;
  };

  nlohmann::ordered_json j;
  j["format"] = "sinew-fr";
  j["format_version"] = 1;
  j["version"] = "2.10";
  j["job_id"] = env_or("TORCHELASTIC_RUN_ID", "SINEW_RUN_ID", "");
  j["host"] = host_identity();
  j["pid"] = static_cast<int64_t>(::getpid());
  j["rank"] = job_rank();
  j["world_size"] = std::atoi(env_or("WORLD_SIZE", nullptr, "0").c_str());
  j["attempt"] = std::atoi(env_or("SINEW_RUN_ATTEMPT", "TORCHELASTIC_RESTART_COUNT", "0").c_str());
  j["dump_reason"] = reason;
  j["dump_detail"] = detail;
  j["dump_time_ns"] = system_now;
  j["clock"] = {{"steady_ns", steady_now},
                {"system_ns", system_now},
                {"offset_ns", g_clock_offset_known.load() ? nlohmann::ordered_json(g_clock_offset_ns.load())
                                                          : nlohmann::ordered_json(nullptr)}};
  j["buffer_size"] = r.config().capacity;

  // What each group's ring no longer holds, worked out here rather than
  // counted on the op path (that read the overwritten slot: a cache miss per
  // op). Group sequence numbers count from 1, so a group's ops are
  // 1..last_enqueued, and those older than its oldest record still in the
  // ring were dropped. The progress counters are read before the ring, so
  // ops recorded during the dump do not read as dropped.
  struct Kept {
    uint64_t enq_coll, enq_p2p, coll = 0, p2p = 0, min_coll = 0, min_p2p = 0;
  };
  std::map<const GroupTrace*, Kept> kept;
  const auto groups = r.groups();
  for (const GroupTrace* g : groups) kept[g] = {g->last_enqueued_coll.load(), g->last_enqueued_p2p.load()};
  const std::vector<EntryCopy> snapshot = r.snapshot();
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
  auto config = nlohmann::ordered_json::object();
  auto status = nlohmann::ordered_json::object();
  for (const GroupTrace* g : groups) {
    const Kept& k = kept[g];
    const uint64_t dropped_coll = k.enq_coll > k.coll ? k.enq_coll - k.coll : 0;
    const uint64_t dropped_p2p = k.enq_p2p > k.p2p ? k.enq_p2p - k.p2p : 0;
    const uint64_t last_dropped_coll = dropped_coll == 0 ? 0 : k.coll == 0 ? k.enq_coll : k.min_coll - 1;
    const uint64_t last_dropped_p2p = dropped_p2p == 0 ? 0 : k.p2p == 0 ? k.enq_p2p : k.min_p2p - 1;
    const GroupInfo& i = g->info;
    nlohmann::ordered_json c = {{"name", i.name}, {"desc", i.desc}, {"backend", i.backend}, {"epoch", i.epoch},
                        {"rank", i.rank}, {"size", i.size}, {"timeout_ms", i.timeout_ms}};
    if (!i.ranks.empty()) c["ranks"] = i.ranks;
    config[i.pg_id] = c;
    status[i.pg_id] = {{"last_enqueued_collective", g->last_enqueued_coll.load()},
                       {"last_started_collective", g->last_started_coll.load()},
                       {"last_completed_collective", g->last_completed_coll.load()},
                       {"last_enqueued_p2p", g->last_enqueued_p2p.load()},
                       {"last_started_p2p", g->last_started_p2p.load()},
                       {"last_completed_p2p", g->last_completed_p2p.load()},
                       {"dropped", dropped_coll + dropped_p2p},
                       {"last_dropped_collective", last_dropped_coll},
                       {"last_dropped_p2p", last_dropped_p2p}};
  }
  j["pg_config"] = std::move(config);
  j["pg_status"] = std::move(status);

  const bool exact = r.clock().exact();
  j["exact_timing"] = exact;
  auto entries = nlohmann::ordered_json::array();
  for (const EntryCopy& e : snapshot) {
    const GroupInfo& gi = e.group->info;
    nlohmann::ordered_json x;
    x["record_id"] = e.id;
    x["pg_id"] = gi.pg_id;
    x["process_group"] = {gi.name, gi.desc};
    x["collective_seq_id"] = e.coll_seq;
    x["p2p_seq_id"] = e.p2p_seq;
    x["op_id"] = e.is_p2p ? e.p2p_seq : e.coll_seq;
    x["profiling_name"] = e.is_event ? std::string(e.op) : std::string(gi.backend) + ":" + e.op;
    x["time_created_ns"] = wall(e.created_ns);
    x["time_discovered_started_ns"] = wall(e.started_ns);
    // Without exact timing the completion time comes from the coarse
    // clock, which can read a little before the (exact) start.
    const int64_t completed = e.completed_ns == 0 ? 0 : std::max(e.completed_ns, e.started_ns);
    x["time_discovered_completed_ns"] = wall(completed);
    // As PyTorch: a duration only with exact timing (TORCH_NCCL_ENABLE_TIMING).
    if (exact && completed != 0 && e.started_ns != 0) x["duration_ms"] = (completed - e.started_ns) / 1e6;
    else x["duration_ms"] = nullptr;
    x["input_sizes"] = sizes(e.in);
    x["input_dtypes"] = dtypes(e.in);
    x["output_sizes"] = sizes(e.out);
    x["output_dtypes"] = dtypes(e.out);
    x["input_count"] = e.in.count;
    x["output_count"] = e.out.count;
    x["state"] = state_name(e.state);
    x["retired"] = e.state == State::kCompleted;
    x["timeout_ms"] = gi.timeout_ms;
    x["is_p2p"] = e.is_p2p;
    x["thread_id"] = std::to_string(e.tid);
    x["thread_name"] = e.thread_name;
    x["frames"] = frames(e.frames);
    x["epoch"] = gi.epoch;
    x["event"] = e.is_event ? nlohmann::ordered_json(std::string(e.op).substr(6)) : nlohmann::ordered_json(nullptr);
    x["awaited_ranks"] = e.awaited;
    x["error"] = e.error.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(e.error);
    x["peer"] = e.peer >= 0 ? nlohmann::ordered_json(e.peer) : nlohmann::ordered_json(nullptr);
    entries.push_back(std::move(x));
  }
  j["entries"] = std::move(entries);
  return j.dump();
}

}  // namespace sinew::dist::fr
