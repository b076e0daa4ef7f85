#include "sinew/dist/store.h"

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

}  // namespace sinew::dist
