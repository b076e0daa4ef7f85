// The tuning cache file: reading it without trusting it, and saving it
// atomically while other processes may be saving too.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "kernels/autotune/key.h"
#include "sinew/kernels/candidate.h"

namespace sinew::kernels::tune {

// One usable entry: the pick and its time.
struct CachedPick {
  const Candidate* candidate = nullptr;
  EpilogueMode mode = EpilogueMode::kAuto;
  double us = 0;
};

// A file entry's fields for a pick recorded under `key` with `epilogue_key`.
nlohmann::json make_entry(const PackedKey& key, const std::string& epilogue_key, const CachedPick& pick);

// What reading a cache file found.
struct FileContents {
  bool exists = false;
  // Unparseable, not a tuning cache, or another format version: nothing in
  // it may be used and the next save replaces it.
  bool bad = false;
  std::string problem;        // why it is bad, for the warning
  nlohmann::json entries = nlohmann::json::object();  // well-formed entries, any build's
  int malformed = 0;          // entries dropped as malformed
};
FileContents read_cache_file(const std::string& path);

// An entry of this build (ISA, library version, candidate set) with its
// key, or nullopt when it belongs to another build. Sets *malformed when a
// well-formed entry of this build is inconsistent (its key does not match
// its fields, or its candidate does not exist).
std::optional<std::pair<PackedKey, CachedPick>> usable_entry(const std::string& key, const nlohmann::json& e,
                                                             bool* malformed);

// Under an exclusive lock on `path`.lock (waiting at most 10 s), merges
// `recorded` over the entries in the file (none when the file is bad, and
// never this build's inconsistent ones), writes a temporary file and renames it over `path`. Returns what
// the file held before the merge.
FileContents merge_into_cache_file(const std::string& path, const nlohmann::json& recorded);

}  // namespace sinew::kernels::tune
