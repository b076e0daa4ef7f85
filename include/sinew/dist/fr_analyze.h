// The Flight Recorder analyzer: reads the dumps every rank wrote
// (docs/flight_recorder.md), matches each operation across ranks, names the
// culprit of a hang or desync, and renders the result as text, JSON, a
// Chrome / Perfetto timeline or the pickles PyTorch's torchfrtrace reads.
// `sinew fr` is a thin command line over this library (sinew::fr_analyze);
// nothing here needs a running job or a process group.
//
//   auto loaded = load_dumps({"fr-dumps/"});
//   auto analysis = analyze(loaded.dumps);
//   Report report = make_report(analysis, {});
//   std::cout << render_text(report, loaded, analysis, {});
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "sinew/dist/fr_schema.h"

namespace sinew::dist::fr {

// --- the dumps ---------------------------------------------------------------

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

  bool completed() const { return state == schema::kStateCompleted; }
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
// flight-recorder dumps. A file that is no dump, or a cut-off one, becomes a
// warning; a dump of a format_version this reader does not support throws
// InvalidArgument naming the file, the version and the supported ones (its
// entries cannot be trusted to mean what this reader thinks).
LoadResult load_dumps(const std::vector<std::string>& paths, const std::string& name_prefix = "");

// Parses one document; nullopt (and `why`) when it is not a sinew dump.
// Throws InvalidArgument for an unsupported format_version, as load_dumps.
std::optional<Dump> parse_dump(const std::string& text, const std::string& file, std::string& why);

// "sinew:allreduce" -> "allreduce"; "nccl:send 0->1" -> "send".
std::string op_of(const std::string& profiling_name);

// Elements in all `count` tensors of which `sizes` recorded the first few:
// exact when all were recorded, extrapolated when the recorded ones share a
// shape, unknown otherwise.
std::optional<int64_t> elements(const Sizes& sizes, int64_t count);
// The host's name without the identity suffix the recorder adds
// ("vm|<boot id>|<namespace>" -> "vm").
std::string bare_host(const std::string& host);

// "[[1024], [1024]]", with "+N more" for tensors not recorded.
std::string shapes_text(const Sizes& sizes, int64_t count);

// --- matching ------------------------------------------------------------------
// Collectives match by (pg_id, collective_seq_id) over the members pg_config
// lists; point-to-point operations pair the k-th send a->b with the k-th
// receive at b from a.

// Why a member has no entry for an operation.
enum class Presence : uint8_t {
  kPresent,
  kMissing,     // its record covers this sequence number and it never joined
  kDropped,     // recorded but overwritten when its ring wrapped
  kUnrecorded,  // its status says it joined, but the entry is not in the dump
  kNoDump,      // no dump from this rank
};

// Ordered from least to most severe; a row's kind is its most severe.
enum class Kind : uint8_t {
  kMatched,
  kUnpaired,    // point-to-point that cannot be paired (ring wrapped, no peer)
  kPending,     // every member joined; none has finished
  kIncomplete,  // members without a dump; the rest agree
  kStateMismatch,
  kFailed,  // finished with an error
  kMissingRanks,
  kDtypeMismatch,
  kSizeMismatch,
  kTypeMismatch,
};
inline constexpr Kind kFirstProblem = Kind::kStateMismatch;
inline constexpr Kind kAllKinds[] = {Kind::kMatched,       Kind::kUnpaired,     Kind::kPending,
                                     Kind::kIncomplete,    Kind::kStateMismatch, Kind::kFailed,
                                     Kind::kMissingRanks,  Kind::kDtypeMismatch, Kind::kSizeMismatch,
                                     Kind::kTypeMismatch};
const char* kind_name(Kind k);
const char* presence_name(Presence p);

struct Cell {
  Presence presence = Presence::kMissing;
  std::vector<const Entry*> entries;  // more than one for coalesced operations
  const Entry* entry() const { return entries.empty() ? nullptr : entries.front(); }
};

struct Row {
  bool p2p = false;
  int64_t seq = 0;         // collective_seq_id; p2p: the pair's 1-based index in its direction
  int src = -1, dst = -1;  // p2p: job ranks
  std::string op;          // what most members ran
  std::map<int, Cell> cells;  // by job rank
  Kind kind = Kind::kMatched;
  std::vector<int> blamed;  // job ranks: never joined, or the odd ones out
  std::string detail;       // why the row is of its kind
  std::optional<int64_t> first_created_ns;

  bool problem() const { return kind >= kFirstProblem; }
  std::string label() const;  // "collective #12 allreduce", "p2p send 0->1 #3"
};

struct Group {
  std::string pg_id, name, desc;
  std::vector<int> ranks;  // job ranks, by group rank
  bool membership_known = true;
  std::vector<Row> rows;  // collectives by sequence number, then point-to-point
};

struct RowRef {
  size_t group = 0, row = 0;
  bool operator==(const RowRef& o) const { return group == o.group && row == o.row; }
};

struct Analysis {
  std::vector<Group> groups;
  std::map<int, const Dump*> dumps;  // by job rank
  std::unordered_map<const Entry*, RowRef> row_of;
  std::vector<std::string> notes;  // rings that wrapped, disagreeing configs

  const Row& row(RowRef r) const { return groups[r.group].rows[r.row]; }
};

Analysis analyze(const std::vector<Dump>& dumps);

// --rank and --group: empty means everything.
struct Filter {
  std::vector<int> ranks;
  std::vector<std::string> groups;  // pg_id, group name or description

  bool rank(int r) const;
  bool group(const Group& g) const;
  bool row(const Row& r) const;  // involves a selected rank
};

struct Culprit {
  RowRef at;
  std::vector<RowRef> via;     // rows whose missing ranks were blocked further along, in order
  std::vector<RowRef> others;  // the first problem of every other group
  bool cycle = false;          // the blocked ranks wait on each other
};

// The first operation (lowest sequence number, per group) not every member
// joined, following ranks blocked in another group to where they wait;
// failing that the first mismatch, failed or half-finished operation.
std::optional<Culprit> find_culprit(const Analysis& a, const Filter& f);

// The rank's last completed operation in the group, if still in its ring.
const Entry* last_completed(const Dump& d, const std::string& pg_id);
// The oldest operation the rank has not finished: where it is blocked.
const Entry* blocked_at(const Dump& d);

// Throws InvalidArgument when `f` names groups and none of them is in `a`:
// a --group typo, not a clean bill of health.
void check_filter(const Analysis& a, const Filter& f);

// --- the report ------------------------------------------------------------

// What `sinew fr analyze` reports, as data; the renderers below turn it
// (with the analysis it came from) into text or JSON.
struct Report {
  std::optional<Culprit> culprit;
  std::string headline;  // the first line: names the culprit, or says there is none
  // 0 when every selected operation matched, 1 when a culprit was found.
  int exit_code() const { return culprit ? 1 : 0; }
};

Report make_report(const Analysis& a, const Filter& f);

// The headline, then the culprit's details, the dumps, groups, problems,
// group events and notes.
std::string render_text(const Report& r, const LoadResult& loaded, const Analysis& a, const Filter& f);
// The same content as one JSON object (culprit, dumps, groups, problems, notes, warnings).
nlohmann::json render_json(const Report& r, const LoadResult& loaded, const Analysis& a, const Filter& f);
// The side-by-side per-rank table (`sinew fr analyze -j`).
std::string render_table(const Analysis& a, const Filter& f);

// Wall-clock nanoseconds as UTC, "2024-11-29T20:12:25.678901Z".
std::string format_time(std::optional<int64_t> ns);

// --- timeline ------------------------------------------------------------------

// Every rank's operations as a Chrome / Perfetto trace (ui.perfetto.dev,
// chrome://tracing): one process per rank ("rank R (host)"), one thread
// track per group, each operation a complete event from its start (or
// creation) to its completion (or the dump, when unfinished), flow arrows
// from every rank's copy of an operation to the rank that started it last,
// and group events as instants. Times are microseconds since the earliest
// operation, each rank's clock corrected by its clock.offset_ns.
nlohmann::json make_timeline(const Analysis& a, const Filter& f);

// --- export for torchfrtrace ---------------------------------------------------
// Dumps in the layout PyTorch's torchfrtrace (torch/distributed/flight_recorder)
// loads, so users keep the analyzer they know.

struct ExportResult {
  std::vector<std::string> files;     // written
  std::vector<std::string> warnings;  // what torchfrtrace cannot take and was left out
};

// The pickled dict torchfrtrace reads for one rank.
std::string torch_pickle(const Dump& d, const Analysis& a, const std::string& version,
                         std::vector<std::string>& warnings);

// Writes <outdir>/<prefix><rank> for every dump (torchfrtrace takes the rank
// from the name after the common prefix).
ExportResult export_pickles(const std::vector<Dump>& dumps, const Analysis& a, const std::string& outdir,
                            const std::string& prefix = "sinew_fr_trace_rank_");

}  // namespace sinew::dist::fr
