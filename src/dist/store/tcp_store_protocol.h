// The TCP store's wire format, shared by server and client.
//
// Requests and replies are the same frame (little-endian):
//   u8 code, u32 nkeys, [u32 len, bytes]*nkeys, u32 nvalues, [u32 len, bytes]*nvalues, i64 arg
// A request's code is a Command, a reply's a Reply. Every length read from the
// wire is checked against Limits before anything is allocated for it, so a bad
// or hostile peer cannot make the reader allocate without bound.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "erase_prefix.h"
#include "sinew/core/env.h"
#include "sinew/dist/store.h"

namespace sinew::dist::store_wire {

inline constexpr int64_t kProtocolVersion = 1;

// strerror for the socket errors both ends report.
inline std::string errno_text(int err) { return std::strerror(err); }
inline constexpr size_t kMaxKeyBytes = size_t{64} << 10;
inline constexpr size_t kMaxItems = size_t{1} << 20;

inline const EnvParam<int64_t> kMaxValueBytes{
    "SINEW_STORE_MAX_VALUE_BYTES", int64_t{64} << 20,
    "largest value (bytes) the TCP store sends or accepts; bounds what a bad peer can make it allocate"};

enum class Command : uint8_t {
  kHello = 1,  // values[0] = token, arg = protocol version; must come first
  kSet,        // keys[0], values[0]
  kGet,        // keys[0], arg = timeout ms; answered once the key exists
  kAdd,        // keys[0], arg = delta; reply arg = new value
  kCompareSet, // keys[0], values = {expected, desired}; reply values[0] = value now stored
  kWait,       // keys, arg = timeout ms
  kCheck,      // keys; reply arg = 1 when all exist
  kDelete,     // keys[0]; reply arg = 1 when it existed
  kMultiGet,   // keys, arg = timeout ms; reply values in key order
  kMultiSet,   // keys, values (same count)
  kNumKeys,    // reply arg = number of keys
  kTime,       // reply arg = the server's wall clock (ns since the epoch)
  kDeletePrefix,  // keys[0] = a non-empty prefix; reply arg = keys deleted
};


enum class Reply : uint8_t {
  kOk = 0,
  kTimeout = 1,        // keys = the keys still missing, arg = the timeout ms
  kInvalid = 2,        // values[0] = message (a user error, e.g. add on a non-integer)
  kRefused = 3,        // values[0] = message; the server closes the connection
  kProtocolError = 4,  // values[0] = message; the server closes the connection
};

struct Message {
  uint8_t code = 0;
  std::vector<std::string> keys;
  std::vector<Bytes> values;
  int64_t arg = 0;
};

inline Message request(Command c, std::vector<std::string> keys = {}, std::vector<Bytes> values = {},
                       int64_t arg = 0) {
  return {static_cast<uint8_t>(c), std::move(keys), std::move(values), arg};
}

inline Message reply(Reply r, std::vector<std::string> keys = {}, std::vector<Bytes> values = {},
                     int64_t arg = 0) {
  return {static_cast<uint8_t>(r), std::move(keys), std::move(values), arg};
}

struct Limits {
  size_t max_key = kMaxKeyBytes;
  size_t max_value = 0;
  size_t max_items = kMaxItems;
};

// The limits for an authenticated peer (values bounded by SINEW_STORE_MAX_VALUE_BYTES).
inline Limits default_limits() {
  int64_t v = std::clamp<int64_t>(kMaxValueBytes.get(), 0, std::numeric_limits<uint32_t>::max());
  return {kMaxKeyBytes, static_cast<size_t>(v), kMaxItems};
}

namespace detail {
inline void put_u32(Bytes* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
inline uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
template <class Seq>
void put_items(Bytes* out, const Seq& items) {
  put_u32(out, static_cast<uint32_t>(items.size()));
  for (const auto& item : items) {
    put_u32(out, static_cast<uint32_t>(item.size()));
    out->insert(out->end(), item.begin(), item.end());
  }
}
}  // namespace detail

// Appends the frame for `m` to `out`. Callers keep sizes within Limits.
inline void encode(const Message& m, Bytes* out) {
  out->push_back(m.code);
  detail::put_items(out, m.keys);
  detail::put_items(out, m.values);
  auto arg = static_cast<uint64_t>(m.arg);
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(arg >> (8 * i)));
}

struct ParseResult {
  enum Kind { kNeedMore, kDone, kBad };
  Kind kind;
  // kNeedMore: the total number of bytes needed before parsing can progress;
  // kDone: the number of bytes the frame used.
  size_t size = 0;
  std::string error;  // kBad: what was wrong
};

// Parses one frame from the start of data[0, n).
inline ParseResult parse(const uint8_t* data, size_t n, const Limits& limits, Message* out) {
  size_t pos = 0;
  auto more = [&](size_t bytes) { return ParseResult{ParseResult::kNeedMore, pos + bytes, {}}; };
  auto bad = [](std::string why) { return ParseResult{ParseResult::kBad, 0, std::move(why)}; };
  auto have = [&](size_t bytes) { return n - pos >= bytes; };

  if (!have(1)) return more(1);
  out->code = data[pos++];

  auto read_items = [&](auto* items, size_t max_len, const char* what) -> ParseResult {
    items->clear();
    if (!have(4)) return more(4);
    uint32_t count = detail::get_u32(data + pos);
    pos += 4;
    if (count > limits.max_items)
      return bad(fmt::format("{} {}s in one message (at most {})", count, what, limits.max_items));
    for (uint32_t i = 0; i < count; ++i) {
      if (!have(4)) return more(4);
      uint32_t len = detail::get_u32(data + pos);
      pos += 4;
      if (len > max_len)
        return bad(fmt::format("a {} of {} bytes (at most {})", what, len, max_len));
      if (!have(len)) return more(len);
      items->emplace_back(data + pos, data + pos + len);
      pos += len;
    }
    return {ParseResult::kDone, pos, {}};
  };

  if (auto r = read_items(&out->keys, limits.max_key, "key"); r.kind != ParseResult::kDone) return r;
  if (auto r = read_items(&out->values, limits.max_value, "value"); r.kind != ParseResult::kDone)
    return r;
  if (!have(8)) return more(8);
  uint64_t arg = 0;
  for (int i = 0; i < 8; ++i) arg |= static_cast<uint64_t>(data[pos + i]) << (8 * i);
  pos += 8;
  out->arg = static_cast<int64_t>(arg);
  return {ParseResult::kDone, pos, {}};
}

inline const char* command_name(uint8_t code) {
  switch (static_cast<Command>(code)) {
    case Command::kHello: return "HELLO";
    case Command::kSet: return "SET";
    case Command::kGet: return "GET";
    case Command::kAdd: return "ADD";
    case Command::kCompareSet: return "COMPARE_SET";
    case Command::kWait: return "WAIT";
    case Command::kCheck: return "CHECK";
    case Command::kDelete: return "DELETE";
    case Command::kMultiGet: return "MULTI_GET";
    case Command::kMultiSet: return "MULTI_SET";
    case Command::kNumKeys: return "NUM_KEYS";
    case Command::kTime: return "TIME";
    case Command::kDeletePrefix: return "DELETE_PREFIX";
  }
  return "UNKNOWN";
}

// Waits longer than this are treated as "a year" so deadline arithmetic cannot overflow.
inline constexpr int64_t kMaxWaitMs = int64_t{365} * 24 * 3600 * 1000;

inline int64_t clamp_wait_ms(int64_t ms) { return std::clamp<int64_t>(ms, 0, kMaxWaitMs); }

}  // namespace sinew::dist::store_wire
