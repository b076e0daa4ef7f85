// The Flight Recorder's dump as JSON, and one group's op entries in it, for
// the tests that read what was recorded.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "sinew/dist/flight_recorder.h"
#include "sinew/dist/fr_schema.h"

namespace sinew::testing {

inline nlohmann::json fr_dump() { return nlohmann::json::parse(dist::flight_recorder_json("test")); }

// The collective and p2p entries of group `pg_id` (events left out).
inline std::vector<nlohmann::json> fr_entries_of(const nlohmann::json& d, const std::string& pg_id) {
  namespace field = dist::fr::schema::field;
  std::vector<nlohmann::json> out;
  for (const auto& e : d[field::kEntries])
    if (e[field::kPgId] == pg_id && e[field::kEvent].is_null()) out.push_back(e);
  return out;
}

}  // namespace sinew::testing
