#include "kernels/autotune/cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "sinew/core/deadline.h"
#include "sinew/core/error.h"
#include "sinew/kernels/autotune.h"

namespace sinew::kernels::tune {
namespace {

constexpr const char* kFormat = "sinew-gemm-tune";
constexpr auto kLockWait = std::chrono::seconds(10);

const char* mode_name(EpilogueMode m) { return epilogue_mode_name(m); }

std::optional<EpilogueMode> parse_mode(const std::string& s) {
  if (s == "fused") return EpilogueMode::kFused;
  if (s == "unfused") return EpilogueMode::kUnfused;
  if (s == "auto") return EpilogueMode::kAuto;
  return std::nullopt;
}

// Every field present with its type: what any build can keep.
bool well_formed(const nlohmann::json& e) {
  if (!e.is_object()) return false;
  for (const char* f : {"op", "in", "out", "layout", "prior", "epilogue", "epilogue_sig", "isa", "library",
                        "candidates", "candidate", "mode"})
    if (!e.contains(f) || !e[f].is_string()) return false;
  for (const char* f : {"batch", "m", "n", "k", "align", "threads"})
    if (!e.contains(f) || !e[f].is_number_integer()) return false;
  return e.contains("us") && e["us"].is_number() && e["us"].get<double>() >= 0;
}

std::optional<uint8_t> parse_op(const std::string& s) {
  for (GemmOp op : {GemmOp::kMm, GemmOp::kAddmm, GemmOp::kBmm})
    if (s == gemm_op_name(op)) return static_cast<uint8_t>(op);
  return std::nullopt;
}

std::optional<uint8_t> parse_prior(const std::string& s) {
  for (PriorKind k : {PriorKind::kNone, PriorKind::kOut, PriorKind::kRow, PriorKind::kCol, PriorKind::kMatrix})
    if (s == prior_kind_name(k)) return static_cast<uint8_t>(k);
  return std::nullopt;
}

std::optional<uint8_t> parse_dtype_field(const std::string& s) {
  try {
    return static_cast<uint8_t>(parse_dtype(s));
  } catch (const InvalidArgument&) {
    return std::nullopt;
  }
}

std::string read_all(const std::string& path, bool* exists) {
  std::ifstream in(path, std::ios::binary);
  *exists = static_cast<bool>(in);
  if (!in) return {};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_all(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t w = ::write(fd, data.data() + done, data.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw IoError(fmt::format("cannot write the GEMM tuning cache {}: {}", path, std::strerror(errno)));
    done += static_cast<size_t>(w);
  }
}

// An exclusive flock on `path`, released on destruction.
class FileLock {
 public:
  explicit FileLock(const std::string& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ < 0) throw IoError(fmt::format("cannot open the GEMM tuning cache lock {}: {}", path, std::strerror(errno)));
    const Deadline deadline = Deadline::after(kLockWait);
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) {
        const int err = errno;
        ::close(fd_);
        throw IoError(fmt::format("cannot lock {}: {}", path, std::strerror(err)));
      }
      if (deadline.expired()) {
        ::close(fd_);
        throw TimeoutError(fmt::format("the GEMM tuning cache lock {} was held for more than {} s by another process",
                                       path, kLockWait.count()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  ~FileLock() { ::close(fd_); }  // closing releases the lock
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

}  // namespace

nlohmann::json make_entry(const PackedKey& k, const std::string& epilogue_key, const CachedPick& pick) {
  return nlohmann::json{
      {"op", gemm_op_name(static_cast<GemmOp>(k.op))},
      {"in", dtype_name(static_cast<DType>(k.in))},
      {"out", dtype_name(static_cast<DType>(k.out))},
      {"batch", k.batch},
      {"m", k.m},
      {"n", k.n},
      {"k", k.k},
      {"layout", std::string{static_cast<char>(k.layout_a), static_cast<char>(k.layout_b)}},
      {"align", k.align},
      {"prior", prior_kind_name(static_cast<PriorKind>(k.prior))},
      {"epilogue", epilogue_key},
      {"epilogue_sig", fmt::format("{:016x}", k.epilogue)},
      {"isa", tune_isa_tag()},
      {"threads", k.threads},
      {"library", library_version()},
      {"candidates", candidate_fingerprint()},
      {"candidate", pick.candidate->id()},
      {"mode", mode_name(pick.mode)},
      {"us", pick.us},
  };
}

FileContents read_cache_file(const std::string& path) {
  FileContents f;
  const std::string text = read_all(path, &f.exists);
  if (!f.exists) return f;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    f.bad = true;
    f.problem = fmt::format("not valid JSON ({})", e.what());
    return f;
  }
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat || !j.contains("version") ||
      !j["version"].is_number_integer()) {
    f.bad = true;
    f.problem = fmt::format("not a sinew GEMM tuning cache (no \"format\": \"{}\" and integer \"version\")", kFormat);
    return f;
  }
  if (j["version"].get<int64_t>() != kTuneCacheVersion) {
    f.bad = true;
    f.problem = fmt::format("written in cache format version {}, this build reads version {}",
                            j["version"].get<int64_t>(), kTuneCacheVersion);
    return f;
  }
  if (!j.contains("entries") || !j["entries"].is_object()) {
    f.bad = true;
    f.problem = "it has no \"entries\" object";
    return f;
  }
  for (auto it = j["entries"].begin(); it != j["entries"].end(); ++it) {
    if (well_formed(it.value())) f.entries[it.key()] = it.value();
    else ++f.malformed;
  }
  return f;
}

std::optional<std::pair<PackedKey, CachedPick>> usable_entry(const std::string& key, const nlohmann::json& e,
                                                             bool* malformed) {
  *malformed = !well_formed(e);
  if (*malformed) return std::nullopt;
  if (e["isa"] != tune_isa_tag() || e["library"] != library_version() || e["candidates"] != candidate_fingerprint())
    return std::nullopt;
  *malformed = true;
  PackedKey k;
  const auto op = parse_op(e["op"]);
  const auto in = parse_dtype_field(e["in"]);
  const auto out = parse_dtype_field(e["out"]);
  const auto prior = parse_prior(e["prior"]);
  const auto mode = parse_mode(e["mode"]);
  const std::string layout = e["layout"];
  const std::string sig = e["epilogue_sig"];
  if (!op || !in || !out || !prior || !mode || layout.size() != 2 || sig.size() != 16) return std::nullopt;
  const int64_t align = e["align"], threads = e["threads"];
  if (align < 1 || align > 64 || threads < 1 || threads > 65535) return std::nullopt;
  k.op = *op;
  k.in = *in;
  k.out = *out;
  k.layout_a = static_cast<uint8_t>(layout[0]);
  k.layout_b = static_cast<uint8_t>(layout[1]);
  k.align = static_cast<uint8_t>(align);
  k.prior = *prior;
  k.threads = static_cast<uint16_t>(threads);
  k.batch = e["batch"];
  k.m = e["m"];
  k.n = e["n"];
  k.k = e["k"];
  try {
    size_t used = 0;
    k.epilogue = std::stoull(sig, &used, 16);
    if (used != sig.size()) return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
  // The key must be exactly what this build computes from the fields.
  if (key_string(k, e["epilogue"].get<std::string>()) != key) return std::nullopt;
  CachedPick pick;
  pick.candidate = find_candidate(e["candidate"].get<std::string>());
  pick.mode = *mode;
  pick.us = e["us"];
  if (!pick.candidate) return std::nullopt;
  *malformed = false;
  return std::make_pair(k, pick);
}

FileContents merge_into_cache_file(const std::string& path, const nlohmann::json& recorded) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec) throw IoError(fmt::format("cannot create the directory of the GEMM tuning cache {}: {}", path, ec.message()));

  const FileLock lock(path + ".lock");
  FileContents before = read_cache_file(path);
  // Keeps other builds' entries; drops this build's inconsistent ones.
  nlohmann::json entries = nlohmann::json::object();
  if (!before.bad)
    for (auto it = before.entries.begin(); it != before.entries.end(); ++it) {
      bool malformed = false;
      usable_entry(it.key(), it.value(), &malformed);
      if (!malformed) entries[it.key()] = it.value();
    }
  for (auto it = recorded.begin(); it != recorded.end(); ++it) entries[it.key()] = it.value();
  const nlohmann::json doc{{"format", kFormat}, {"version", kTuneCacheVersion}, {"entries", entries}};

  static std::atomic<uint64_t> counter{0};
  const std::string tmp = fmt::format("{}.tmp.{}.{}", path, ::getpid(), counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(fmt::format("cannot create {}: {}", tmp, std::strerror(errno)));
  try {
    write_all(fd, doc.dump(1) + "\n", tmp);
    if (::fsync(fd) != 0) throw IoError(fmt::format("cannot sync {}: {}", tmp, std::strerror(errno)));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("cannot replace the GEMM tuning cache {}: {}", path, std::strerror(err)));
  }
  return before;
}

}  // namespace sinew::kernels::tune
