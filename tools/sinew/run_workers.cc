#include "tools/sinew/run_workers.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>

#include "sinew/core/error.h"

namespace sinew::cli {
namespace {

constexpr int kTerminatingSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

sigset_t watched_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : kTerminatingSignals) sigaddset(&set, s);
  sigaddset(&set, SIGCHLD);
  return set;
}

std::string errno_text(int e) { return fmt::format("{} (errno {})", strerror(e), e); }

}  // namespace

SignalWatch::SignalWatch() {
  sigset_t set = watched_signals();
  if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0)
    throw IoError("sinew run: cannot block signals");
  fd_.reset(signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd_) throw IoError("sinew run: signalfd failed: " + errno_text(errno));
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

WorkerGroup::WorkerGroup(SignalWatch& signals, std::string program_path,
                         std::vector<std::string> argv, OutputPolicy policy, std::string host)
    : signals_(signals),
      program_path_(std::move(program_path)),
      argv_(std::move(argv)),
      policy_(std::move(policy)),
      host_(std::move(host)) {}

void WorkerGroup::spawn(WorkerSpec spec) {
  dist::ProcessSpec p;
  // argv[0] stays as the user spelled it, as execvp would leave it.
  p.program = program_path_;
  p.argv = argv_;
  p.env = std::move(spec.env);
  p.out = dist::Redirect::pipe();
  p.err = dist::Redirect::pipe();
  p.rank = spec.rank;
  p.local_rank = spec.local_rank;
  size_t i;
  try {
    i = job_.spawn(std::move(p));
  } catch (const IoError& e) {
    throw IoError(fmt::format("sinew run: {}", e.what()));
  }
  std::string prefix = fmt::format("[{}:{}]", host_, spec.rank);
  Streams s;
  for (int stream : {kStdout, kStderr}) {
    UniqueFd pipe = job_.take_output(i, stream == kStdout ? STDOUT_FILENO : STDERR_FILENO);
    fcntl(pipe.get(), F_SETFL, O_NONBLOCK);
    auto& slot = stream == kStdout ? s.out : s.err;
    slot = std::make_unique<OutputStream>(
        std::move(pipe), stream == kStdout ? STDOUT_FILENO : STDERR_FILENO, prefix,
        policy_.to_console(spec.local_rank, stream),
        std::move(stream == kStdout ? spec.stdout_log : spec.stderr_log));
  }
  streams_.push_back(std::move(s));
}

WorkerGroup::Events WorkerGroup::poll(Millis max_wait) {
  Events ev;
  std::vector<pollfd> fds;
  std::vector<OutputStream*> streams;
  fds.push_back({signals_.fd(), POLLIN, 0});
  for (auto& s : streams_) {
    for (OutputStream* o : {s.out.get(), s.err.get()}) {
      if (o->fd() < 0) continue;
      fds.push_back({o->fd(), POLLIN, 0});
      streams.push_back(o);
    }
  }
  int n = ::poll(fds.data(), fds.size(), static_cast<int>(max_wait.count()));
  if (n < 0 && errno != EINTR) throw IoError("sinew run: poll failed: " + errno_text(errno));
  for (size_t i = 1; n > 0 && i < fds.size(); ++i)
    if (fds[i].revents != 0) streams[i - 1]->on_readable();
  ev.signals = signals_.take();
  ev.exited = job_.reap();
  return ev;
}

void WorkerGroup::stop(Millis grace, int first_signal) {
  // Output keeps streaming while the workers stop; a second signal to the
  // launcher means "now".
  job_.stop(grace, first_signal, [this](Millis wait) { return !poll(wait).signals.empty(); });
}

void WorkerGroup::finish_output() {
  for (auto& s : streams_) {
    s.out->finish();
    s.err->finish();
  }
}

}  // namespace sinew::cli
