// The fault tests' harness, on the dist layer's Job: hosts a job store,
// spawns ft_worker ranks (or another program's) and joiners as real
// processes with `sinew run`'s worker environment, and injects failures
// from outside:
// SIGKILL, SIGSTOP/SIGCONT, or a TCP connection of a live rank shut down
// through pidfd_getfd. Parses each rank's result line.
#pragma once

#include <fmt/format.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sinew/core/deadline.h"
#include "sinew/core/error.h"
#include "sinew/dist/job.h"
#include "sinew/dist/launch_protocol.h"
#include "sinew/dist/tcp_store.h"

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

// One rank's process: its exit status (once reaped) and its output file.
struct Proc {
  std::string out_path;
  int status = 0;
  bool reaped = false;
  std::string output() const {
    std::ifstream f(out_path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  bool exited_ok() const { return reaped && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  bool excluded() const { return reaped && WIFEXITED(status) && WEXITSTATUS(status) == 3; }
  bool sigkilled() const { return reaped && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL; }
};

// What a job runs: `program args...` as every rank, with `env` added to the
// launcher's worker environment.
struct JobSpec {
  std::string program = SINEW_BIN_DIR "/ft_worker";
  std::vector<std::string> args;
  std::vector<std::string> env;
  int joiners = 0;
};

class Job {
 public:
  // `world` ft_worker ranks (RANK 0..world-1), then `joiners` processes with
  // SINEW_JOIN=1 (original ranks world, world+1, ...); a 1 s heartbeat timeout.
  Job(int world, const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {},
      int joiners = 0)
      : Job(world, JobSpec{SINEW_BIN_DIR "/ft_worker", args, ft_env(extra_env), joiners}) {}

  Job(int world, const JobSpec& spec) : server_("127.0.0.1", 0, kToken) {
    char tmpl[] = "/tmp/sinew-fi-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    for (int r = 0; r < world + spec.joiners; ++r) spawn(r, world, spec);
    TcpStoreOptions o;
    o.port = server_.port();
    o.token = kToken;
    o.timeout = Millis(5000);
    store_ = make_prefix_store(launch::keys::attempt_space(0), make_tcp_store(o));
  }
  ~Job() {
    job_.stop(Millis(0), SIGKILL);
    // SINEW_TEST_KEEP_DIR=1 keeps the ranks' output for a post-mortem.
    if (!std::getenv("SINEW_TEST_KEEP_DIR")) std::filesystem::remove_all(dir_);
  }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  int count() const { return static_cast<int>(job_.size()); }
  Proc proc(int r) const {
    const ExitRecord& e = job_.result(r);
    return Proc{out_path(r), e.wait_status, e.reaped};
  }
  bool running(int r) const { return !job_.result(r).reaped; }
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
    if (sig == SIGSTOP) paused_.insert(r);
    if (sig == SIGCONT) paused_.erase(r);
    job_.signal(r, sig);
  }

  // Waits until every process has exited but the ones in `skip` and those
  // paused by signal(r, SIGSTOP); false (and the hung ones named in `hung`)
  // past the limit. The skipped ones are left running.
  bool wait(Millis limit, std::vector<int>* hung = nullptr, const std::vector<int>& skip = {}) {
    std::vector<size_t> which;
    for (int r = 0; r < count(); ++r)
      if (!paused_.count(r) && std::find(skip.begin(), skip.end(), r) == skip.end()) which.push_back(r);
    if (job_.wait(Deadline::after(limit), which)) return true;
    for (size_t r : which)
      if (running(static_cast<int>(r)) && hung) hung->push_back(static_cast<int>(r));
    return false;
  }

  // Kills and reaps r (stopped or hung), keeping its status.
  void reap(int r) {
    job_.signal(r, SIGKILL);
    job_.signal(r, SIGCONT);
    job_.wait(Deadline::after(10s), {static_cast<size_t>(r)});
    paused_.erase(r);
  }

  // Established TCP connections between two ranks: {fd in r, peer rank}.
  std::vector<std::pair<int, int>> rank_connections(int r) const {
    struct Sock {
      unsigned local = 0, remote = 0;
    };
    std::map<std::string, Sock> by_inode;  // established sockets on the loopback, by inode
    for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
      std::ifstream f(fmt::format("/proc/{}/net/{}", job_.pid(r), std::filesystem::path(table).filename().string()));
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
      for (const auto& e : std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", job_.pid(who)), ec)) {
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
        if (peer == r || !running(peer)) continue;
        for (const auto& [pfd, ps] : sockets_of(peer))
          if (ps.local == s.remote && ps.remote == s.local) out.push_back({fd, peer});
      }
    }
    return out;
  }

  // Shuts down rank r's socket `fd` from outside: a connection dropped under
  // a live process. Returns errno (0 on success).
  int shutdown_socket(int r, int fd) {
    int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, job_.pid(r), 0));
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
  static constexpr const char* kToken = "secret-token";

  static std::vector<std::string> ft_env(std::vector<std::string> extra) {
    extra.insert(extra.begin(), "SINEW_FT_HEARTBEAT_TIMEOUT_MS=1000");
    return extra;
  }

  std::string out_path(int r) const { return fmt::format("{}/rank{}.out", dir_, r); }

  // As `sinew run` starts a worker; a joiner takes a slot (RANK < WORLD_SIZE),
  // as `sinew run` respawns one, and FT_ORIG names it.
  void spawn(int r, int world, const JobSpec& spec) {
    namespace env = launch::env;
    const int slot = r < world ? r : 0;
    ProcessSpec p;
    p.argv = {spec.program};
    p.argv.insert(p.argv.end(), spec.args.begin(), spec.args.end());
    p.env = inherited_env();
    for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
             {env::kRank, std::to_string(slot)},
             {env::kLocalRank, std::to_string(slot)},
             {"FT_ORIG", std::to_string(r)},
             {env::kWorldSize, std::to_string(world)},
             {env::kLocalWorldSize, std::to_string(world)},
             {env::kMasterAddr, "127.0.0.1"},
             {env::kMasterPort, std::to_string(server_.port())},
             {env::kStoreToken, kToken},
             {env::kStoreHosted, "1"},
             {env::kJoin, r >= world ? "1" : "0"}})
      set_env(p.env, k, v);
    for (const auto& kv : spec.env) set_env(p.env, kv.substr(0, kv.find('=')), kv.substr(kv.find('=') + 1));
    p.out = Redirect::file(out_path(r));
    p.err = Redirect::like_stdout();
    p.rank = r;
    job_.spawn(std::move(p));
  }

  TcpStoreServer server_;
  std::string dir_;
  StorePtr store_;
  std::set<int> paused_;
  dist::Job job_;
};

}  // namespace sinew::dist::ft
