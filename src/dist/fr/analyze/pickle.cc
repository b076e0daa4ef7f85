// Opcodes from Python's pickletools (protocol 2). Containers are written as
// Python's own pickler does: the empty container, MARK, the items, then one
// APPENDS / SETITEMS (or TUPLE) that adds them all.
#include "dist/fr/analyze/pickle.h"

#include <cstring>
#include <limits>

namespace sinew::dist::fr {
namespace {

constexpr unsigned char kProto = 0x80, kStop = '.', kMark = '(', kNone = 'N', kTrue = 0x88, kFalse = 0x89;
constexpr unsigned char kBinInt1 = 'K', kBinInt2 = 'M', kBinInt = 'J', kLong1 = 0x8a, kBinFloat = 'G';
constexpr unsigned char kBinUnicode = 'X', kEmptyDict = '}', kSetItems = 'u', kEmptyList = ']', kAppends = 'e';
constexpr unsigned char kTuple = 't';

}  // namespace

Pickler::Pickler() {
  op(kProto);
  op(2);
}

void Pickler::bytes_le(uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void Pickler::none() { op(kNone); }

void Pickler::boolean(bool v) { op(v ? kTrue : kFalse); }

void Pickler::integer(int64_t v) {
  if (v >= 0 && v < 256) {
    op(kBinInt1);
    bytes_le(static_cast<uint64_t>(v), 1);
  } else if (v >= 0 && v < 65536) {
    op(kBinInt2);
    bytes_le(static_cast<uint64_t>(v), 2);
  } else if (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max()) {
    op(kBinInt);
    bytes_le(static_cast<uint32_t>(static_cast<int32_t>(v)), 4);
  } else {
    // LONG1: the shortest little-endian two's complement that keeps the sign.
    unsigned char b[8];
    auto u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>((u >> (8 * i)) & 0xff);
    int n = 8;
    while (n > 1 && ((b[n - 1] == 0x00 && !(b[n - 2] & 0x80)) || (b[n - 1] == 0xff && (b[n - 2] & 0x80)))) --n;
    op(kLong1);
    op(static_cast<unsigned char>(n));
    out_.append(reinterpret_cast<const char*>(b), static_cast<size_t>(n));
  }
}

void Pickler::unsigned_integer(uint64_t v) {
  if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return integer(static_cast<int64_t>(v));
  op(kLong1);
  op(9);  // a zero top byte keeps it positive
  bytes_le(v, 8);
  op(0);
}

void Pickler::real(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  op(kBinFloat);
  for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

void Pickler::str(std::string_view v) {
  op(kBinUnicode);
  bytes_le(v.size(), 4);
  out_.append(v.data(), v.size());
}

void Pickler::begin_dict() {
  op(kEmptyDict);
  op(kMark);
}
void Pickler::end_dict() { op(kSetItems); }
void Pickler::begin_list() {
  op(kEmptyList);
  op(kMark);
}
void Pickler::end_list() { op(kAppends); }
void Pickler::begin_tuple() { op(kMark); }
void Pickler::end_tuple() { op(kTuple); }

void Pickler::value(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      return none();
    case nlohmann::json::value_t::boolean:
      return boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return integer(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return unsigned_integer(j.get<uint64_t>());
    case nlohmann::json::value_t::number_float:
      return real(j.get<double>());
    case nlohmann::json::value_t::string:
      return str(j.get_ref<const std::string&>());
    case nlohmann::json::value_t::array:
    case nlohmann::json::value_t::binary:
      begin_list();
      if (j.is_array())
        for (const auto& v : j) value(v);
      return end_list();
    case nlohmann::json::value_t::object:
      begin_dict();
      for (const auto& [k, v] : j.items()) {
        str(k);
        value(v);
      }
      return end_dict();
  }
}

std::string Pickler::finish() {
  op(kStop);
  return std::move(out_);
}

}  // namespace sinew::dist::fr
