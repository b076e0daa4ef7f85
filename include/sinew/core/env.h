// Environment tunables, each declared once as a typed, cached getter
// (NCCL's NCCL_PARAM idea):
//
//   inline const sinew::EnvParam<int64_t> kShmChunk{"SINEW_SHM_CHUNK_BYTES", 1 << 20,
//                                                   "bytes per shared-memory pipeline stage"};
//   kShmChunk.get();
//
// The value is read on first use and cached. Bad values raise InvalidArgument
// naming the variable. `all_env_params()` lists every declared variable, so
// `sinew env` can show them all; a variable the project reads is declared
// here even when another program sets it (a launcher's RANK, OpenMPI's
// OMPI_COMM_WORLD_RANK): those read it with `read()` on every use, since
// one process may see it change (a test, an in-place restart).
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

// Who sets a variable: a user tuning sinew, or the program that started the
// process (torchrun, `sinew run`, mpirun, srun), as a protocol.
enum class EnvSource { kTunable, kLauncher };

namespace detail {
void register_env_param(EnvParamInfo info, EnvSource source);
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

// Every declared variable of `source`, sorted by name, each once.
std::vector<EnvParamInfo> all_env_params(EnvSource source = EnvSource::kTunable);

// Reads an environment variable, or nullopt when unset or empty.
std::optional<std::string> getenv_opt(const char* name);

template <class T>
class EnvParam {
 public:
  EnvParam(const char* name, T default_value, const char* help, EnvSource source = EnvSource::kTunable)
      : name_(name), default_(std::move(default_value)) {
    detail::register_env_param({name_, detail::env_repr(default_), help, detail::env_type_name<T>()}, source);
  }
  // The value set now, parsed, or nullopt when unset or empty; not cached.
  std::optional<T> read() const {
    auto text = getenv_opt(name_);
    if (!text) return std::nullopt;
    T v{};
    detail::parse_env(name_, text->c_str(), &v);
    return v;
  }
  // The value set now, or the default; not cached.
  T read_or_default() const { return read().value_or(default_); }
  bool is_set() const { return getenv_opt(name_).has_value(); }
  const T& default_value() const { return default_; }
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

// RANK, the process's rank in its job, as torchrun, `sinew run` and the
// dist layer's launch protocol spell it; the logger's prefix reads it too,
// hence declared in core.
const EnvParam<std::string>& launcher_rank_env();

}  // namespace sinew
