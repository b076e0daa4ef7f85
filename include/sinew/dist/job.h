// The processes of a job on this host, as a launcher keeps them: spawning
// ranks with their own argv, environment and stdout/stderr, reaping them,
// signalling them, stopping them (a signal, then SIGKILL after a grace
// period) and the exit table. `sinew run`, the benchmarks that start ranks,
// and the multi-process tests all launch through it, so every one of them
// waits with a deadline and leaves no process behind.
//
// Spawning forks from the calling thread; a spawned process is killed when
// that thread exits (PR_SET_PDEATHSIG), so spawn from a thread that outlives
// the job (the main thread).
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sinew/core/deadline.h"
#include "sinew/core/unique_fd.h"

namespace sinew::dist {

// Where a spawned process's stdout or stderr goes.
struct Redirect {
  enum Kind {
    kInherit,     // the launcher's own
    kPipe,        // a pipe the launcher reads (Job::take_output)
    kFile,        // `path`, created (or appended to)
    kFd,          // `fd`, which the job takes over
    kLikeStdout,  // stderr only: wherever stdout goes
  } kind = kInherit;
  std::string path;
  bool append = false;
  UniqueFd fd;

  static Redirect inherit() { return {}; }
  static Redirect pipe() { return {kPipe, {}, false, {}}; }
  static Redirect file(std::string path, bool append = false) {
    return {kFile, std::move(path), append, {}};
  }
  static Redirect to_fd(UniqueFd fd) { return {kFd, {}, false, std::move(fd)}; }
  static Redirect like_stdout() { return {kLikeStdout, {}, false, {}}; }
};

struct ProcessSpec {
  // The file executed: a path, or a name looked up on PATH; empty: argv[0].
  std::string program;
  std::vector<std::string> argv;
  std::vector<std::string> env;  // the whole environment, "KEY=VALUE"
  Redirect out;
  Redirect err;
  // Labels for the exit table and messages.
  int rank = 0;
  int local_rank = 0;
  // Its own process group (signals reach its children too).
  bool own_process_group = true;
};

// One row of the exit table.
struct ExitRecord {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  int wait_status = 0;   // from waitpid
  bool reaped = false;   // false: still running (or the job gave up on it)
  bool stopped = false;  // stop() signalled it
  double elapsed_s = 0;
};

// "0", "3" or "SIGKILL".
std::string describe_wait_status(int wait_status);
// The shell's convention: the exit code, or 128 + the signal number.
int exit_code_of(int wait_status);
bool exited_with(const ExitRecord& r, int code);
bool killed_by(const ExitRecord& r, int sig);
inline bool succeeded(const ExitRecord& r) { return exited_with(r, 0); }

// The environment of this process, "KEY=VALUE", without the variables whose
// names `drop` holds for.
std::vector<std::string> inherited_env(const std::function<bool(const std::string& name)>& drop = {});
// Sets KEY=VALUE in `env`, replacing an earlier value.
void set_env(std::vector<std::string>& env, const std::string& key, const std::string& value);

// Resolves PROGRAM like execvp would: as given if it contains '/', else the
// first executable match on PATH. Throws InvalidArgument if there is none.
std::string resolve_program(const std::string& program);

class Job {
 public:
  Job();
  // SIGKILLs and reaps whatever still runs (bounded).
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // Starts one process; its index is size() - 1 afterwards. Throws IoError
  // if it cannot be executed (the message names the program and the rank).
  size_t spawn(ProcessSpec spec);

  size_t size() const;
  pid_t pid(size_t i) const;
  const ExitRecord& result(size_t i) const;
  std::vector<ExitRecord> results() const;
  // The launcher's end of a kPipe stdout (stream 1) or stderr (2); empty
  // for any other redirect or once taken.
  UniqueFd take_output(size_t i, int stream);

  // Reaps what has exited, without blocking; the indices reaped now.
  std::vector<size_t> reap();
  bool exited(size_t i);
  bool all_exited() const;

  // Blocks until the processes in `which` (all when empty) have exited, or
  // the deadline; true if they all have.
  bool wait(Deadline deadline, const std::vector<size_t>& which = {});
  // Waits up to `max_wait` for any process to exit; the indices reaped.
  std::vector<size_t> wait_any(Millis max_wait);

  // Sends `sig` to process i (to its process group if it has one), unless reaped.
  void signal(size_t i, int sig);
  // Sends `sig` to every process not yet reaped.
  void signal_running(int sig);

  // What stop() does between checks: waits up to `max_wait` (reaping);
  // returning true means "hurry": SIGKILL now.
  using StopTick = std::function<bool(Millis max_wait)>;
  // Sends `first_signal` to every running process, SIGKILL after `grace`
  // (or at once when `tick` says so), and waits a bounded time for them to
  // be reaped; true if every process was. Marks them `stopped`.
  bool stop(Millis grace, int first_signal, const StopTick& tick = {});

 private:
  struct Proc;
  std::vector<std::unique_ptr<Proc>> procs_;
};

}  // namespace sinew::dist
