// When dumps happen: on request from the op path (bounded wait), on a
// signal, on a write to the dump pipe, and on a dump request in the job
// store. One background thread per process does the writing, so a caller
// on the op path waits at most SINEW_FR_DUMP_TIMEOUT_MS.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "recorder.h"
#include "sinew/core/log.h"
#include "sinew/dist/flight_recorder.h"

namespace sinew::dist::fr {

std::string dump_path_for_pipe(const std::string& prefix);

namespace {

constexpr const char* kRequestKey = "sinew/fr/dump_requests";

struct Job {
  std::string reason, detail;
  bool done = false;
  std::string path;
};

struct Service {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Job>> jobs;
  int wake_fd = -1;
  std::thread::id thread_id;
  bool running = false;
  StorePtr store;
  int64_t requests_seen = 0;
  bool post_request = false;  // the service thread posts it: the store may be slow or gone
  std::shared_ptr<Job> last_failure;
  int64_t last_failure_ns = 0;
};

Service& service() {
  static Service* s = new Service();  // lives until exit, like the recorder
  return *s;
}

volatile sig_atomic_t g_signalled = 0;
volatile sig_atomic_t g_terminated = 0;
unsigned g_term_alarm_s = 2;

void on_signal(int) {
  g_signalled = 1;
  const uint64_t one = 1;
  if (service().wake_fd >= 0) [[maybe_unused]] auto n = ::write(service().wake_fd, &one, sizeof(one));
}

// A launcher stops the other workers with SIGTERM when one fails: dump what
// this rank saw, then die of the signal as before. alarm() ends the process
// if the dump cannot finish.
void on_terminate(int) {
  g_terminated = 1;
  ::alarm(g_term_alarm_s);
  const uint64_t one = 1;
  if (service().wake_fd >= 0) [[maybe_unused]] auto n = ::write(service().wake_fd, &one, sizeof(one));
}

bool install_if_default(int sig, void (*handler)(int)) {
  struct sigaction old {};
  ::sigaction(sig, nullptr, &old);
  if (old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) return false;
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  return ::sigaction(sig, &sa, nullptr) == 0;
}

std::atomic<int64_t> g_last_dump_ns{0};

// Held while a dump is written. At exit the process waits (bounded) for a
// dump in progress, then no new one starts: static objects that logging and
// rendering use are about to be destroyed.
std::atomic<int> g_writing{0};
std::atomic<bool> g_exiting{false};

std::string write_dump(const std::string& reason, const std::string& detail) {
  g_writing.fetch_add(1);
  struct Done {
    ~Done() { g_writing.fetch_sub(1); }
  } done;
  const std::string path = dump_path();
  if (g_exiting.load()) return path;
  g_last_dump_ns.store(steady_ns());
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  try {
    const std::string text = render_json(reason, detail);
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f << text;
      f.close();
      if (!f) throw std::runtime_error(fmt::format("cannot write {}", tmp));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw std::runtime_error(fmt::format("cannot rename {} to {}", tmp, path));
    SINEW_WARN(kColl, "[FR] flight recorder dump ({}) written to {}", reason, path);
  } catch (const std::exception& e) {
    std::remove(tmp.c_str());
    SINEW_WARN(kColl, "[FR] flight recorder dump ({}) to {} failed: {}", reason, path, e.what());
  }
  return path;
}

}  // namespace

void wake() {
  const uint64_t one = 1;
  if (service().wake_fd >= 0) [[maybe_unused]] auto n = ::write(service().wake_fd, &one, sizeof(one));
}

namespace {

int open_pipe() {
  const Config& c = Recorder::get().config();
  if (c.pipe_prefix.empty()) return -1;
  const std::string path = dump_path_for_pipe(c.pipe_prefix);
  ::unlink(path.c_str());
  if (::mkfifo(path.c_str(), 0600) != 0) {
    SINEW_WARN(kColl, "[FR] cannot create dump pipe {}: {}", path, std::strerror(errno));
    return -1;
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  // Our own writer end keeps poll() from reporting a hang-up between writers.
  if (fd >= 0) ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  static std::string keep;
  keep = path;
  std::atexit([] { ::unlink(keep.c_str()); });
  SINEW_INFO(kColl, "[FR] write to {} to dump the flight recorder", path);
  return fd;
}

void poll_store() {
  Service& s = service();
  StorePtr store;
  {
    std::lock_guard<std::mutex> g(s.mu);
    store = s.store;
  }
  if (!store) return;
  int64_t n = 0;
  try {
    bool post = false;
    {
      std::lock_guard<std::mutex> g(s.mu);
      std::swap(post, s.post_request);
    }
    n = store->add(kRequestKey, post ? 1 : 0);
    if (post) {
      std::lock_guard<std::mutex> g(s.mu);
      s.requests_seen = std::max(s.requests_seen, n);  // this rank dumps on its own
      return;
    }
  } catch (const Error& e) {
    SINEW_DEBUG(kColl, "[FR] cannot read dump requests from the store: {}", e.what());
    return;
  }
  bool dump = false;
  {
    std::lock_guard<std::mutex> g(s.mu);
    if (n > s.requests_seen) {
      s.requests_seen = n;
      // This rank's own failure dump (moments ago) already holds its view.
      dump = !s.last_failure || steady_ns() - s.last_failure_ns > 2'000'000'000;
    }
  }
  if (dump) write_dump("store_request", "another rank asked every rank to dump");
}

void loop() {
  Service& s = service();
  const int pipe_fd = open_pipe();
  for (;;) {
    pollfd fds[2] = {{s.wake_fd, POLLIN, 0}, {pipe_fd, POLLIN, 0}};
    ::poll(fds, pipe_fd >= 0 ? 2 : 1, 200);
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      [[maybe_unused]] auto n = ::read(s.wake_fd, &v, sizeof(v));
    }
    if (pipe_fd >= 0 && (fds[1].revents & POLLIN)) {
      char buf[256];
      while (::read(pipe_fd, buf, sizeof(buf)) > 0) {
      }
      write_dump("pipe", "a write to the dump pipe");
    }
    if (g_signalled) {
      g_signalled = 0;
      write_dump("signal", "a dump signal");
    }
    if (g_terminated) {
      // A dump of moments ago (the failure that made the launcher stop us)
      // says more about why than "sigterm" would.
      const int64_t since = steady_ns() - g_last_dump_ns.load();
      if (!Recorder::get().snapshot().empty() && (g_last_dump_ns.load() == 0 || since > 2'000'000'000))
        write_dump("sigterm", "SIGTERM (the launcher stopped this worker)");
      ::signal(SIGTERM, SIG_DFL);
      ::raise(SIGTERM);
    }
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::lock_guard<std::mutex> g(s.mu);
        if (s.jobs.empty()) break;
        job = s.jobs.front();
        s.jobs.pop_front();
      }
      std::string path = write_dump(job->reason, job->detail);
      {
        std::lock_guard<std::mutex> g(s.mu);
        job->path = path;
        job->done = true;
      }
      s.cv.notify_all();
    }
    poll_store();
  }
}

}  // namespace

void start_service() {
  Service& s = service();
  s.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  const Config& c = Recorder::get().config();
  if (c.dump_signal != 0 && !install_if_default(c.dump_signal, on_signal))
    SINEW_INFO(kColl, "[FR] signal {} already has a handler; dump on signal is off", c.dump_signal);
  g_term_alarm_s = static_cast<unsigned>(c.dump_timeout_ms / 1000 + 1);
  if (c.dump_on_failure) install_if_default(SIGTERM, on_terminate);
  std::atexit([] {
    g_exiting = true;  // no dump starts after this; wait (bounded) for one in progress
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(Recorder::get().config().dump_timeout_ms);
    while (g_writing.load() > 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  std::thread t(loop);
  {
    std::lock_guard<std::mutex> g(s.mu);
    s.thread_id = t.get_id();
    s.running = true;
  }
  t.detach();  // runs until exit; it only sleeps in poll() between requests
}

std::string dump_now(const std::string& reason, const std::string& detail, bool wait) {
  Service& s = service();
  const bool failure = reason == "timeout" || reason == "peer_lost" || reason == "revoke" || reason == "abort";
  std::unique_lock<std::mutex> lk(s.mu);
  std::shared_ptr<Job> job;
  // One failure fails many ops at once (a revoke fails everything pending):
  // they share the dump written for the first.
  if (failure && s.last_failure && steady_ns() - s.last_failure_ns < 1'000'000'000) job = s.last_failure;
  if (!job) {
    job = std::make_shared<Job>();
    job->reason = reason;
    job->detail = detail;
    if (failure) {
      s.last_failure = job;
      s.last_failure_ns = steady_ns();
    }
    if (!s.running || std::this_thread::get_id() == s.thread_id) {
      lk.unlock();
      std::string path = write_dump(reason, detail);
      lk.lock();
      job->path = path;
      job->done = true;
      return path;
    }
    s.jobs.push_back(job);
    lk.unlock();
    wake();
    lk.lock();
  }
  if (!wait) return dump_path();
  const auto limit = std::chrono::milliseconds(Recorder::get().config().dump_timeout_ms);
  if (!s.cv.wait_for(lk, limit, [&] { return job->done; })) {
    SINEW_WARN(kColl, "[FR] dump ({}) not finished after {} ms; continuing (it completes in the background)",
               reason, limit.count());
    return dump_path();
  }
  return job->path;
}

std::string dump_path_for_pipe(const std::string& prefix) {
  const std::string d = dump_path();
  const std::string& p = Recorder::get().config().prefix;
  return prefix + d.substr(p.size()) + ".pipe";
}

}  // namespace sinew::dist::fr

namespace sinew::dist {

void watch_flight_recorder_requests(StorePtr store) {
  if (!fr::Recorder::get().enabled() || !store) return;
  auto& s = fr::service();
  // Our own connection: a rank blocked in a long store wait must still see
  // dump requests.
  try {
    if (StorePtr own = store->clone()) store = std::move(own);
  } catch (const Error& e) {
    SINEW_DEBUG(kColl, "[FR] no separate store connection ({}); sharing the job store's", e.what());
  }
  int64_t seen = 0;
  try {
    seen = store->add(fr::kRequestKey, 0);
  } catch (const Error& e) {
    SINEW_DEBUG(kColl, "[FR] cannot read dump requests from the store: {}", e.what());
  }
  std::lock_guard<std::mutex> g(s.mu);
  s.store = std::move(store);
  s.requests_seen = seen;
}

void request_flight_recorder_dumps(const std::string& reason) {
  auto& s = fr::service();
  {
    std::lock_guard<std::mutex> g(s.mu);
    if (!s.store) return;
    s.post_request = true;
  }
  SINEW_DEBUG(kColl, "[FR] asking every rank to dump ({})", reason);
  fr::wake();
}

}  // namespace sinew::dist
