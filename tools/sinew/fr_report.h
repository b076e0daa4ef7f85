// `sinew fr analyze` output: the culprit headline and report, or (-j) the
// side-by-side per-rank table.
#pragma once

#include <cstdio>
#include <optional>
#include <string>

#include "tools/sinew/fr_load.h"
#include "tools/sinew/fr_match.h"

namespace sinew::cli::fr {

// Both return the exit code: 0 when every selected operation matched, 1 when
// a culprit was found.
int print_report(const LoadResult& loaded, const Analysis& a, const Filter& f, std::FILE* out);
int print_table(const Analysis& a, const Filter& f, std::FILE* out);

// Wall-clock nanoseconds as UTC, "2024-11-29T20:12:25.678901Z".
std::string format_time(std::optional<int64_t> ns);

}  // namespace sinew::cli::fr
