// `sinew fr`: matching every rank's record of an operation and naming the
// culprit. Collectives match by (pg_id, collective_seq_id) over the members
// pg_config lists; point-to-point operations pair the k-th send a->b with the
// k-th receive at b from a.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tools/sinew/fr_load.h"

namespace sinew::cli::fr {

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

}  // namespace sinew::cli::fr
