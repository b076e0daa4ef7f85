// A store in one file shared by every process of a job. Each operation takes
// flock() on the file, reads the whole map, changes it and writes it back in
// place (pwrite + ftruncate on the locked descriptor: a rename would swap the
// inode under the other processes' locks). flock() does not exclude threads
// sharing one descriptor, so a mutex serialises this process's threads too.
//
// File format (little-endian): "SINEWKV1", u32 count, then per entry
// u32 key length, key, u32 value length, value. An empty file is an empty store.
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "sinew/core/error.h"
#include "sinew/core/unique_fd.h"
#include "erase_prefix.h"
#include "sinew/core/check.h"
#include "sinew/dist/store.h"

namespace sinew::dist {
namespace {

using Map = std::map<std::string, Bytes>;

constexpr char kMagic[8] = {'S', 'I', 'N', 'E', 'W', 'K', 'V', '1'};
constexpr Millis kFirstPoll{1};
constexpr Millis kMaxPoll{20};

void put_u32(Bytes* out, size_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

class FileStore final : public Store {
 public:
  FileStore(std::string path, Millis timeout) : path_(std::move(path)) {
    timeout_ = timeout;
    fd_ = UniqueFd(::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!fd_) fail("cannot open", errno);
  }

  void set(const std::string& key, const Bytes& value) override {
    update([&](Map& m) {
      m[key] = value;
      return true;
    });
  }

  Bytes get(const std::string& key) override {
    Bytes out;
    wait_for({key}, timeout_, [&](const Map& m) { out = m.at(key); });
    return out;
  }

  int64_t add(const std::string& key, int64_t delta) override {
    int64_t v = 0;
    update([&](Map& m) {
      auto it = m.find(key);
      if (it != m.end()) {
        const char* first = reinterpret_cast<const char*>(it->second.data());
        const char* last = first + it->second.size();
        auto [end, ec] = std::from_chars(first, last, v);
        if (ec != std::errc{} || end != last)
          throw InvalidArgument::make("key", key, "a key holding a decimal integer, to add to");
      }
      if (__builtin_add_overflow(v, delta, &v))
        throw InvalidArgument::make("delta", std::to_string(delta),
                                    fmt::format("a delta that keeps key '{}' within int64", key));
      m[key] = to_bytes(std::to_string(v));
      return true;
    });
    return v;
  }

  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    Bytes now;
    update([&](Map& m) {
      auto it = m.find(key);
      if (it == m.end() ? expected.empty() : it->second == expected) {
        m[key] = desired;
        now = desired;
        return true;
      }
      now = it == m.end() ? expected : it->second;
      return false;
    });
    return now;
  }

  void wait(const std::vector<std::string>& keys, Millis timeout) override {
    wait_for(keys, timeout, [](const Map&) {});
  }

  bool check(const std::vector<std::string>& keys) override {
    Map m = read();
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return m.count(k) > 0; });
  }

  bool delete_key(const std::string& key) override {
    bool existed = false;
    update([&](Map& m) { return existed = m.erase(key) > 0; });
    return existed;
  }

  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) override {
    std::vector<Bytes> out;
    wait_for(keys, timeout_, [&](const Map& m) {
      for (const auto& k : keys) out.push_back(m.at(k));
    });
    return out;
  }

  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override {
    if (keys.size() != values.size())
      throw InvalidArgument::make("values", fmt::format("{} values", values.size()),
                                  fmt::format("one value per key ({} keys)", keys.size()));
    update([&](Map& m) {
      for (size_t i = 0; i < keys.size(); ++i) m[keys[i]] = values[i];
      return true;
    });
  }

  int64_t num_keys() override { return static_cast<int64_t>(read().size()); }

  int64_t delete_prefix(const std::string& prefix) override {
    SINEW_ARG_CHECK(!prefix.empty(), "prefix", "''", "a non-empty key prefix");
    int64_t n = 0;
    update([&](Map& m) { return (n = erase_prefix(m, prefix)) > 0; });
    return n;
  }

 private:
  [[noreturn]] void fail(const char* what, int err) const {
    throw IoError(fmt::format("file store '{}': {}: {}", path_, what, std::strerror(err)));
  }

  // Polls the file until every key exists, then calls on_ready with the map.
  template <class F>
  void wait_for(const std::vector<std::string>& keys, Millis timeout, F&& on_ready) {
    Deadline deadline = Deadline::after(timeout);
    Millis pause = kFirstPoll;
    while (true) {
      Map m = read();
      std::vector<std::string> missing;
      for (const auto& k : keys)
        if (!m.count(k)) missing.push_back(k);
      if (missing.empty()) {
        on_ready(m);
        return;
      }
      if (deadline.expired())
        throw TimeoutError(fmt::format("store wait timed out after {} ms; missing keys {} (file store '{}')",
                                       timeout.count(), missing, path_));
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline.remaining()));
      pause = std::min(pause * 2, kMaxPoll);
    }
  }

  // Holds this process's mutex and the file lock while running f.
  template <class F>
  auto locked(int operation, F&& f) {
    std::lock_guard<std::mutex> g(mu_);
    // Lock operations are short, so a lock held past the store timeout means a stuck process.
    Deadline deadline = Deadline::after(timeout_);
    Millis pause = kFirstPoll;
    while (::flock(fd_.get(), operation | LOCK_NB) != 0) {
      if (errno == EINTR) continue;
      if (errno != EWOULDBLOCK) fail("flock", errno);
      if (deadline.expired())
        throw TimeoutError(fmt::format("file store '{}' stayed locked by another process for {} ms",
                                       path_, timeout_.count()));
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, kMaxPoll);
    }
    struct Unlock {
      int fd;
      ~Unlock() { ::flock(fd, LOCK_UN); }
    } unlock{fd_.get()};
    return f();
  }

  Map read() {
    return locked(LOCK_SH, [&] { return load(); });
  }

  // Runs f on the map and writes it back when f returns true (it changed something).
  template <class F>
  void update(F&& f) {
    locked(LOCK_EX, [&] {
      Map m = load();
      if (f(m)) save(m);
    });
  }

  Map load() const {
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0) fail("fstat", errno);
    Bytes buf(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < buf.size()) {
      ssize_t n = ::pread(fd_.get(), buf.data() + got, buf.size() - got, static_cast<off_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("read", errno);
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    buf.resize(got);
    return decode(buf);
  }

  Map decode(const Bytes& buf) const {
    Map m;
    if (buf.empty()) return m;
    size_t pos = 0;
    auto corrupt = [&](const char* why) {
      return IoError(fmt::format("file store '{}' is corrupt ({} at byte {}); delete it and restart "
                                 "the job",
                                 path_, why, pos));
    };
    auto u32 = [&] {
      if (buf.size() - pos < 4) throw corrupt("truncated length");
      uint32_t v = 0;
      for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(buf[pos + i]) << (8 * i);
      pos += 4;
      return v;
    };
    auto bytes = [&](uint32_t len) {
      if (buf.size() - pos < len) throw corrupt("truncated entry");
      auto first = buf.begin() + static_cast<ptrdiff_t>(pos);
      pos += len;
      return std::make_pair(first, first + len);
    };
    if (buf.size() < sizeof kMagic || std::memcmp(buf.data(), kMagic, sizeof kMagic) != 0)
      throw corrupt("not a sinew file store");
    pos = sizeof kMagic;
    uint32_t count = u32();
    for (uint32_t i = 0; i < count; ++i) {
      auto [kf, kl] = bytes(u32());
      auto [vf, vl] = bytes(u32());
      m.emplace(std::string(kf, kl), Bytes(vf, vl));
    }
    if (pos != buf.size()) throw corrupt("trailing bytes");
    return m;
  }

  void save(const Map& m) {
    Bytes buf(kMagic, kMagic + sizeof kMagic);
    put_u32(&buf, m.size());
    for (const auto& [k, v] : m) {
      if (k.size() > UINT32_MAX || v.size() > UINT32_MAX)
        throw InvalidArgument::make("value", fmt::format("{} bytes for key '{}'", v.size(), k),
                                    "at most 4 GiB");
      put_u32(&buf, k.size());
      buf.insert(buf.end(), k.begin(), k.end());
      put_u32(&buf, v.size());
      buf.insert(buf.end(), v.begin(), v.end());
    }
    size_t off = 0;
    while (off < buf.size()) {
      ssize_t n = ::pwrite(fd_.get(), buf.data() + off, buf.size() - off, static_cast<off_t>(off));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("write", errno);
      off += static_cast<size_t>(n);
    }
    if (::ftruncate(fd_.get(), static_cast<off_t>(buf.size())) != 0) fail("truncate", errno);
  }

  const std::string path_;
  UniqueFd fd_;
  std::mutex mu_;
};

}  // namespace

StorePtr make_file_store(const std::string& path, Millis timeout) {
  if (path.empty()) throw InvalidArgument::make("path", "\"\"", "a file path for the store");
  return std::make_shared<FileStore>(path, timeout);
}

}  // namespace sinew::dist
