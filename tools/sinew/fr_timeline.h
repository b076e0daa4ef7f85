// `sinew fr timeline`: every rank's operations as a Chrome / Perfetto trace
// (ui.perfetto.dev, chrome://tracing).
#pragma once

#include <nlohmann/json.hpp>

#include "tools/sinew/fr_match.h"

namespace sinew::cli::fr {

// One process per rank ("rank R (host)"), one thread track per group, each
// operation a complete event from its start (or creation) to its completion
// (or the dump, when unfinished), flow arrows from every rank's copy of an
// operation to the rank that started it last, and group events as instants.
// Times are microseconds since the earliest operation, each rank's clock
// corrected by its clock.offset_ns.
nlohmann::json make_timeline(const Analysis& a, const Filter& f);

}  // namespace sinew::cli::fr
