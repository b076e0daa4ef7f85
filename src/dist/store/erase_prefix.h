// Prefix deletion for the stores that keep their keys in a sorted map.
#pragma once

#include <cstdint>
#include <string>

namespace sinew::dist {

// Erases the keys of `m` that start with `prefix`; returns how many.
template <class Map>
int64_t erase_prefix(Map& m, const std::string& prefix) {
  auto first = m.lower_bound(prefix);
  auto last = first;
  int64_t n = 0;
  while (last != m.end() && last->first.compare(0, prefix.size(), prefix) == 0) {
    ++last;
    ++n;
  }
  m.erase(first, last);
  return n;
}

}  // namespace sinew::dist
