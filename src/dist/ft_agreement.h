// Agreement on the failed ranks of a group, through the job store (hosted by
// the launcher, so it outlives any rank). Shared by the backends that can
// reconfigure. Internal to dist.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "sinew/core/deadline.h"
#include "sinew/dist/store.h"

namespace sinew::dist {

std::string encode_rank_set(const std::set<int>& s);        // "[1,3]"
std::set<int> decode_rank_set(const std::string& text);     // IoError if corrupt
// Merges `add` into the set stored at `key` (compare_set until it holds).
void merge_rank_set(Store& store, const std::string& key, const std::set<int>& add);

// The group's newest epoch whose members all rendezvoused, in its root
// namespace (written by that epoch's first rank before it drops the keys of
// the epoch two back).
inline constexpr const char* kCurrentEpochKey = "current_epoch";

struct AgreementParty {
  Store& store;                        // the group's root namespace
  std::string group;                   // for messages
  uint64_t epoch;
  int rank;
  int size;
  std::function<bool(int)> seen_dead;  // local evidence that a rank died (may be empty)
};

// Survivors merge their failed sets into one record, then each acks the set
// it ended with. A survivor returns once every rank outside its set acked
// exactly that set. A rank that dies after acking leaves its ack behind, so
// all survivors still return the same set; one that dies before acking is
// seen dead (or never acks within SINEW_FT_AGREE_ACK_TIMEOUT_MS) and joins
// the set, which makes everyone go round again. Throws PeerLostError if this
// rank itself was declared failed, TimeoutError at the deadline.
std::vector<int> agree_on_failed_ranks(const AgreementParty& party, std::set<int> failed, Deadline deadline);

}  // namespace sinew::dist
