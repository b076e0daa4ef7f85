#include "ft_agreement.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <thread>

#include "sinew/core/env.h"
#include "sinew/core/error.h"
#include "sinew/core/log.h"

namespace sinew::dist {
namespace {
const EnvParam<int64_t> kAckTimeoutMs{"SINEW_FT_AGREE_ACK_TIMEOUT_MS", 5000,
                                      "agreement: a survivor that neither acks nor is seen dead this long is failed"};
}  // namespace

std::string encode_rank_set(const std::set<int>& s) {
  return fmt::format("[{}]", fmt::join(s, ","));
}

std::set<int> decode_rank_set(const std::string& text) {
  std::set<int> out;
  if (text.size() < 2 || text.front() != '[' || text.back() != ']')
    throw IoError(fmt::format("corrupt failed-set record in the store: '{}'", text));
  std::string body = text.substr(1, text.size() - 2);
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find(',', pos);
    if (end == std::string::npos) end = body.size();
    out.insert(std::stoi(body.substr(pos, end - pos)));
    pos = end + 1;
  }
  return out;
}

void merge_rank_set(Store& store, const std::string& key, const std::set<int>& add) {
  Bytes cur = store.compare_set(key, {}, to_bytes(encode_rank_set(add)));
  for (;;) {
    std::set<int> merged = decode_rank_set(to_string(cur));
    merged.insert(add.begin(), add.end());
    if (to_string(cur) == encode_rank_set(merged)) return;
    cur = store.compare_set(key, cur, to_bytes(encode_rank_set(merged)));
  }
}

std::vector<int> agree_on_failed_ranks(const AgreementParty& p, std::set<int> failed, Deadline deadline) {
  const std::string base = fmt::format("ft/e{}", p.epoch);
  const std::string key = base + "/failed";
  // Written once (compare_set), by the first survivor that sees every ack
  // match: a survivor that starts late, or sees a later death, returns this
  // same set; deaths after the decision are the next epoch's to handle.
  const std::string decided_key = base + "/decided";
  auto ack_key = [&](int r) { return fmt::format("{}/ack/{}", base, r); };
  auto declared_failed = [&](const std::set<int>& s) {
    return PeerLostError(fmt::format("rank {} was declared failed by its peers in group '{}' epoch {}", p.rank,
                                     p.group, p.epoch),
                         {s.begin(), s.end()});
  };
  auto settle = [&](const Bytes& decided) {
    std::set<int> s = decode_rank_set(to_string(decided));
    if (s.count(p.rank)) throw declared_failed(s);
    return std::vector<int>(s.begin(), s.end());
  };
  std::map<int, Clock::time_point> waiting_since;
  // A rank left behind (stopped while the others agreed without it, twice
  // reconfigured since) finds its epoch's records dropped: it must not
  // decide alone, it was declared failed.
  if (p.store.check({kCurrentEpochKey})) {
    const uint64_t current = std::stoull(p.store.get_string(kCurrentEpochKey));
    if (current >= p.epoch + 2)
      throw PeerLostError(fmt::format("rank {} of group '{}' epoch {} was left behind: the group is at epoch {} "
                                      "without it (declared failed by its peers)",
                                      p.rank, p.group, p.epoch, current),
                          {p.rank});
  }
  for (;;) {
    if (deadline.expired())
      throw TimeoutError(fmt::format("agreement on failed ranks in group '{}' epoch {} did not finish; rank {} "
                                     "had {}", p.group, p.epoch, p.rank, encode_rank_set(failed)));
    if (p.store.check({decided_key})) return settle(p.store.get(decided_key));
    // Merge mine into the shared record until it contains it.
    merge_rank_set(p.store, key, failed);
    {
      std::set<int> record = decode_rank_set(p.store.get_string(key));
      failed.insert(record.begin(), record.end());
    }
    if (failed.count(p.rank)) {
      if (p.store.check({decided_key})) return settle(p.store.get(decided_key));
      throw declared_failed(failed);
    }
    p.store.set(ack_key(p.rank), encode_rank_set(failed));
    // Wait for every survivor's ack.
    bool changed = false;
    for (int r = 0; r < p.size && !changed; ++r) {
      if (failed.count(r)) continue;
      for (;;) {
        if (p.store.check({ack_key(r)})) {
          std::set<int> theirs = decode_rank_set(p.store.get_string(ack_key(r)));
          if (theirs != failed) {
            // They saw more (or less, then they will catch up): take the union and go again.
            failed.insert(theirs.begin(), theirs.end());
            std::set<int> record = decode_rank_set(p.store.get_string(key));
            failed.insert(record.begin(), record.end());
            changed = true;
          }
          break;
        }
        auto now = Clock::now();
        auto [it, fresh] = waiting_since.emplace(r, now);
        const bool dead = p.seen_dead && p.seen_dead(r);
        if (dead || now - it->second > Millis(kAckTimeoutMs.get())) {
          SINEW_WARN(kFt, "agreement in group '{}' epoch {}: rank {} {}; counting it as failed", p.group, p.epoch, r,
                     dead ? "died" : "never acked");
          failed.insert(r);
          changed = true;
          break;
        }
        if (deadline.expired() || p.store.check({decided_key})) {
          changed = true;  // the top of the loop returns the decision
          break;
        }
        std::this_thread::sleep_for(Millis(1));
      }
    }
    if (!changed) {
      // All acks matched. Re-read the record: a newer, larger set means
      // someone else is still deciding; they will see our ack differ.
      std::set<int> record = decode_rank_set(p.store.get_string(key));
      if (record == failed) return settle(p.store.compare_set(decided_key, {}, to_bytes(encode_rank_set(failed))));
      failed.insert(record.begin(), record.end());
    }
  }
}


}  // namespace sinew::dist
