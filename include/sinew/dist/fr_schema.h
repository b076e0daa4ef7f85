// The Flight Recorder dump's schema, in one place for the writer
// (src/dist/fr/dump.cc) and the reader (the fr_analyze library):
// the format's name and version, and every field name. docs/flight_recorder.md
// describes what the fields mean.
//
// Changing what a field means or removing one is a new format version; the
// reader refuses versions it does not list in kSupportedFormatVersions.
// Adding a field is not: readers ignore fields they do not know.
#pragma once

#include <array>

namespace sinew::dist::fr::schema {

inline constexpr char kFormatName[] = "sinew-fr";
inline constexpr int kFormatVersion = 1;  // what this sinew writes
inline constexpr std::array<int, 1> kSupportedFormatVersions = {1};  // what this sinew reads
// The PyTorch flight-recorder version whose layout the entries follow.
inline constexpr char kTorchVersion[] = "2.10";

// "state" values.
inline constexpr char kStateScheduled[] = "scheduled";
inline constexpr char kStateStarted[] = "started";
inline constexpr char kStateCompleted[] = "completed";

namespace field {

// Top level.
inline constexpr char kFormat[] = "format";  // "sinew-fr" (kFormatName)
inline constexpr char kFormatVersion[] = "format_version";  // kFormatVersion
inline constexpr char kVersion[] = "version";  // PyTorch dump version mirrored (kTorchVersion)
inline constexpr char kJobId[] = "job_id";
inline constexpr char kHost[] = "host";  // "<hostname>|<boot id>|<pid namespace>"
inline constexpr char kPid[] = "pid";
inline constexpr char kRank[] = "rank";  // job rank
inline constexpr char kWorldSize[] = "world_size";
inline constexpr char kAttempt[] = "attempt";  // restart count
inline constexpr char kDumpReason[] = "dump_reason";
inline constexpr char kDumpDetail[] = "dump_detail";
inline constexpr char kDumpTimeNs[] = "dump_time_ns";  // wall clock
inline constexpr char kClock[] = "clock";  // {steady_ns, system_ns, offset_ns}
inline constexpr char kBufferSize[] = "buffer_size";  // ring capacity
inline constexpr char kPgConfig[] = "pg_config";  // {pg_id: group config}
inline constexpr char kPgStatus[] = "pg_status";  // {pg_id: group status}
inline constexpr char kExactTiming[] = "exact_timing";
inline constexpr char kEntries[] = "entries";  // in record order

// "clock".
inline constexpr char kSteadyNs[] = "steady_ns";
inline constexpr char kSystemNs[] = "system_ns";
inline constexpr char kOffsetNs[] = "offset_ns";  // to the job reference clock; null: not measured

// Each "pg_config" value (also "rank": the group rank, and "epoch").
inline constexpr char kName[] = "name";
inline constexpr char kDesc[] = "desc";
inline constexpr char kBackend[] = "backend";
inline constexpr char kEpoch[] = "epoch";
inline constexpr char kRanks[] = "ranks";  // job ranks by group rank
inline constexpr char kSize[] = "size";
inline constexpr char kTimeoutMs[] = "timeout_ms";

// Each "pg_status" value (sequence numbers; absent reads as 0).
inline constexpr char kLastEnqueuedCollective[] = "last_enqueued_collective";
inline constexpr char kLastStartedCollective[] = "last_started_collective";
inline constexpr char kLastCompletedCollective[] = "last_completed_collective";
inline constexpr char kLastEnqueuedP2p[] = "last_enqueued_p2p";
inline constexpr char kLastStartedP2p[] = "last_started_p2p";
inline constexpr char kLastCompletedP2p[] = "last_completed_p2p";
inline constexpr char kDropped[] = "dropped";
inline constexpr char kLastDroppedCollective[] = "last_dropped_collective";
inline constexpr char kLastDroppedP2p[] = "last_dropped_p2p";

// Each entry (also "epoch", "timeout_ms", "name" in frames).
inline constexpr char kRecordId[] = "record_id";
inline constexpr char kPgId[] = "pg_id";
inline constexpr char kProcessGroup[] = "process_group";  // [name, desc]
inline constexpr char kCollectiveSeqId[] = "collective_seq_id";
inline constexpr char kP2pSeqId[] = "p2p_seq_id";
inline constexpr char kOpId[] = "op_id";
inline constexpr char kProfilingName[] = "profiling_name";  // "<backend>:<op>"
inline constexpr char kTimeCreatedNs[] = "time_created_ns";
inline constexpr char kTimeDiscoveredStartedNs[] = "time_discovered_started_ns";
inline constexpr char kTimeDiscoveredCompletedNs[] = "time_discovered_completed_ns";
inline constexpr char kDurationMs[] = "duration_ms";  // exact timing only
inline constexpr char kInputSizes[] = "input_sizes";  // the first few shapes
inline constexpr char kInputDtypes[] = "input_dtypes";
inline constexpr char kOutputSizes[] = "output_sizes";
inline constexpr char kOutputDtypes[] = "output_dtypes";
inline constexpr char kInputCount[] = "input_count";  // tensors in the op
inline constexpr char kOutputCount[] = "output_count";
inline constexpr char kState[] = "state";  // kStateScheduled / kStateStarted / kStateCompleted
inline constexpr char kRetired[] = "retired";
inline constexpr char kIsP2p[] = "is_p2p";
inline constexpr char kThreadId[] = "thread_id";
inline constexpr char kThreadName[] = "thread_name";
inline constexpr char kFrames[] = "frames";  // [{name, filename, line}]
inline constexpr char kFilename[] = "filename";
inline constexpr char kLine[] = "line";
inline constexpr char kEvent[] = "event";  // null for operations; create | split | reconfigure | abort | revoke
inline constexpr char kAwaitedRanks[] = "awaited_ranks";  // group ranks
inline constexpr char kError[] = "error";
inline constexpr char kPeer[] = "peer";  // group rank, point-to-point only

}  // namespace field
}  // namespace sinew::dist::fr::schema
