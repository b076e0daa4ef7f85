#include "sinew/dist/job.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <optional>
#include <thread>

#include "sinew/core/env.h"
#include "sinew/core/error.h"
#include "sinew/core/log.h"

extern char** environ;

namespace sinew::dist {
namespace {
// Where resolve_program() looks for a PROGRAM without a '/', as execvp does.
const EnvParam<std::string> kPath{"PATH", "/usr/local/bin:/usr/bin:/bin",
                                  "where a program named without '/' is looked up", EnvSource::kLauncher};
}  // namespace

namespace {

// How long to wait for a SIGKILLed process to be reaped before reporting it
// as stuck (a process in uninterruptible sleep cannot die sooner).
constexpr Millis kReapAfterKill{10'000};
// The longest a wait sleeps between checks where no pidfd wakes it.
constexpr Millis kPollSlice{50};

std::string errno_text(int e) { return fmt::format("{} (errno {})", strerror(e), e); }

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The descriptors a child's stdout or stderr is set up from: `child` is
// dup2'ed onto the stream (-1: left as inherited), `parent` is the
// launcher's end of a pipe.
struct StreamFds {
  UniqueFd child;
  UniqueFd parent;
  bool like_stdout = false;
};

StreamFds open_stream(Redirect& r) {
  StreamFds s;
  switch (r.kind) {
    case Redirect::kInherit:
      break;
    case Redirect::kLikeStdout:
      s.like_stdout = true;
      break;
    case Redirect::kPipe: {
      int fds[2];
      if (pipe2(fds, O_CLOEXEC) != 0) throw IoError("job: pipe2 failed: " + errno_text(errno));
      s.parent.reset(fds[0]);
      s.child.reset(fds[1]);
      break;
    }
    case Redirect::kFile: {
      const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (r.append ? O_APPEND : O_TRUNC);
      s.child.reset(::open(r.path.c_str(), flags, 0644));
      if (!s.child) throw IoError(fmt::format("job: cannot open {}: {}", r.path, errno_text(errno)));
      break;
    }
    case Redirect::kFd:
      s.child = std::move(r.fd);
      break;
  }
  return s;
}

// What the forked child needs, prepared before fork: after it only
// async-signal-safe calls may run (the launcher has threads).
struct ChildSetup {
  pid_t launcher;
  bool own_group;
  int out_fd, err_fd;
  bool err_like_out;
  int status_fd;
  const char* path;
  char* const* argv;
  char* const* envp;
};

[[noreturn]] void exec_child(const ChildSetup& c) {
  if (c.own_group) setpgid(0, 0);
  // Dies with the launcher. The "parent" of PDEATHSIG is the forking thread.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != c.launcher) _exit(128 + SIGKILL);  // the launcher died before prctl
  if (c.out_fd >= 0) dup2(c.out_fd, STDOUT_FILENO);
  if (c.err_like_out) dup2(STDOUT_FILENO, STDERR_FILENO);
  else if (c.err_fd >= 0) dup2(c.err_fd, STDERR_FILENO);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execve(c.path, c.argv, c.envp);
  int e = errno;
  (void)!write(c.status_fd, &e, sizeof(e));
  _exit(127);
}

// The child's errno if its execve failed (it wrote it before exiting), else 0
// (the status pipe closed on exec).
int read_exec_errno(int status_fd) {
  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(status_fd, &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(sizeof(exec_errno)) ? exec_errno : 0;
}

Millis clamp_wait(Deadline d, Millis most) {
  auto left = std::chrono::duration_cast<Millis>(d.remaining());
  return std::clamp(left, Millis(0), most);
}

}  // namespace

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

bool exited_with(const ExitRecord& r, int code) {
  return r.reaped && WIFEXITED(r.wait_status) && WEXITSTATUS(r.wait_status) == code;
}

bool killed_by(const ExitRecord& r, int sig) {
  return r.reaped && WIFSIGNALED(r.wait_status) && WTERMSIG(r.wait_status) == sig;
}

std::vector<std::string> inherited_env(const std::function<bool(const std::string& name)>& drop) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    if (drop && drop(kv.substr(0, kv.find('=')))) continue;
    env.push_back(std::move(kv));
  }
  return env;
}

void set_env(std::vector<std::string>& env, const std::string& key, const std::string& value) {
  const std::string prefix = key + "=";
  std::erase_if(env, [&](const std::string& kv) { return kv.rfind(prefix, 0) == 0; });
  env.push_back(prefix + value);
}

std::string resolve_program(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    if (access(program.c_str(), X_OK) != 0)
      throw InvalidArgument::make("PROGRAM", fmt::format("'{}'", program),
                                  fmt::format("an executable file ({})", errno_text(errno)));
    return program;
  }
  std::string path = kPath.read().value_or("/usr/local/bin:/usr/bin:/bin");
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t colon = path.find(':', pos);
    std::string dir = path.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(candidate.c_str(), X_OK) == 0)
      return candidate;
    if (colon == std::string::npos) break;
    pos = colon + 1;
  }
  throw InvalidArgument::make("PROGRAM", fmt::format("'{}'", program),
                              fmt::format("an executable on PATH ({})", path));
}

struct Job::Proc {
  ExitRecord rec;
  Clock::time_point start;
  bool own_group = true;
  // Readable once the process has exited, so waits sleep until an exit
  // instead of polling; empty where pidfd_open is not available.
  UniqueFd pidfd;
  UniqueFd out, err;  // the launcher's ends of kPipe streams
};

Job::Job() = default;

Job::~Job() {
  // Never leave processes behind, whatever made the launcher give up.
  try {
    if (!all_exited()) stop(Millis(0), SIGKILL);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "job: stopping processes failed: %s\n", e.what());
  }
}

size_t Job::spawn(ProcessSpec spec) {
  if (spec.argv.empty()) throw InvalidArgument::make("argv", "(empty)", "a program to run");
  const std::string path = resolve_program(spec.program.empty() ? spec.argv[0] : spec.program);
  StreamFds out = open_stream(spec.out), err = open_stream(spec.err);
  int status[2];
  if (pipe2(status, O_CLOEXEC) != 0) throw IoError("job: pipe2 failed: " + errno_text(errno));
  UniqueFd status_read(status[0]), status_write(status[1]);
  std::vector<char*> c_argv = c_strings(spec.argv);
  std::vector<char*> c_env = c_strings(spec.env);
  const ChildSetup setup{getpid(),           spec.own_process_group, out.child.get(), err.child.get(),
                         err.like_stdout,    status_write.get(),     path.c_str(),    c_argv.data(),
                         c_env.data()};
  pid_t pid = fork();
  if (pid < 0) throw IoError("job: fork failed: " + errno_text(errno));
  if (pid == 0) exec_child(setup);
  // Both sides set the group, so the launcher can signal it at once.
  if (spec.own_process_group) setpgid(pid, pid);
  out.child.reset();
  err.child.reset();
  status_write.reset();
  if (int e = read_exec_errno(status_read.get())) {
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    throw IoError(fmt::format("cannot execute '{}' for rank {}: {}", path, spec.rank, errno_text(e)));
  }
  auto p = std::make_unique<Proc>();
  p->rec.rank = spec.rank;
  p->rec.local_rank = spec.local_rank;
  p->rec.pid = pid;
  p->start = Clock::now();
  p->own_group = spec.own_process_group;
  p->pidfd.reset(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  p->out = std::move(out.parent);
  p->err = std::move(err.parent);
  SINEW_INFO(kLaunch, "started rank {} (local rank {}) as pid {}", spec.rank, spec.local_rank, pid);
  procs_.push_back(std::move(p));
  return procs_.size() - 1;
}

size_t Job::size() const { return procs_.size(); }
pid_t Job::pid(size_t i) const { return procs_.at(i)->rec.pid; }
const ExitRecord& Job::result(size_t i) const { return procs_.at(i)->rec; }

std::vector<ExitRecord> Job::results() const {
  std::vector<ExitRecord> out;
  for (auto& p : procs_) out.push_back(p->rec);
  return out;
}

UniqueFd Job::take_output(size_t i, int stream) {
  auto& p = *procs_.at(i);
  return std::move(stream == STDOUT_FILENO ? p.out : p.err);
}

std::vector<size_t> Job::reap() {
  std::vector<size_t> exited;
  for (size_t i = 0; i < procs_.size(); ++i) {
    auto& p = *procs_[i];
    if (p.rec.reaped) continue;
    int st = 0;
    if (waitpid(p.rec.pid, &st, WNOHANG) != p.rec.pid) continue;
    p.rec.reaped = true;
    p.rec.wait_status = st;
    p.rec.elapsed_s = seconds_between(p.start, Clock::now());
    p.pidfd.reset();
    SINEW_INFO(kLaunch, "rank {} (pid {}) exited: {}", p.rec.rank, p.rec.pid, describe_wait_status(st));
    exited.push_back(i);
  }
  return exited;
}

bool Job::exited(size_t i) {
  reap();
  return procs_.at(i)->rec.reaped;
}

bool Job::all_exited() const {
  return std::all_of(procs_.begin(), procs_.end(), [](const auto& p) { return p->rec.reaped; });
}

std::vector<size_t> Job::wait_any(Millis max_wait) {
  std::vector<pollfd> fds;
  bool all_have_pidfds = true;
  for (auto& p : procs_) {
    if (p->rec.reaped) continue;
    if (p->pidfd) fds.push_back({p->pidfd.get(), POLLIN, 0});
    else all_have_pidfds = false;
  }
  auto exited = reap();
  if (!exited.empty() || (fds.empty() && all_have_pidfds)) return exited;
  // Without a pidfd for every process, wake now and then to check the rest.
  const Millis wait = all_have_pidfds ? max_wait : std::min(max_wait, Millis(5));
  if (!fds.empty()) ::poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
  else std::this_thread::sleep_for(wait);
  return reap();
}

bool Job::wait(Deadline deadline, const std::vector<size_t>& which) {
  auto done = [&] {
    if (which.empty()) return all_exited();
    return std::all_of(which.begin(), which.end(), [&](size_t i) { return procs_.at(i)->rec.reaped; });
  };
  for (;;) {
    reap();
    if (done()) return true;
    if (deadline.expired()) return false;
    wait_any(std::max(clamp_wait(deadline, Millis(kPollSlice * 20)), Millis(1)));
  }
}

void Job::signal(size_t i, int sig) {
  auto& p = *procs_.at(i);
  // Only an unreaped process: a reaped one's pid (or group id) could be reused.
  if (p.rec.reaped) return;
  if (!p.own_group || (kill(-p.rec.pid, sig) != 0 && errno == ESRCH)) kill(p.rec.pid, sig);
}

void Job::signal_running(int sig) {
  for (size_t i = 0; i < procs_.size(); ++i) signal(i, sig);
}

bool Job::stop(Millis grace, int first_signal, const StopTick& tick) {
  for (auto& p : procs_)
    if (!p->rec.reaped) p->rec.stopped = true;
  signal_running(first_signal);
  const Deadline term_deadline = Deadline::after(grace);
  std::optional<Deadline> kill_deadline;
  bool hurry = false;
  for (reap(); !all_exited(); reap()) {
    if (!kill_deadline && (hurry || term_deadline.expired())) {
      SINEW_INFO(kLaunch, "sending SIGKILL to the remaining processes");
      signal_running(SIGKILL);
      kill_deadline = Deadline::after(kReapAfterKill);
    } else if (kill_deadline && kill_deadline->expired()) {
      for (auto& p : procs_)
        if (!p->rec.reaped)
          std::fprintf(stderr, "sinew: rank %d (pid %d) did not exit after SIGKILL\n", p->rec.rank,
                       static_cast<int>(p->rec.pid));
      return false;
    }
    const Millis wait = std::max(clamp_wait(kill_deadline.value_or(term_deadline), kPollSlice), Millis(1));
    if (tick) hurry = tick(wait) || hurry;
    else wait_any(wait);
  }
  return true;
}

}  // namespace sinew::dist
