// The worker processes of one `sinew run` attempt on this node: the dist
// layer's Job (spawning each in its own process group, killed if the
// launcher dies; reaping; stopping) plus what only the launcher does: its
// signals through a signalfd and each worker's output streamed to the
// console and log files.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sinew/core/deadline.h"
#include "sinew/core/unique_fd.h"
#include "sinew/dist/job.h"
#include "tools/sinew/run_output.h"

namespace sinew::cli {

using dist::describe_wait_status;
using dist::exit_code_of;
using dist::resolve_program;
using dist::succeeded;
using WorkerResult = dist::ExitRecord;

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
  UniqueFd stdout_log;           // empty: not logged
  UniqueFd stderr_log;
};

class WorkerGroup {
 public:
  WorkerGroup(SignalWatch& signals, std::string program_path, std::vector<std::string> argv,
              OutputPolicy policy, std::string host);

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
  void signal_running(int sig) { job_.signal_running(sig); }
  // Sends `first_signal` to every running worker, SIGKILL after `grace` (or
  // at once if the launcher receives another signal meanwhile); returns once
  // all are reaped or, if some cannot be, after a bounded wait.
  void stop(Millis grace, int first_signal);

  bool all_exited() const { return job_.all_exited(); }
  size_t size() const { return job_.size(); }
  const WorkerResult& result(size_t i) const { return job_.result(i); }
  std::vector<WorkerResult> results() const { return job_.results(); }
  // Drains the pipes and flushes partial lines.
  void finish_output();

 private:
  struct Streams {
    std::unique_ptr<OutputStream> out, err;
  };

  SignalWatch& signals_;
  std::string program_path_;
  std::vector<std::string> argv_;
  OutputPolicy policy_;
  std::string host_;
  std::vector<Streams> streams_;
  // Last, so destroyed first: it kills what still runs before the streams go.
  dist::Job job_;
};

}  // namespace sinew::cli
