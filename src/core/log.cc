#include "sinew/core/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sstream>

#include "sinew/core/env.h"
#include "sinew/core/host.h"

namespace sinew {
namespace {

struct LogConfig {
  std::atomic<int> level{static_cast<int>(LogLevel::kWarn)};
  std::atomic<uint32_t> mask{static_cast<uint32_t>(LogSubsys::kAll)};
  std::atomic<int> rank{-1};
  std::mutex sink_mutex;
  LogSink sink;
};

const std::pair<const char*, LogSubsys> kSubsysNames[] = {
    {"INIT", LogSubsys::kInit}, {"COLL", LogSubsys::kColl},   {"P2P", LogSubsys::kP2P},
    {"STORE", LogSubsys::kStore}, {"SHM", LogSubsys::kShm},   {"UCX", LogSubsys::kUcx},
    {"NET", LogSubsys::kNet},   {"LAUNCH", LogSubsys::kLaunch}, {"BENCH", LogSubsys::kBench},
    {"FT", LogSubsys::kFt},     {"KERNELS", LogSubsys::kKernels}, {"ALL", LogSubsys::kAll},
};

// Function-local so that logging from another file's static initialiser finds
// them constructed; read on every reload_log_config().
}  // namespace

const EnvParam<std::string>& log_level_env() {
  static const EnvParam<std::string> p{"SINEW_LOG_LEVEL", "warn", "error|warn|info|debug|trace (or 0-4)"};
  return p;
}

namespace {
const EnvParam<std::string>& log_subsys_param() {
  static const EnvParam<std::string> p{"SINEW_LOG_SUBSYS", "ALL",
                                       "comma list of subsystems to log (^ first excludes them)"};
  return p;
}
const EnvParam<bool>& log_prefixed_param() {
  static const EnvParam<bool> p{"SINEW_LOG_PREFIXED", false,
                                "internal: set by `sinew run`, which prefixes every line itself"};
  return p;
}
// Declared at start-up as well, so that `sinew env` lists them.
[[maybe_unused]] const bool kLogParamsDeclared =
    (log_level_env(), log_subsys_param(), log_prefixed_param(), launcher_rank_env(), true);

void parse_config(LogConfig& c) {
  int level = static_cast<int>(LogLevel::kWarn);
  if (auto v = log_level_env().read()) {
    std::string s = *v;
    for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (s == "error")
      level = 0;
    else if (s == "warn" || s == "warning")
      level = 1;
    else if (s == "info")
      level = 2;
    else if (s == "debug")
      level = 3;
    else if (s == "trace")
      level = 4;
    else if (s.size() == 1 && s[0] >= '0' && s[0] <= '4')
      level = s[0] - '0';
    else
      std::fprintf(stderr, "sinew: ignoring SINEW_LOG_LEVEL='%s' (expected error|warn|info|debug|trace)\n", v->c_str());
  }
  uint32_t mask = static_cast<uint32_t>(LogSubsys::kAll);
  if (auto v = log_subsys_param().read()) {
    std::string s = *v;
    bool invert = !s.empty() && s[0] == '^';
    if (invert) s = s.substr(1);
    uint32_t m = 0;
    std::stringstream ss(s);
    std::string tok;
    while (std::getline(ss, tok, ',')) {
      for (auto& ch : tok) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      bool found = false;
      for (auto& [name, bit] : kSubsysNames)
        if (tok == name) { m |= static_cast<uint32_t>(bit); found = true; }
      if (!found && !tok.empty())
        std::fprintf(stderr, "sinew: unknown subsystem '%s' in SINEW_LOG_SUBSYS\n", tok.c_str());
    }
    mask = invert ? ~m : m;
  }
  c.level.store(level);
  c.mask.store(mask);
}

LogConfig& config() {
  static LogConfig* c = [] {
    auto* cfg = new LogConfig();  // leaked on purpose: logging works during static destruction
    parse_config(*cfg);
    return cfg;
  }();
  return *c;
}

}  // namespace

const char* log_level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kError: return "ERROR";
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kTrace: return "TRACE";
  }
  return "?";
}

const char* log_subsys_name(LogSubsys s) {
  for (auto& [name, bit] : kSubsysNames)
    if (bit == s) return name;
  return "?";
}

void set_log_sink(LogSink sink) {
  auto& c = config();
  std::lock_guard<std::mutex> g(c.sink_mutex);
  c.sink = std::move(sink);
}

void set_log_rank(int rank) { config().rank.store(rank); }

std::string log_prefix() {
  // Under `sinew run` the launcher already puts "[host:rank]" on every line.
  static const bool prefixed = log_prefixed_param().is_set();
  if (prefixed) return {};
  static const std::string host = host_name();
  int rank = config().rank.load();
  if (rank >= 0) return fmt::format("[{}:{}]", host, rank);
  if (auto r = launcher_rank_env().read()) return fmt::format("[{}:{}]", host, *r);
  return fmt::format("[{}:-]", host);
}

bool log_enabled(LogLevel level, LogSubsys subsys) {
  auto& c = config();
  return static_cast<int>(level) <= c.level.load(std::memory_order_relaxed) &&
         (c.mask.load(std::memory_order_relaxed) & static_cast<uint32_t>(subsys)) != 0;
}

void reload_log_config() { parse_config(config()); }

void log_emit(LogLevel level, LogSubsys subsys, std::string message) {
  auto& c = config();
  LogRecord rec{level, subsys, log_prefix(), std::move(message)};
  std::lock_guard<std::mutex> g(c.sink_mutex);
  if (c.sink) {
    c.sink(rec);
    return;
  }
  std::string line = fmt::format("{}{}sinew {} {}: {}\n", rec.prefix, rec.prefix.empty() ? "" : " ",
                                 log_level_name(level), log_subsys_name(subsys), rec.message);
  // One write per line so lines from threads and processes do not interleave.
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace sinew
