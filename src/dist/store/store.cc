#include "sinew/dist/store.h"

#include <algorithm>

#include <fmt/format.h>

#include "sinew/core/error.h"

namespace sinew::dist {

std::vector<Bytes> Store::multi_get(const std::vector<std::string>& keys) {
  std::vector<Bytes> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(get(k));
  return out;
}

void Store::multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  for (size_t i = 0; i < keys.size() && i < values.size(); ++i) set(keys[i], values[i]);
}

int64_t Store::delete_prefix(const std::string& prefix) {
  throw InvalidArgument::make("store", fmt::format("delete_prefix('{}')", prefix),
                              "a store that can delete by prefix (sinew's memory, file, prefix and TCP stores)");
}

void wait_keys(Store& store, const std::vector<std::string>& keys, Deadline deadline,
               const std::atomic<bool>* abort_flag, const std::function<void()>& between) {
  for (;;) {
    if (abort_flag && abort_flag->load()) throw AbortedError("store wait aborted (the group was aborted)");
    auto slice = std::min<Clock::duration>(deadline.remaining(), Millis(100));
    try {
      store.wait(keys, std::chrono::duration_cast<Millis>(slice) + Millis(1));
      return;
    } catch (const TimeoutError&) {
      if (deadline.expired()) throw;
    }
    if (between) between();
  }
}

}  // namespace sinew::dist
