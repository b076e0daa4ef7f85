#include "dist/ucx/ucx_wire.h"

#include <fmt/format.h>

#include <cstring>

#include "sinew/core/error.h"

namespace sinew::dist::ucx {

uint64_t address_hash(const std::vector<uint8_t>& address) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : address) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

Bytes encode_card(const Card& c) {
  Bytes out;
  auto put = [&out](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  };
  const uint64_t len = c.address.size(), n = c.holds.size();
  put(&len, sizeof len);
  put(c.address.data(), c.address.size());
  put(&n, sizeof n);
  for (uint64_t h : c.holds) put(&h, sizeof h);
  return out;
}

Card decode_card(const Bytes& in, int rank) {
  size_t at = 0;
  // Checked before anything is sized from the record.
  auto need = [&](uint64_t count, size_t each) {
    if (count > (in.size() - at) / each)
      throw InternalError(fmt::format("UCX rendezvous: rank {}'s record (store key ucx/addr/{}) is {} bytes, "
                                      "too short for what it announces",
                                      rank, rank, in.size()));
  };
  auto take = [&](void* p, size_t n) {
    need(n, 1);
    std::memcpy(p, in.data() + at, n);
    at += n;
  };
  Card c;
  uint64_t len = 0, n = 0;
  take(&len, sizeof len);
  need(len, 1);
  c.address.resize(len);
  take(c.address.data(), len);
  take(&n, sizeof n);
  need(n, sizeof(uint64_t));
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t h = 0;
    take(&h, sizeof h);
    c.holds.insert(h);
  }
  return c;
}

}  // namespace sinew::dist::ucx
