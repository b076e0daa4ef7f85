#include "tools/sinew/cli_parse.h"

#include <fmt/format.h>

#include <charconv>
#include <limits>

#include "sinew/core/error.h"

namespace sinew::cli {

std::vector<std::string> split_list(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(sep, pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    const size_t b = item.find_first_not_of(" \t\r");
    if (b != std::string::npos) out.push_back(item.substr(b, item.find_last_not_of(" \t\r") - b + 1));
    pos = end + 1;
  }
  return out;
}

int64_t parse_int(const std::string& option, const std::string& text, int64_t lo, int64_t hi,
                  const std::string& expected) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi)
    throw InvalidArgument::make(option, fmt::format("'{}'", text), expected);
  return v;
}

std::vector<int64_t> parse_int_list(const std::string& option, const std::string& text, int64_t lo,
                                    int64_t hi, const std::string& expected) {
  std::vector<int64_t> out;
  for (const auto& item : split_list(text)) out.push_back(parse_int(option, item, lo, hi, expected));
  return out;
}

std::vector<int> parse_int_list32(const std::string& option, const std::string& text, int lo, int hi,
                                  const std::string& expected) {
  std::vector<int> out;
  for (int64_t v : parse_int_list(option, text, lo, hi, expected)) out.push_back(static_cast<int>(v));
  return out;
}

int64_t parse_bytes(const std::string& option, const std::string& text) {
  static const std::string kExpected = "a size in bytes, optionally with B, K, KiB, M, MiB, G or GiB";
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const std::string suffix = text.substr(digits);
  int shift = 0;
  if (suffix == "K" || suffix == "k" || suffix == "KiB") shift = 10;
  else if (suffix == "M" || suffix == "MiB") shift = 20;
  else if (suffix == "G" || suffix == "GiB") shift = 30;
  else if (!suffix.empty() && suffix != "B") digits = 0;
  if (digits == 0) throw InvalidArgument::make(option, fmt::format("'{}'", text), kExpected);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + digits, v);
  if (ec != std::errc() || v > (std::numeric_limits<int64_t>::max() >> shift))
    throw InvalidArgument::make(option, fmt::format("'{}'", text), kExpected + " that fits in 63 bits");
  return v << shift;
}

}  // namespace sinew::cli
