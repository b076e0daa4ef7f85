// Environment tunables, each declared once as a typed, cached getter
// (NCCL's NCCL_PARAM idea):
//
//   inline const sinew::EnvParam<int64_t> kShmChunk{"SINEW_SHM_CHUNK_BYTES", 1 << 20,
//                                                   "bytes per shared-memory pipeline stage"};
//   kShmChunk.get();
//
// The value is read on first use and cached. Bad values raise InvalidArgument
// naming the variable. `all_env_params()` lists every declared tunable.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace sinew {

struct EnvParamInfo {
  std::string name;
  std::string default_value;
  std::string help;
  const char* type;
};

namespace detail {
void register_env_param(EnvParamInfo info);
bool parse_env(const char* name, const char* text, int64_t* out);
bool parse_env(const char* name, const char* text, double* out);
bool parse_env(const char* name, const char* text, bool* out);
bool parse_env(const char* name, const char* text, std::string* out);
std::string env_repr(int64_t v);
std::string env_repr(double v);
std::string env_repr(bool v);
std::string env_repr(const std::string& v);
template <class T> constexpr const char* env_type_name();
template <> constexpr const char* env_type_name<int64_t>() { return "int"; }
template <> constexpr const char* env_type_name<double>() { return "float"; }
template <> constexpr const char* env_type_name<bool>() { return "bool"; }
template <> constexpr const char* env_type_name<std::string>() { return "string"; }
}  // namespace detail

std::vector<EnvParamInfo> all_env_params();

// Reads an environment variable, or nullopt when unset or empty.
std::optional<std::string> getenv_opt(const char* name);

template <class T>
class EnvParam {
 public:
  EnvParam(const char* name, T default_value, const char* help)
      : name_(name), default_(std::move(default_value)) {
    detail::register_env_param({name_, detail::env_repr(default_), help, detail::env_type_name<T>()});
  }
  // Read on every small collective: after the first call it is one
  // acquire load (std::call_once alone goes through TLS and pthread_once
  // on each call, a few percent of a small op).
  const T& get() const {
    if (ready_.load(std::memory_order_acquire)) [[likely]]
      return value_;
    std::call_once(once_, [this] {
      value_ = default_;
      if (auto text = getenv_opt(name_)) detail::parse_env(name_, text->c_str(), &value_);
    });
    ready_.store(true, std::memory_order_release);
    return value_;
  }
  const char* name() const { return name_; }

 private:
  const char* name_;
  T default_;
  mutable std::once_flag once_;
  mutable std::atomic<bool> ready_{false};
  mutable T value_{};
};

}  // namespace sinew
