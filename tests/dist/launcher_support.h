// What the launcher tests share: a process (by default the built `sinew`)
// with its stdout and stderr captured, on the dist layer's Job; parsers for
// the "[host:rank] " lines `sinew run` prints; and an environment scoped to
// one test.
#pragma once

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sinew/core/error.h"
#include "sinew/core/host.h"
#include "sinew/core/unique_fd.h"
#include "sinew/dist/job.h"
#include "sinew/dist/launch_protocol.h"

extern char** environ;

namespace sinew::dist::launcher_test {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

inline const std::string kSinew = SINEW_BIN_DIR "/sinew";
inline const std::string kWorker = SINEW_BIN_DIR "/launch_worker";

// What a launcher sets for its workers (or reads as its own options): the
// tests' processes must not inherit it from whoever runs the tests.
inline bool launcher_var(const std::string& key) {
  if (launch::env::is_worker_var(key) || key == "OMP_NUM_THREADS" || key == "SINEW_RUN_KILL_GRACE_S") return true;
  return key.rfind("PET_", 0) == 0 || key.rfind("OMPI_", 0) == 0 || key.rfind("SLURM_", 0) == 0;
}

// A process (by default `sinew`) with its stdout and stderr captured.
class Launcher {
 public:
  Launcher(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {},
           const std::string& program = kSinew) {
    ProcessSpec p;
    p.argv = {program};
    p.argv.insert(p.argv.end(), args.begin(), args.end());
    auto overridden = [&](const std::string& name) {
      return std::any_of(extra_env.begin(), extra_env.end(),
                         [&](const std::string& kv) { return kv.substr(0, kv.find('=')) == name; });
    };
    p.env = inherited_env([&](const std::string& name) { return launcher_var(name) || overridden(name); });
    p.env.insert(p.env.end(), extra_env.begin(), extra_env.end());
    p.out = Redirect::pipe();
    p.err = Redirect::pipe();
    try {
      job_.spawn(std::move(p));
    } catch (const Error& e) {
      ADD_FAILURE() << "cannot spawn " << program << ": " << e.what();
      return;
    }
    out_fd_ = job_.take_output(0, STDOUT_FILENO);
    err_fd_ = job_.take_output(0, STDERR_FILENO);
  }

  pid_t pid() const { return job_.pid(0); }
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

  // Reads output until `done` holds (true) or `timeout` passes (false).
  bool read_until(const std::function<bool()>& done, milliseconds timeout) {
    const Deadline deadline = Deadline::after(timeout);
    while (!done()) {
      auto left = std::chrono::duration_cast<milliseconds>(deadline.remaining());
      if (left.count() <= 0) return false;
      if (!read_some(std::min<int64_t>(left.count(), 100)) && reap()) return done();
    }
    return true;
  }

  // Waits for the process to exit, reading its output; the exit code (or
  // 128 + signal), or -1 if it is still running after `timeout`.
  int wait(milliseconds timeout = seconds(20)) {
    read_until([this] { return reap() && !out_fd_ && !err_fd_; }, timeout);
    if (!reap()) return -1;
    return exit_code_of(job_.result(0).wait_status);
  }

  bool reap() { return job_.size() == 0 || job_.exited(0); }

  // Pids the workers printed as "pid=N".
  std::vector<pid_t> worker_pids() const {
    std::vector<pid_t> pids;
    std::regex re("\\] pid=(\\d+)");
    for (auto it = std::sregex_iterator(out_.begin(), out_.end(), re); it != std::sregex_iterator(); ++it)
      pids.push_back(std::stoi((*it)[1]));
    return pids;
  }

 private:
  // Reads what is available within `ms`; false once both pipes are closed.
  bool read_some(int64_t ms) {
    reap();
    std::vector<pollfd> fds;
    if (out_fd_) fds.push_back({out_fd_.get(), POLLIN, 0});
    if (err_fd_) fds.push_back({err_fd_.get(), POLLIN, 0});
    if (fds.empty()) {
      if (job_.size() > 0) job_.wait_any(milliseconds(std::min<int64_t>(ms, 10)));
      return false;
    }
    if (poll(fds.data(), fds.size(), static_cast<int>(ms)) <= 0) return true;
    for (auto& p : fds) {
      if (p.revents == 0) continue;
      char buf[4096];
      ssize_t n = read(p.fd, buf, sizeof(buf));
      UniqueFd& fd = p.fd == out_fd_.get() ? out_fd_ : err_fd_;
      std::string& text = p.fd == out_fd_.get() ? out_ : err_;
      if (n > 0) text.append(buf, static_cast<size_t>(n));
      else fd.reset();
    }
    return true;
  }

  Job job_;
  UniqueFd out_fd_, err_fd_;
  std::string out_, err_;
};


inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// The lines that start with "[host:rank] ".
inline std::vector<std::string> rank_lines(const std::string& text, int rank) {
  std::string prefix = "[" + host_name() + ":" + std::to_string(rank) + "] ";
  std::vector<std::string> out;
  for (auto& l : lines_of(text))
    if (l.rfind(prefix, 0) == 0) out.push_back(l.substr(prefix.size()));
  return out;
}

// Whether `sinew run`'s exit table (on its stderr) has the row of this rank,
// local rank, exit ("3", "SIGTERM") and note (a regex, e.g. "<- first failure").
inline ::testing::AssertionResult has_table_row(const std::string& err, int rank, int local_rank,
                                                const std::string& exit, const std::string& note) {
  std::regex row("\\n +" + std::to_string(rank) + " +" + std::to_string(local_rank) + " +\\d+ +" + exit +
                 " +[0-9.]+s  " + note + "\\n");
  if (std::regex_search(err, row)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "no row for rank " << rank << " exit " << exit << " '" << note << "' in:\n"
                                       << err;
}

// "KEY=VALUE KEY=VALUE" -> map.
inline std::map<std::string, std::string> parse_kv(const std::string& line) {
  std::map<std::string, std::string> kv;
  std::istringstream in(line);
  for (std::string item; in >> item;) {
    auto eq = item.find('=');
    if (eq != std::string::npos) kv[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return kv;
}

// A process that is gone: no such pid, or a zombie (not yet reaped by its new parent).
inline bool process_gone(pid_t pid) {
  if (kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto close = s.rfind(')');
  return close != std::string::npos && close + 2 < s.size() && s[close + 2] == 'Z';
}

// Waits (bounded) until every pid is gone, reaping orphans handed to us as
// child subreaper.
inline bool all_gone(const std::vector<pid_t>& pids, milliseconds timeout = seconds(5)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    bool gone = true;
    for (pid_t p : pids) gone = gone && process_gone(p);
    if (gone) return true;
    if (std::chrono::steady_clock::now() > deadline) {
      for (pid_t p : pids)  // leave nothing behind, even when failing
        if (!process_gone(p)) kill(p, SIGKILL);
      return false;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
}

inline int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// Sets variables for one test and restores the environment afterwards.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::map<std::string, std::string> vars) {
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      std::string key = kv.substr(0, kv.find('='));
      if (launcher_var(key) || key.rfind("TORCHELASTIC_", 0) == 0)
        saved_[key] = kv.substr(key.size() + 1);
    }
    for (auto& [k, v] : saved_) unsetenv(k.c_str());
    for (auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
    set_ = std::move(vars);
  }
  ~ScopedEnv() {
    for (auto& [k, v] : set_) unsetenv(k.c_str());
    for (auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
  }

 private:
  std::map<std::string, std::string> saved_, set_;
};

}  // namespace sinew::dist::launcher_test
