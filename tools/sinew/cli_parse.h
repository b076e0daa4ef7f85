// The flag-value parsers every `sinew` subcommand shares, so that a bad
// value gets the same InvalidArgument ("--threads: got 'x', expected ...")
// whichever command it was given to.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sinew::cli {

// Comma-separated (or `sep`-separated) items, each trimmed of blanks; empty
// items are dropped.
std::vector<std::string> split_list(const std::string& text, char sep = ',');

// One integer in [lo, hi]; anything else is InvalidArgument naming `option`,
// the text and `expected`.
int64_t parse_int(const std::string& option, const std::string& text, int64_t lo, int64_t hi,
                  const std::string& expected);

// A comma list of integers, each in [lo, hi].
std::vector<int64_t> parse_int_list(const std::string& option, const std::string& text, int64_t lo,
                                    int64_t hi, const std::string& expected);
std::vector<int> parse_int_list32(const std::string& option, const std::string& text, int lo, int hi,
                                  const std::string& expected);

// A byte count with an optional B, K/KiB, M/MiB or G/GiB suffix.
int64_t parse_bytes(const std::string& option, const std::string& text);

}  // namespace sinew::cli
