// `sinew fr`: the flight-recorder dump model and the loader that finds dumps
// among arbitrary files. docs/flight_recorder.md is the format's contract.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace sinew::cli::fr {

struct Frame {
  std::string name, filename;
  int64_t line = 0;
};

using Sizes = std::vector<std::vector<int64_t>>;

struct Entry {
  int64_t record_id = 0;
  std::string pg_id;
  std::string pg_name, pg_desc;
  int64_t collective_seq_id = 0;
  int64_t p2p_seq_id = 0;
  int64_t op_id = 0;
  std::string profiling_name;  // "sinew:allreduce"
  std::string op;              // "allreduce": the name after the backend prefix
  std::optional<int64_t> time_created_ns, time_started_ns, time_completed_ns;
  std::optional<double> duration_ms;
  Sizes input_sizes, output_sizes;  // the recorder may keep only the first few shapes
  int64_t input_count = 0, output_count = 0;  // tensors in the op ("input_count"; else as recorded)
  std::vector<std::string> input_dtypes, output_dtypes;
  std::string state;  // scheduled | started | completed
  bool retired = false;
  std::optional<int64_t> timeout_ms;
  bool is_p2p = false;
  std::string thread_id, thread_name;
  std::vector<Frame> frames;
  std::optional<int64_t> epoch;
  std::optional<std::string> event;  // create | split | reconfigure | abort | revoke
  std::vector<int> awaited_ranks;    // group ranks
  std::optional<std::string> error;
  std::optional<int> peer;  // group rank, point-to-point only

  bool completed() const { return state == "completed"; }
  bool is_operation() const { return !event.has_value(); }
};

struct GroupConfig {
  std::string name, desc, backend;
  int64_t epoch = 0;
  std::vector<int> ranks;  // job ranks, indexed by group rank (empty: not recorded)
  int rank = -1;           // this process's group rank
  int size = 0;
};

// Absent fields read as 0, as a recorder that never counted reads.
struct GroupStatus {
  int64_t last_enqueued_collective = 0, last_started_collective = 0, last_completed_collective = 0;
  int64_t last_enqueued_p2p = 0, last_started_p2p = 0, last_completed_p2p = 0;
  int64_t dropped = 0, last_dropped_collective = 0, last_dropped_p2p = 0;
};

struct Dump {
  std::string file;
  int rank = -1;
  int world_size = 0;
  std::string job_id, host, version, dump_reason, dump_detail;
  int64_t pid = 0, attempt = 0;
  int64_t dump_time_ns = 0;
  std::optional<int64_t> clock_offset_ns;
  std::map<std::string, GroupConfig> pg_config;
  std::map<std::string, GroupStatus> pg_status;
  std::vector<Entry> entries;  // in record order
  // Salvaged from a file cut off (or corrupted) at this byte: the newest
  // entries may be gone.
  std::optional<size_t> truncated_at;
  size_t entries_skipped = 0;  // entries without the fields matching needs
  nlohmann::json raw;          // the document as read, for export

  const GroupStatus* status(const std::string& pg_id) const {
    auto it = pg_status.find(pg_id);
    return it == pg_status.end() ? nullptr : &it->second;
  }
};

struct LoadResult {
  std::vector<Dump> dumps;            // one per rank, by ascending rank
  std::vector<std::string> warnings;  // skipped files, duplicates, salvaged dumps
  size_t files_seen = 0;
};

// Reads every regular file under `paths` (directories recursively; files as
// given) whose name starts with `name_prefix`, keeping those that are sinew
// flight-recorder dumps. Never throws for a bad file: it becomes a warning.
LoadResult load_dumps(const std::vector<std::string>& paths, const std::string& name_prefix);

// Parses one document; nullopt (and `why`) when it is not a sinew dump.
std::optional<Dump> parse_dump(const std::string& text, const std::string& file, std::string& why);

// "sinew:allreduce" -> "allreduce"; "nccl:send 0->1" -> "send".
std::string op_of(const std::string& profiling_name);

// Elements in all `count` tensors of which `sizes` recorded the first few:
// exact when all were recorded, extrapolated when the recorded ones share a
// shape, unknown otherwise.
std::optional<int64_t> elements(const Sizes& sizes, int64_t count);
// The host's name without the identity suffix the recorder may add
// ("vm|<boot id>|<namespace>" -> "vm").
std::string host_name(const std::string& host);

// "[[1024], [1024]]", with "+N more" for tensors not recorded.
std::string shapes_text(const Sizes& sizes, int64_t count);

}  // namespace sinew::cli::fr
