// The Flight Recorder: a per-process ring of every process group's recent
// operations and group events, recorded through process-group hooks (so
// every backend is covered) and dumped as one JSON file per rank when
// something goes wrong. Format and settings: docs/flight_recorder.md.
#pragma once

#include <cstddef>
#include <string>

#include "sinew/core/deadline.h"
#include "sinew/dist/store.h"

namespace sinew::dist {

// Writes this process's trace to its dump file (`<prefix><rank>`) and
// returns the path; "" when recording is off. Bounded by
// SINEW_FR_DUMP_TIMEOUT_MS: a dump that takes longer finishes in the
// background and the path is returned anyway.
std::string dump_flight_recorder(const std::string& reason = "api", const std::string& detail = "");

// The dump as JSON text, without writing a file.
std::string flight_recorder_json(const std::string& reason = "api", const std::string& detail = "");

// Ring capacity in entries (0: recording off).
size_t flight_recorder_capacity();

// Every rank's recorder watches `store` for dump requests; a rank that times
// out or sees a peer fail posts one, so every rank dumps. init_process_group
// calls this with the job store.
void watch_flight_recorder_requests(StorePtr store);

// Records this process's clock offset to the job's reference clock (the
// store host's), measured at rendezvous; dumps carry it so timelines of
// several hosts line up.
void set_flight_recorder_clock_offset(int64_t offset_ns);

// Asks every rank watching the job store to dump (what a timing-out rank does).
void request_flight_recorder_dumps(const std::string& reason);

// Pauses (false) or resumes recording at run time; dumps still work. For
// measuring what recording costs (`sinew bench collectives --fr pair`).
void set_flight_recorder_recording(bool on);

// Tests: empties the ring and forgets past dumps (groups stay registered).
void reset_flight_recorder();

}  // namespace sinew::dist
