// The worker processes of one `sinew run` attempt on this node: spawning
// (each in its own process group, killed if the launcher dies), streaming
// their output, reaping them, forwarding signals and stopping them.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "sinew/core/deadline.h"
#include "tools/sinew/run_output.h"

namespace sinew::cli {

// Blocks SIGINT/SIGTERM/SIGHUP/SIGQUIT/SIGCHLD and delivers them through a
// signalfd, so the launcher's poll loop sees them. Construct it before any
// thread starts: threads inherit the mask, and a signal must not land on a
// thread that leaves it pending unread.
class SignalWatch {
 public:
  SignalWatch();
  ~SignalWatch();
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

  int fd() const { return fd_.get(); }
  // Terminating signals received since the last call (SIGCHLD is consumed).
  std::vector<int> take();
  // The first terminating signal ever received, or 0.
  int first() const { return first_; }

 private:
  UniqueFd fd_;
  int first_ = 0;
};

struct WorkerSpec {
  int rank = 0;
  int local_rank = 0;
  std::vector<std::string> env;  // the whole environment, "KEY=VALUE"
  UniqueFd stdout_log;           // -1: not logged
  UniqueFd stderr_log;
};

struct WorkerResult {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  int wait_status = 0;   // from waitpid
  bool reaped = false;   // false: still running when the launcher gave up on it
  bool stopped = false;  // the launcher signalled it (after another failure or a signal)
  double elapsed_s = 0;
};

// "0", "3" or "SIGKILL".
std::string describe_wait_status(int wait_status);
// The shell's convention: the exit code, or 128 + the signal number.
int exit_code_of(int wait_status);
bool succeeded(const WorkerResult& r);

class WorkerGroup {
 public:
  WorkerGroup(SignalWatch& signals, std::string program_path, std::vector<std::string> argv,
              OutputPolicy policy, std::string host);
  ~WorkerGroup();

  // Starts one worker; throws IoError if the program cannot be executed.
  void spawn(WorkerSpec spec);

  struct Events {
    std::vector<size_t> exited;  // indices of workers reaped in this call
    std::vector<int> signals;    // terminating signals the launcher received
  };
  // Streams output and reaps exits until something happens or `max_wait`
  // passes.
  Events poll(Millis max_wait);

  // Sends `sig` to the process group of every running worker.
  void signal_running(int sig);
  // Sends `first_signal` to every running worker, SIGKILL after `grace` (or
  // at once if the launcher receives another signal meanwhile); returns once
  // all are reaped or, if some cannot be, after a bounded wait.
  void stop(Millis grace, int first_signal);

  bool all_exited() const;
  size_t size() const { return workers_.size(); }
  const WorkerResult& result(size_t i) const;
  std::vector<WorkerResult> results() const;
  // Drains the pipes and flushes partial lines.
  void finish_output();

 private:
  struct Worker;
  void reap(std::vector<size_t>* exited);

  SignalWatch& signals_;
  std::string program_path_;
  std::vector<std::string> argv_;
  OutputPolicy policy_;
  std::string host_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

// Resolves PROGRAM like execvp would: as given if it contains '/', else the
// first executable match on PATH. Throws InvalidArgument if there is none.
std::string resolve_program(const std::string& program);

}  // namespace sinew::cli
