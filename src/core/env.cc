#include "sinew/core/env.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "sinew/core/error.h"

namespace sinew {
namespace {
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::vector<EnvParamInfo>& registry(EnvSource source) {
  static std::vector<EnvParamInfo> r[2];
  return r[static_cast<int>(source)];
}
}  // namespace

std::optional<std::string> getenv_opt(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::vector<EnvParamInfo> all_env_params(EnvSource source) {
  std::lock_guard<std::mutex> g(registry_mutex());
  auto out = registry(source);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

namespace detail {

void register_env_param(EnvParamInfo info, EnvSource source) {
  std::lock_guard<std::mutex> g(registry_mutex());
  // A variable declared in a header may be constructed once per shared
  // object that includes it; list it once.
  auto& r = registry(source);
  for (const auto& p : r)
    if (p.name == info.name) return;
  r.push_back(std::move(info));
}

bool parse_env(const char* name, const char* text, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text, &end, 0);
  int64_t mul = 1;
  if (end && *end) {  // accept K/M/G suffixes for sizes
    if (std::strcmp(end, "K") == 0 || std::strcmp(end, "k") == 0) mul = 1 << 10;
    else if (std::strcmp(end, "M") == 0 || std::strcmp(end, "m") == 0) mul = 1 << 20;
    else if (std::strcmp(end, "G") == 0 || std::strcmp(end, "g") == 0) mul = 1ll << 30;
    else mul = 0;
  }
  if (errno != 0 || end == text || mul == 0)
    throw InvalidArgument::make(name, fmt::format("'{}'", text), "an integer (optionally with K/M/G)");
  *out = static_cast<int64_t>(v) * mul;
  return true;
}

bool parse_env(const char* name, const char* text, double* out) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || (end && *end))
    throw InvalidArgument::make(name, fmt::format("'{}'", text), "a number");
  *out = v;
  return true;
}

bool parse_env(const char* name, const char* text, bool* out) {
  std::string s(text);
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "yes" || s == "on") *out = true;
  else if (s == "0" || s == "false" || s == "no" || s == "off") *out = false;
  else throw InvalidArgument::make(name, fmt::format("'{}'", text), "one of 1/0/true/false/yes/no/on/off");
  return true;
}

bool parse_env(const char*, const char* text, std::string* out) {
  *out = text;
  return true;
}

std::string env_repr(int64_t v) { return std::to_string(v); }
std::string env_repr(double v) { return fmt::format("{}", v); }
std::string env_repr(bool v) { return v ? "1" : "0"; }
std::string env_repr(const std::string& v) { return v; }

}  // namespace detail

const EnvParam<std::string>& launcher_rank_env() {
  static const EnvParam<std::string> p{"RANK", "", "this process's rank in the job", EnvSource::kLauncher};
  return p;
}

}  // namespace sinew
