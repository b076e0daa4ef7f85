#include "tools/sinew/run_workers.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <optional>

#include "sinew/core/env.h"
#include "sinew/core/error.h"
#include "sinew/core/log.h"

namespace sinew::cli {
namespace {

constexpr int kTerminatingSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// How long to wait for a SIGKILLed worker to be reaped before reporting it
// as stuck (a process in uninterruptible sleep cannot die sooner).
constexpr Millis kReapAfterKill{10'000};

sigset_t watched_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : kTerminatingSignals) sigaddset(&set, s);
  sigaddset(&set, SIGCHLD);
  return set;
}

std::string errno_text(int e) { return fmt::format("{} (errno {})", strerror(e), e); }

struct Pipe {
  UniqueFd read, write;
};

Pipe make_pipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw IoError("sinew run: pipe2 failed: " + errno_text(errno));
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Runs in the forked child: only async-signal-safe calls until execve (the
// launcher has threads, e.g. the store server).
[[noreturn]] void exec_child(pid_t launcher, int out_fd, int err_fd, int status_fd,
                             const char* path, char* const* argv, char* const* envp) {
  setpgid(0, 0);
  // Dies with the launcher. The "parent" of PDEATHSIG is the forking thread,
  // so workers are always forked from the launcher's main thread.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(128 + SIGKILL);  // the launcher died before prctl
  dup2(out_fd, STDOUT_FILENO);
  dup2(err_fd, STDERR_FILENO);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execve(path, argv, envp);
  int e = errno;
  (void)!write(status_fd, &e, sizeof(e));
  _exit(127);
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

SignalWatch::SignalWatch() {
  sigset_t set = watched_signals();
  if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0)
    throw IoError("sinew run: cannot block signals");
  fd_.reset(signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (fd_.get() < 0) throw IoError("sinew run: signalfd failed: " + errno_text(errno));
  // A console that went away must not kill the launcher mid-shutdown.
  signal(SIGPIPE, SIG_IGN);
}

SignalWatch::~SignalWatch() {
  sigset_t set = watched_signals();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

std::vector<int> SignalWatch::take() {
  std::vector<int> out;
  signalfd_siginfo info;
  while (::read(fd_.get(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;
    if (first_ == 0) first_ = sig;
    out.push_back(sig);
  }
  return out;
}

std::string describe_wait_status(int wait_status) {
  if (WIFEXITED(wait_status)) return std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const char* abbrev = sigabbrev_np(WTERMSIG(wait_status));
    return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", WTERMSIG(wait_status));
  }
  return fmt::format("status {:#x}", wait_status);
}

int exit_code_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

bool succeeded(const WorkerResult& r) {
  return r.reaped && WIFEXITED(r.wait_status) && WEXITSTATUS(r.wait_status) == 0;
}

std::string resolve_program(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    if (access(program.c_str(), X_OK) != 0)
      throw InvalidArgument::make("PROGRAM", fmt::format("'{}'", program),
                                  fmt::format("an executable file ({})", errno_text(errno)));
    return program;
  }
  std::string path = getenv_opt("PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t colon = path.find(':', pos);
    std::string dir =
        path.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0)
      return candidate;
    if (colon == std::string::npos) break;
    pos = colon + 1;
  }
  throw InvalidArgument::make("PROGRAM", fmt::format("'{}'", program),
                              fmt::format("an executable on PATH ({})", path));
}

struct WorkerGroup::Worker {
  WorkerResult result;
  Clock::time_point start;
  std::unique_ptr<OutputStream> out;
  std::unique_ptr<OutputStream> err;
};

WorkerGroup::WorkerGroup(SignalWatch& signals, std::string program_path,
                         std::vector<std::string> argv, OutputPolicy policy, std::string host)
    : signals_(signals),
      program_path_(std::move(program_path)),
      argv_(std::move(argv)),
      policy_(std::move(policy)),
      host_(std::move(host)) {}

WorkerGroup::~WorkerGroup() {
  // Never leave workers behind, whatever made the launcher give up.
  try {
    if (!all_exited()) stop(Millis(0), SIGKILL);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sinew run: stopping workers failed: %s\n", e.what());
  }
}

void WorkerGroup::spawn(WorkerSpec spec) {
  Pipe out = make_pipe(), err = make_pipe(), status = make_pipe();
  std::vector<std::string> argv = argv_;
  std::vector<char*> c_argv = c_strings(argv);
  std::vector<char*> c_env = c_strings(spec.env);
  pid_t launcher = getpid();
  pid_t pid = fork();
  if (pid < 0) throw IoError("sinew run: fork failed: " + errno_text(errno));
  if (pid == 0)
    exec_child(launcher, out.write.get(), err.write.get(), status.write.get(),
               program_path_.c_str(), c_argv.data(), c_env.data());
  // Both sides set the group, so the launcher can signal it at once.
  setpgid(pid, pid);
  out.write.reset();
  err.write.reset();
  status.write.reset();

  auto w = std::make_unique<Worker>();
  w->result.rank = spec.rank;
  w->result.local_rank = spec.local_rank;
  w->result.pid = pid;
  w->start = Clock::now();

  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(status.read.get(), &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    throw IoError(fmt::format("sinew run: cannot execute '{}' for rank {}: {}", program_path_,
                              spec.rank, errno_text(exec_errno)));
  }

  fcntl(out.read.get(), F_SETFL, O_NONBLOCK);
  fcntl(err.read.get(), F_SETFL, O_NONBLOCK);
  std::string prefix = fmt::format("[{}:{}]", host_, spec.rank);
  w->out = std::make_unique<OutputStream>(std::move(out.read), STDOUT_FILENO, prefix,
                                          policy_.to_console(spec.local_rank, kStdout),
                                          std::move(spec.stdout_log));
  w->err = std::make_unique<OutputStream>(std::move(err.read), STDERR_FILENO, prefix,
                                          policy_.to_console(spec.local_rank, kStderr),
                                          std::move(spec.stderr_log));
  SINEW_INFO(kLaunch, "started rank {} (local rank {}) as pid {}", spec.rank, spec.local_rank, pid);
  workers_.push_back(std::move(w));
}

void WorkerGroup::reap(std::vector<size_t>* exited) {
  for (size_t i = 0; i < workers_.size(); ++i) {
    auto& w = *workers_[i];
    if (w.result.reaped) continue;
    int st = 0;
    pid_t r = waitpid(w.result.pid, &st, WNOHANG);
    if (r != w.result.pid) continue;
    w.result.reaped = true;
    w.result.wait_status = st;
    w.result.elapsed_s = seconds_between(w.start, Clock::now());
    SINEW_INFO(kLaunch, "rank {} (pid {}) exited: {}", w.result.rank, w.result.pid,
               describe_wait_status(st));
    if (exited) exited->push_back(i);
  }
}

WorkerGroup::Events WorkerGroup::poll(Millis max_wait) {
  Events ev;
  std::vector<pollfd> fds;
  std::vector<OutputStream*> streams;
  fds.push_back({signals_.fd(), POLLIN, 0});
  for (auto& w : workers_) {
    for (OutputStream* s : {w->out.get(), w->err.get()}) {
      if (s->fd() < 0) continue;
      fds.push_back({s->fd(), POLLIN, 0});
      streams.push_back(s);
    }
  }
  int n = ::poll(fds.data(), fds.size(), static_cast<int>(max_wait.count()));
  if (n < 0 && errno != EINTR) throw IoError("sinew run: poll failed: " + errno_text(errno));
  for (size_t i = 1; n > 0 && i < fds.size(); ++i)
    if (fds[i].revents != 0) streams[i - 1]->on_readable();
  ev.signals = signals_.take();
  reap(&ev.exited);
  return ev;
}

void WorkerGroup::signal_running(int sig) {
  for (auto& w : workers_) {
    if (w->result.reaped) continue;
    // Only unreaped workers: a reaped leader's group id could be reused.
    if (kill(-w->result.pid, sig) != 0 && errno == ESRCH) kill(w->result.pid, sig);
  }
}

void WorkerGroup::stop(Millis grace, int first_signal) {
  for (auto& w : workers_)
    if (!w->result.reaped) w->result.stopped = true;
  signal_running(first_signal);
  Deadline term_deadline = Deadline::after(grace);
  std::optional<Deadline> kill_deadline;
  bool hurry = false;  // a second signal to the launcher means "now"
  while (!all_exited()) {
    if (!kill_deadline && (hurry || term_deadline.expired())) {
      SINEW_INFO(kLaunch, "sending SIGKILL to the remaining workers");
      signal_running(SIGKILL);
      kill_deadline = Deadline::after(kReapAfterKill);
    } else if (kill_deadline && kill_deadline->expired()) {
      for (auto& w : workers_)
        if (!w->result.reaped)
          std::fprintf(stderr, "sinew run: rank %d (pid %d) did not exit after SIGKILL\n",
                       w->result.rank, static_cast<int>(w->result.pid));
      return;
    }
    Deadline next = kill_deadline ? *kill_deadline : term_deadline;
    auto wait = std::min<Millis>(Millis(50), std::chrono::duration_cast<Millis>(next.remaining()));
    if (!poll(std::max(wait, Millis(1))).signals.empty()) hurry = true;
  }
}

bool WorkerGroup::all_exited() const {
  for (auto& w : workers_)
    if (!w->result.reaped) return false;
  return true;
}

const WorkerResult& WorkerGroup::result(size_t i) const { return workers_.at(i)->result; }

std::vector<WorkerResult> WorkerGroup::results() const {
  std::vector<WorkerResult> out;
  for (auto& w : workers_) out.push_back(w->result);
  return out;
}

void WorkerGroup::finish_output() {
  for (auto& w : workers_) {
    w->out->finish();
    w->err->finish();
  }
}

}  // namespace sinew::cli
