// The fault-injection harness: hosts a job store, spawns ft_worker ranks
// (and joiners) as real processes, and injects failures from outside:
// SIGKILL, SIGSTOP/SIGCONT, or a TCP connection of a live rank shut down
// through pidfd_getfd. Parses each rank's result line.
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sinew/core/deadline.h"
#include "sinew/core/error.h"
#include "sinew/dist/tcp_store.h"

extern char** environ;

namespace sinew::dist::ft {

using namespace std::chrono_literals;

// One rank's final line: "RESULT orig O rank R size S epoch E reconfigs N
// detect_ms D members a,b failed e0[..]e1[..] first_lost [..]" ("-": none).
struct View {
  int orig = -1, rank = -1, size = -1, epoch = -1, reconfigs = -1;
  double detect_ms = -1;
  std::string members, failed, first_lost;
  // What every survivor must see identically.
  std::string shared() const { return fmt::format("size {} epoch {} members {}", size, epoch, members); }
};

inline std::optional<View> parse_view(const std::string& out) {
  auto pos = out.find("RESULT ");
  if (pos == std::string::npos) return std::nullopt;
  std::istringstream in(out.substr(pos));
  View v;
  std::string w;
  in >> w >> w >> v.orig >> w >> v.rank >> w >> v.size >> w >> v.epoch >> w >> v.reconfigs >> w >> v.detect_ms >> w >>
      v.members >> w >> v.failed >> w >> v.first_lost;
  if (!in && !in.eof()) return std::nullopt;
  return v;
}

struct Proc {
  pid_t pid = -1;
  std::string out_path;
  int status = 0;
  bool stopped = false;
  std::string output() const {
    std::ifstream f(out_path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  bool exited_ok() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  bool excluded() const { return WIFEXITED(status) && WEXITSTATUS(status) == 3; }
  bool sigkilled() const { return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL; }
};

class Job {
 public:
  // `world` ranks (RANK 0..world-1), then `joiners` processes with
  // SINEW_JOIN=1 (original ranks world, world+1, ...)
  Job(int world, const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {},
      int joiners = 0)
      : server_("127.0.0.1", 0, "secret-token") {
    char tmpl[] = "/tmp/sinew-fi-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    for (int r = 0; r < world + joiners; ++r) {
      std::vector<std::string> env;
      for (char** e = environ; *e; ++e) env.emplace_back(*e);
      // A joiner takes a slot (RANK < WORLD_SIZE), as `sinew run` respawns one; FT_ORIG names it.
      const int slot = r < world ? r : 0;
      for (auto v : {fmt::format("RANK={}", slot), fmt::format("LOCAL_RANK={}", slot), fmt::format("FT_ORIG={}", r),
                     fmt::format("WORLD_SIZE={}", world),
                     fmt::format("LOCAL_WORLD_SIZE={}", world), std::string("MASTER_ADDR=127.0.0.1"),
                     fmt::format("MASTER_PORT={}", server_.port()), std::string("SINEW_STORE_TOKEN=secret-token"),
                     std::string("SINEW_STORE_HOSTED=1"), std::string("SINEW_FT_HEARTBEAT_TIMEOUT_MS=1000"),
                     std::string(r >= world ? "SINEW_JOIN=1" : "SINEW_JOIN=0")})
        env.push_back(v);
      for (const auto& v : extra_env) env.push_back(v);
      spawn(r, args, env);
    }
    TcpStoreOptions o;
    o.port = server_.port();
    o.token = "secret-token";
    o.timeout = Millis(5000);
    store_ = make_prefix_store("worker/attempt_0", make_tcp_store(o));
  }
  ~Job() {
    for (auto& p : procs_)
      if (p.pid > 0) {
        ::kill(p.pid, SIGKILL);
        ::kill(p.pid, SIGCONT);
        ::waitpid(p.pid, nullptr, 0);
      }
    // SINEW_TEST_KEEP_DIR=1 keeps the ranks' output for a post-mortem.
    if (!std::getenv("SINEW_TEST_KEEP_DIR")) std::filesystem::remove_all(dir_);
  }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  int count() const { return static_cast<int>(procs_.size()); }
  const Proc& proc(int r) const { return procs_[r]; }
  pid_t pid(int r) const { return procs_[r].pid; }
  Store& store() { return *store_; }
  int store_port() const { return server_.port(); }

  // True once every key exists; false at the deadline.
  bool wait_keys(const std::vector<std::string>& keys, Millis limit) {
    const auto deadline = Deadline::after(limit);
    while (!deadline.expired()) {
      if (store_->check(keys)) return true;
      std::this_thread::sleep_for(2ms);
    }
    return false;
  }

  void signal(int r, int sig) {
    if (procs_[r].pid <= 0) return;
    if (sig == SIGSTOP) procs_[r].stopped = true;
    if (sig == SIGCONT) procs_[r].stopped = false;
    ::kill(procs_[r].pid, sig);
  }

  // Waits until every process that is not stopped has exited; false (and
  // the hung ones named in `hung`) past the limit. Stopped ones are left.
  bool wait(Millis limit, std::vector<int>* hung = nullptr) {
    const auto deadline = Deadline::after(limit);
    for (;;) {
      bool all = true;
      for (auto& p : procs_) {
        if (p.pid <= 0 || p.stopped) continue;
        if (::waitpid(p.pid, &p.status, WNOHANG) == p.pid) p.pid = -1;
        else all = false;
      }
      if (all) return true;
      if (deadline.expired()) break;
      std::this_thread::sleep_for(10ms);
    }
    for (int r = 0; r < count(); ++r)
      if (procs_[r].pid > 0 && !procs_[r].stopped && hung) hung->push_back(r);
    return false;
  }

  // Kills and reaps r (stopped or hung), keeping its status.
  void reap(int r) {
    auto& p = procs_[r];
    if (p.pid <= 0) return;
    ::kill(p.pid, SIGKILL);
    ::kill(p.pid, SIGCONT);
    ::waitpid(p.pid, &p.status, 0);
    p.pid = -1;
    p.stopped = false;
  }

  // Established TCP connections between two ranks: {fd in r, peer rank}.
  std::vector<std::pair<int, int>> rank_connections(int r) const {
    struct Sock {
      unsigned local = 0, remote = 0;
    };
    std::map<std::string, Sock> by_inode;  // established sockets on the loopback, by inode
    for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
      std::ifstream f(fmt::format("/proc/{}/net/{}", procs_[r].pid, std::filesystem::path(table).filename().string()));
      std::string line;
      std::getline(f, line);
      while (std::getline(f, line)) {
        std::istringstream in(line);
        std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
        in >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
        if (state != "01") continue;
        Sock s;
        s.local = std::stoul(local.substr(local.find(':') + 1), nullptr, 16);
        s.remote = std::stoul(remote.substr(remote.find(':') + 1), nullptr, 16);
        by_inode[inode] = s;
      }
    }
    auto sockets_of = [&](int who) {
      std::vector<std::pair<int, Sock>> out;
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", procs_[who].pid), ec)) {
        std::string target = std::filesystem::read_symlink(e.path(), ec).string();
        if (ec || target.rfind("socket:[", 0) != 0) continue;
        auto it = by_inode.find(target.substr(8, target.size() - 9));
        if (it != by_inode.end()) out.push_back({std::stoi(e.path().filename().string()), it->second});
      }
      return out;
    };
    std::vector<std::pair<int, int>> out;
    for (const auto& [fd, s] : sockets_of(r)) {
      if (s.local == static_cast<unsigned>(store_port()) || s.remote == static_cast<unsigned>(store_port())) continue;
      for (int peer = 0; peer < count(); ++peer) {
        if (peer == r || procs_[peer].pid <= 0) continue;
        for (const auto& [pfd, ps] : sockets_of(peer))
          if (ps.local == s.remote && ps.remote == s.local) out.push_back({fd, peer});
      }
    }
    return out;
  }

  // Shuts down rank r's socket `fd` from outside: a connection dropped under
  // a live process. Returns errno (0 on success).
  int shutdown_socket(int r, int fd) {
    int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, procs_[r].pid, 0));
    if (pidfd < 0) return errno;
    int mine = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, fd, 0));
    int err = mine < 0 ? errno : 0;
    if (mine >= 0) {
      if (::shutdown(mine, SHUT_RDWR) != 0) err = errno;
      ::close(mine);
    }
    ::close(pidfd);
    return err;
  }

  static int64_t wall_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

 private:
  void spawn(int r, const std::vector<std::string>& args, std::vector<std::string>& env) {
    Proc p;
    p.out_path = fmt::format("{}/rank{}.out", dir_, r);
    std::vector<std::string> argv = {SINEW_BIN_DIR "/ft_worker"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> av, ev;
    for (auto& a : argv) av.push_back(a.data());
    av.push_back(nullptr);
    for (auto& e : env) ev.push_back(e.data());
    ev.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, p.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    int rc = posix_spawn(&p.pid, av[0], &fa, nullptr, av.data(), ev.data());
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) throw IoError(fmt::format("cannot start {}: {}", av[0], std::strerror(rc)));
    procs_.push_back(p);
  }

  TcpStoreServer server_;
  std::string dir_;
  StorePtr store_;
  std::vector<Proc> procs_;
};

}  // namespace sinew::dist::ft
