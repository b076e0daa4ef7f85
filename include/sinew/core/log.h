// Logging by level and subsystem (NCCL style).
//
//   SINEW_LOG_LEVEL  = error | warn | info | debug | trace   (default warn)
//   SINEW_LOG_SUBSYS = comma list of INIT,COLL,P2P,STORE,SHM,UCX,NET,LAUNCH,BENCH,FT,KERNELS
//                      or ALL (default); a leading ^ excludes the listed ones.
//
// Every line carries a "[host:rank]" prefix. The sink is replaceable
// (set_log_sink), e.g. to capture lines in tests.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <string>

namespace sinew {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

enum class LogSubsys : uint32_t {
  kInit = 1u << 0,
  kColl = 1u << 1,
  kP2P = 1u << 2,
  kStore = 1u << 3,
  kShm = 1u << 4,
  kUcx = 1u << 5,
  kNet = 1u << 6,
  kLaunch = 1u << 7,
  kBench = 1u << 8,
  kFt = 1u << 9,
  kKernels = 1u << 10,  // kernels and linalg: tuning, dispatch
  kAll = 0xffffffffu,
};

const char* log_level_name(LogLevel l);
const char* log_subsys_name(LogSubsys s);

struct LogRecord {
  LogLevel level;
  LogSubsys subsys;
  std::string prefix;   // "[host:rank]"
  std::string message;  // without prefix or newline
};

using LogSink = std::function<void(const LogRecord&)>;

// Replaces the sink (default: one line to stderr). Pass nullptr to restore.
void set_log_sink(LogSink sink);
// The rank shown in the prefix; -1 shows the RANK env var or '-'.
void set_log_rank(int rank);

// SINEW_LOG_LEVEL, for a launcher that hands the user's level to its workers.
template <class T> class EnvParam;
const EnvParam<std::string>& log_level_env();
std::string log_prefix();
bool log_enabled(LogLevel level, LogSubsys subsys);
// Re-reads SINEW_LOG_LEVEL / SINEW_LOG_SUBSYS (tests change them).
void reload_log_config();
void log_emit(LogLevel level, LogSubsys subsys, std::string message);

}  // namespace sinew

#define SINEW_LOG(level, subsys, ...)                                                    \
  do {                                                                                   \
    if (::sinew::log_enabled(::sinew::LogLevel::level, ::sinew::LogSubsys::subsys))      \
      ::sinew::log_emit(::sinew::LogLevel::level, ::sinew::LogSubsys::subsys,            \
                        fmt::format(__VA_ARGS__));                                       \
  } while (0)

#define SINEW_WARN(subsys, ...) SINEW_LOG(kWarn, subsys, __VA_ARGS__)
#define SINEW_INFO(subsys, ...) SINEW_LOG(kInfo, subsys, __VA_ARGS__)
#define SINEW_DEBUG(subsys, ...) SINEW_LOG(kDebug, subsys, __VA_ARGS__)
#define SINEW_TRACE(subsys, ...) SINEW_LOG(kTrace, subsys, __VA_ARGS__)
#define SINEW_ERROR(subsys, ...) SINEW_LOG(kError, subsys, __VA_ARGS__)
