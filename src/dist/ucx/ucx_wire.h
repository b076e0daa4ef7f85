// What the UCX transport puts on the wire and in the store.
//
// Every message is a 16-byte header {user tag, payload bytes} followed by
// the payload, sent as one UCX message. The 64-bit UCX tag is
// [epoch: 8 bits | source rank: 20 bits | per-pair sequence number: 36 bits],
// so the k-th receive posted for a peer takes exactly the k-th message that
// peer sent us: ordering and matching are by position, never by the user's
// tag. The epoch bits keep an old epoch's messages (sent before a revoke,
// never received) from matching the next epoch's receives.
//
// At the rendezvous each rank publishes a card: its worker address and the
// peer workers it still holds a healthy endpoint to (see ucx_links.h).
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <set>
#include <vector>

#include "sinew/dist/store.h"

namespace sinew::dist::ucx {

constexpr int kEpochBits = 8;
constexpr int kRankBits = 20;
constexpr int kSeqBits = 64 - kEpochBits - kRankBits;
constexpr int kMaxRanks = 1 << kRankBits;
constexpr uint64_t kEpochs = uint64_t{1} << kEpochBits;
constexpr ucp_tag_t kFullMask = ~ucp_tag_t{0};
constexpr ucp_tag_t kEpochMask = (kEpochs - 1) << (kRankBits + kSeqBits);
constexpr uint64_t kSeqMask = (uint64_t{1} << kSeqBits) - 1;
// Matches every message of one (epoch, source rank), whatever its sequence number.
constexpr ucp_tag_t kSourceMask = kEpochMask | (static_cast<ucp_tag_t>(kMaxRanks - 1) << kSeqBits);
// The user tag of the zero-byte message each pair exchanges while
// connecting; it takes sequence number 0, so user messages never see it.
constexpr uint64_t kHelloTag = 0x73696e6577ull;  // "sinew"

inline ucp_tag_t wire_tag(uint64_t epoch, int src, uint64_t seq) {
  return ((epoch % kEpochs) << (kRankBits + kSeqBits)) | (static_cast<uint64_t>(src) << kSeqBits) |
         (seq & kSeqMask);
}

// The tag bits every message from `src` in `epoch` shares (with kSourceMask).
inline ucp_tag_t source_tag(uint64_t epoch, int src) {
  return ((epoch % kEpochs) << (kRankBits + kSeqBits)) | (static_cast<ucp_tag_t>(src) << kSeqBits);
}

struct WireHeader {
  uint64_t tag;
  uint64_t bytes;
};

// FNV-1a: the same value in every process, unlike std::hash.
uint64_t address_hash(const std::vector<uint8_t>& address);

// What each rank publishes at the rendezvous: its worker address and the
// hashes of the peer workers it holds a healthy endpoint to.
struct Card {
  std::vector<uint8_t> address;
  std::set<uint64_t> holds;
};

Bytes encode_card(const Card& c);
// `rank`: whose card it is, for the error a malformed one raises.
Card decode_card(const Bytes& in, int rank);

}  // namespace sinew::dist::ucx
