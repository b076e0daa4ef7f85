#include "tools/sinew/run_job.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>

#include "sinew/core/env.h"
#include "sinew/core/host.h"
#include "sinew/core/error.h"
#include "sinew/core/log.h"
#include "sinew/dist/launch_protocol.h"
#include "tools/sinew/cli_parse.h"
#include "sinew/dist/tcp_store.h"
#include "tools/sinew/run_workers.h"

extern char** environ;

namespace sinew::cli {
namespace {

namespace env = dist::launch::env;
namespace keys = dist::launch::keys;

const EnvParam<int64_t> kKillGraceS{"SINEW_RUN_KILL_GRACE_S", 5,
                                    "seconds sinew run waits after signalling workers to stop "
                                    "before it SIGKILLs them"};
const EnvParam<int64_t> kJoinTimeoutS{"SINEW_RUN_JOIN_TIMEOUT_S", 600,
                                      "seconds sinew run waits for every node's launcher to join "
                                      "an attempt"};

// How long node 0 keeps the store up for the other launchers to read the
// final outcome.
constexpr Millis kLeaveTimeout{30'000};

// The launcher was asked to stop while waiting for something other than its
// workers.
struct Interrupted {
  int sig;
};

Millis millis(double seconds) { return Millis(static_cast<int64_t>(seconds * 1000)); }

// Sleeps up to `wait`, returning early (by throwing) if the launcher is signalled.
void sleep_unless_signalled(SignalWatch& signals, Millis wait) {
  pollfd p{signals.fd(), POLLIN, 0};
  ::poll(&p, 1, static_cast<int>(wait.count()));
  auto got = signals.take();
  if (!got.empty()) throw Interrupted{got.front()};
}

// The launchers of all nodes agree on each attempt through keys in the job
// store, under keys::run_space(run id).
class Rendezvous {
 public:
  Rendezvous(const RunConfig& c, const std::string& token, SignalWatch& signals)
      : c_(c), signals_(signals), port_(c.store_port) {
    if (c.node_rank == 0) {
      server_ = std::make_unique<dist::TcpStoreServer>(c.store_host, c.store_port, token);
      port_ = server_->port();
    }
    if (c.standalone)
      std::fprintf(stderr, "sinew run: standalone rendezvous at %s:%d (run id %s)\n",
                   c.store_host.c_str(), port_, c.run_id.c_str());
    Deadline deadline = Deadline::after(std::chrono::seconds(kJoinTimeoutS.get()));
    dist::TcpStoreOptions o;
    o.host = c.store_host;
    o.port = port_;
    o.token = token;
    o.timeout = Millis(30'000);
    o.connect_timeout = Millis(1'000);
    // Other nodes may start before node 0 listens: retry, staying responsive to signals.
    for (;;) {
      try {
        raw_ = dist::make_tcp_store(o);
        store_ = dist::make_prefix_store(keys::run_space(c.run_id), raw_);
        break;
      } catch (const RecoverableError& e) {
        if (deadline.expired())
          throw TimeoutError(
              fmt::format("sinew run: cannot reach the rendezvous store at {}:{} within {} s "
                          "(SINEW_RUN_JOIN_TIMEOUT_S): {}. Is node 0's launcher running there?",
                          o.host, o.port, kJoinTimeoutS.get(), e.what()));
        sleep_unless_signalled(signals_, Millis(200));
      }
    }
  }

  const std::string& host() const { return c_.store_host; }
  int port() const { return port_; }

  struct Membership {
    int rank_offset = 0;
    int world_size = 0;
  };

  // Waits for every node's launcher to join `attempt`; nodes may run
  // different numbers of workers, ranked in node order.
  Membership join(int attempt) {
    store_->set(keys::run_nproc(attempt, c_.node_rank), std::to_string(c_.nproc_per_node));
    std::vector<std::string> nproc_keys;
    for (int n = 0; n < c_.nnodes; ++n) nproc_keys.push_back(keys::run_nproc(attempt, n));
    Deadline deadline = Deadline::after(std::chrono::seconds(kJoinTimeoutS.get()));
    while (!store_->check(nproc_keys)) {
      if (deadline.expired()) {
        std::vector<int> missing;
        for (int n = 0; n < c_.nnodes; ++n)
          if (!store_->check({nproc_keys[n]})) missing.push_back(n);
        throw TimeoutError(
            fmt::format("sinew run: node ranks {} did not join attempt {} within {} s "
                        "(SINEW_RUN_JOIN_TIMEOUT_S); start `sinew run` on every node with the same "
                        "--rdzv-endpoint, --rdzv-id and --store-token",
                        missing, attempt, kJoinTimeoutS.get()));
      }
      sleep_unless_signalled(signals_, poll_interval());
    }
    Membership m;
    auto values = store_->multi_get(nproc_keys);
    for (int n = 0; n < c_.nnodes; ++n) {
      std::string text = dist::to_string(values[n]);
      const int v = static_cast<int>(parse_int(nproc_keys[n], text, 1, std::numeric_limits<int>::max(),
                                               "a worker count written by `sinew run` (is another job "
                                               "using the same --rdzv-id and store?)"));
      if (n < c_.node_rank) m.rank_offset += v;
      m.world_size += v;
    }
    return m;
  }

  // The first failure of an attempt, anywhere, as "<rank> <exit code>".
  // A worker lost to a signal under --fault-tolerant, told to the workers
  // in their own key space (keys::attempt_space): one still initializing
  // its group fails init at once instead of waiting for it.
  void report_lost(int attempt, int rank, const std::string& why) {
    try {
      raw_->set(keys::lost(attempt, rank), why);
      raw_->add(keys::lost_count(attempt), 1);
    } catch (const Error& e) {
      std::fprintf(stderr, "sinew run: could not record rank %d as lost in the store: %s\n", rank, e.what());
    }
  }

  void report_failure(int attempt, int rank, int code) {
    if (c_.nnodes == 1) return;
    store_->compare_set(keys::run_failed(attempt), {},
                        dist::to_bytes(fmt::format("{} {}", rank, code)));
  }
  // Another node's failure of this attempt: {rank, exit code}.
  std::optional<std::pair<int, int>> remote_failure(int attempt) {
    if (c_.nnodes == 1 || !store_->check({keys::run_failed(attempt)})) return std::nullopt;
    std::string v = store_->get_string(keys::run_failed(attempt));
    int rank = -1, code = 1;
    std::sscanf(v.c_str(), "%d %d", &rank, &code);
    return std::make_pair(rank, code);
  }

  void report_done(int attempt) {
    if (c_.nnodes > 1) store_->add(keys::run_done(attempt), 1);
  }
  bool all_done(int attempt) {
    return c_.nnodes == 1 || store_->add(keys::run_done(attempt), 0) == c_.nnodes;
  }

  // Node 0 hosts the store: it waits (bounded) until the others have read
  // the outcome before it goes away.
  void leave(int attempt) {
    if (c_.nnodes == 1) return;
    if (c_.node_rank != 0) {
      store_->add(keys::run_left(attempt), 1);
      return;
    }
    Deadline deadline = Deadline::after(kLeaveTimeout);
    while (store_->add(keys::run_left(attempt), 0) < c_.nnodes - 1 && !deadline.expired())
      sleep_unless_signalled(signals_, poll_interval());
  }

  Millis poll_interval() const { return std::max(Millis(1), millis(c_.monitor_interval_s)); }

 private:
  const RunConfig& c_;
  SignalWatch& signals_;
  int port_;
  std::unique_ptr<dist::TcpStoreServer> server_;
  dist::StorePtr raw_;    // the whole TCP store (workers' key spaces)
  dist::StorePtr store_;  // the launchers' own, "sinew_run/<run id>/"
};

// What ended an attempt.
struct Outcome {
  enum Kind { kSucceeded, kFailed, kRemoteFailed, kSignalled } kind = kSucceeded;
  int exit_code = 0;
  std::optional<size_t> first_failure;  // local worker index
  int remote_rank = -1;
  int signal = 0;
};

// What to do when a worker fails. torchrun restarts every worker while
// restarts remain. Under --fault-tolerant a worker lost to a signal is
// respawned alone instead, as a joiner the survivors admit at their next
// reconfigure(); without restarts left it just stays lost. Restarts and
// respawns draw on the one --max-restarts budget.
enum class FailurePolicy { kRestartAll, kRespawnOne, kGiveUp };

FailurePolicy policy_for(const RunConfig& c, int restarts_used, bool lost_to_signal) {
  if (restarts_used >= c.max_restarts) return FailurePolicy::kGiveUp;
  return c.fault_tolerant && lost_to_signal ? FailurePolicy::kRespawnOne
                                            : FailurePolicy::kRestartAll;
}

class Job {
 public:
  Job(const RunConfig& c, SignalWatch& signals)
      : c_(c),
        signals_(signals),
        host_(host_name()),
        program_path_(resolve_program(c.program)),
        token_(c.token.empty() ? dist::make_job_token() : c.token) {
    for (char** e = environ; *e != nullptr; ++e) {
      std::string kv = *e;
      auto eq = kv.find('=');
      if (eq != std::string::npos) base_env_[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    if (c.nproc_per_node > 1 && base_env_.count("OMP_NUM_THREADS") == 0) {
      base_env_["OMP_NUM_THREADS"] = "1";
      std::fprintf(stderr,
                   "\n*****************************************\n"
                   "Setting OMP_NUM_THREADS environment variable for each process to be 1 in "
                   "default, to avoid your system being overloaded, please further tune the "
                   "variable for optimal performance in your application as needed. \n"
                   "*****************************************\n");
    }
  }

  int run() {
    Rendezvous rdzv(c_, token_, signals_);
    for (int attempt = 0;; ++attempt) {
      auto m = rdzv.join(attempt);
      lost_.clear();
      replaced_.clear();
      respawned_.clear();
      respawns_of_slot_.clear();
      WorkerGroup group(signals_, program_path_, argv(), c_.output, host_);
      for (int lr = 0; lr < c_.nproc_per_node; ++lr)
        group.spawn(make_spec(rdzv, m, attempt, lr, /*respawn=*/0));
      Outcome o = supervise(group, rdzv, m, attempt);
      group.finish_output();
      print_table(group, attempt, o);
      switch (o.kind) {
        case Outcome::kSucceeded:
          rdzv.leave(attempt);
          return 0;
        case Outcome::kSignalled:
          return 128 + o.signal;
        case Outcome::kFailed:
        case Outcome::kRemoteFailed:
          if (policy_for(c_, restarts_used_, false) == FailurePolicy::kGiveUp) return o.exit_code;
          ++restarts_used_;
          std::fprintf(stderr, "sinew run: restarting all workers (restart %d of %d)\n",
                       restarts_used_, c_.max_restarts);
          break;
      }
    }
  }

 private:
  std::vector<std::string> argv() const {
    std::vector<std::string> v{c_.program};
    v.insert(v.end(), c_.args.begin(), c_.args.end());
    return v;
  }

  // `respawn` > 0: the n-th respawn of this local rank's slot in this
  // attempt, started as a joiner (SINEW_JOIN=1).
  WorkerSpec make_spec(const Rendezvous& rdzv, const Rendezvous::Membership& m, int attempt,
                       int local_rank, int respawn) {
    WorkerSpec s;
    s.local_rank = local_rank;
    s.rank = m.rank_offset + local_rank;
    auto vars = base_env_;
    vars[env::kRank] = std::to_string(s.rank);
    vars[env::kLocalRank] = std::to_string(local_rank);
    vars[env::kWorldSize] = std::to_string(m.world_size);
    vars[env::kLocalWorldSize] = std::to_string(c_.nproc_per_node);
    vars[env::kGroupRank] = std::to_string(c_.node_rank);
    vars[env::kGroupWorldSize] = std::to_string(c_.nnodes);
    vars[env::kRoleRank] = std::to_string(s.rank);
    vars[env::kRoleWorldSize] = std::to_string(m.world_size);
    vars[env::kRoleName] = "default";
    vars[env::kMasterAddr] = rdzv.host();
    vars[env::kMasterPort] = std::to_string(rdzv.port());
    // The restart count is the worker's own (a respawn raises it); the run
    // attempt names the key space of the running group in the store
    // (keys::attempt_space), which a joiner must share with the
    // members it joins.
    vars[env::kRestartCount] = std::to_string(attempt + respawn);
    vars[env::kRunAttempt] = std::to_string(attempt);
    if (respawn > 0) vars[env::kJoin] = "1";
    vars[env::kMaxRestarts] = std::to_string(c_.max_restarts);
    vars[env::kRunId] = c_.run_id;
    vars[env::kUseAgentStore] = "False";
    vars[env::kStoreToken] = token_;
    vars[env::kStoreHosted] = "1";
    vars[env::kLogPrefixed] = "1";  // we prefix every line: the worker's log need not
    if (!c_.backend.empty()) vars[env::kBackend] = c_.backend;
    for (auto& [k, v] : vars) s.env.push_back(k + "=" + v);
    // A respawn continues its slot's log files.
    s.stdout_log = open_log(attempt, local_rank, kStdout, respawn > 0);
    s.stderr_log = open_log(attempt, local_rank, kStderr, respawn > 0);
    return s;
  }

  UniqueFd open_log(int attempt, int local_rank, int stream, bool append) {
    if (!c_.output.to_file(local_rank, stream)) return UniqueFd();
    namespace fs = std::filesystem;
    fs::path dir = fs::path(c_.output.log_dir) / c_.run_id / fmt::format("attempt_{}", attempt) /
                   std::to_string(local_rank);
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec)
      throw IoError(
          fmt::format("sinew run: cannot create log directory {}: {}", dir.string(), ec.message()));
    fs::path file = dir / (stream == kStdout ? "stdout.log" : "stderr.log");
    int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
    if (fd < 0)
      throw IoError(
          fmt::format("sinew run: cannot open {}: {}", file.string(), std::strerror(errno)));
    return UniqueFd(fd);
  }

  Outcome supervise(WorkerGroup& group, Rendezvous& rdzv, const Rendezvous::Membership& m,
                    int attempt) {
    Outcome o;
    Millis grace = std::chrono::seconds(kKillGraceS.get());
    while (!group.all_exited()) {
      auto ev = group.poll(rdzv.poll_interval());
      if (!ev.signals.empty()) {
        int sig = ev.signals.front();
        std::fprintf(stderr, "sinew run: received SIG%s, forwarding it to the workers\n",
                     sigabbrev_np(sig));
        group.stop(grace, sig);
        return {Outcome::kSignalled, 128 + sig, std::nullopt, -1, sig};
      }
      for (size_t i : ev.exited) {
        const auto& r = group.result(i);
        if (succeeded(r)) continue;
        if (c_.fault_tolerant && WIFSIGNALED(r.wait_status)) {
          lost_.push_back(i);
          rdzv.report_lost(attempt, r.rank, describe_wait_status(r.wait_status));
          std::fprintf(stderr,
                       "sinew run: rank %d (pid %d) lost: %s; --fault-tolerant: the other workers "
                       "continue\n",
                       r.rank, static_cast<int>(r.pid), describe_wait_status(r.wait_status).c_str());
          if (policy_for(c_, restarts_used_, true) == FailurePolicy::kRespawnOne) {
            ++restarts_used_;
            const int local_rank = r.local_rank;
            const int n = ++respawns_of_slot_[local_rank];
            std::fprintf(stderr,
                         "sinew run: respawning local rank %d as a joiner (restart %d of %d)\n",
                         local_rank, restarts_used_, c_.max_restarts);
            group.spawn(make_spec(rdzv, m, attempt, local_rank, n));
            replaced_.push_back(i);
            respawned_.push_back(group.size() - 1);
          }
          continue;
        }
        o = {Outcome::kFailed, exit_code_of(r.wait_status), i, -1, 0};
        rdzv.report_failure(attempt, r.rank, o.exit_code);
        std::fprintf(stderr, "sinew run: rank %d (pid %d) failed: %s; stopping the other workers\n",
                     r.rank, static_cast<int>(r.pid), describe_wait_status(r.wait_status).c_str());
        group.stop(grace, SIGTERM);
        return o;
      }
      if (auto remote = rdzv.remote_failure(attempt)) {
        std::fprintf(stderr,
                     "sinew run: rank %d on another node failed (exit %d); stopping the "
                     "workers on this node\n",
                     remote->first, remote->second);
        group.stop(grace, SIGTERM);
        return {Outcome::kRemoteFailed, remote->second, std::nullopt, remote->first, 0};
      }
    }
    if (!lost_.empty() && lost_.size() == group.size()) {
      // Nobody left to carry on.
      const auto& r = group.result(lost_.front());
      o = {Outcome::kFailed, exit_code_of(r.wait_status), lost_.front(), -1, 0};
      rdzv.report_failure(attempt, r.rank, o.exit_code);
      return o;
    }
    // This node is done; the attempt is not until every node is.
    rdzv.report_done(attempt);
    while (!rdzv.all_done(attempt)) {
      if (auto remote = rdzv.remote_failure(attempt))
        return {Outcome::kRemoteFailed, remote->second, std::nullopt, remote->first, 0};
      auto ev = group.poll(rdzv.poll_interval());
      if (!ev.signals.empty())
        return {Outcome::kSignalled, 128 + ev.signals.front(), std::nullopt, -1,
                ev.signals.front()};
    }
    return o;
  }

  void print_table(const WorkerGroup& group, int attempt, const Outcome& o) {
    static const char* kWhat[] = {"succeeded", "failed", "failed on another node", "interrupted"};
    // Respawns add rows (and processes) but no workers: count slots.
    const size_t workers = group.size() - respawned_.size();
    std::string lost =
        lost_.empty() ? "" : fmt::format(", {} of {} workers lost", lost_.size(), workers);
    if (!respawned_.empty())
      lost += fmt::format(", {} respawned as joiner{} (--max-restarts {})", respawned_.size(),
                          respawned_.size() == 1 ? "" : "s", c_.max_restarts);
    std::string out = fmt::format("sinew run: attempt {} {} (run id {}, host {}{}):\n", attempt,
                                  kWhat[o.kind], c_.run_id, host_, lost);
    out += fmt::format("  {:>6} {:>6} {:>8} {:>10} {:>10}\n", "rank", "local", "pid", "exit",
                       "elapsed");
    for (size_t i = 0; i < group.size(); ++i) {
      const auto& r = group.result(i);
      std::string note;
      if (o.first_failure == i)
        note = "  <- first failure";
      else if (std::find(lost_.begin(), lost_.end(), i) != lost_.end())
        note = std::find(replaced_.begin(), replaced_.end(), i) != replaced_.end()
                   ? "  (lost; respawned as a joiner)"
                   : "  (lost; the others continued)";
      else if (r.reaped && !r.stopped &&
               std::find(respawned_.begin(), respawned_.end(), i) != respawned_.end())
        note = "  (respawned as a joiner)";
      else if (!r.reaped)
        note = "  (still running)";
      else if (r.stopped)
        note = "  (stopped by sinew run)";
      out += fmt::format("  {:>6} {:>6} {:>8} {:>10} {:>9.2f}s{}\n", r.rank, r.local_rank, r.pid,
                         r.reaped ? describe_wait_status(r.wait_status) : "-", r.elapsed_s, note);
    }
    write_all(STDERR_FILENO, out);
  }

  const RunConfig& c_;
  SignalWatch& signals_;
  std::string host_;
  std::string program_path_;
  std::string token_;
  std::map<std::string, std::string> base_env_;
  // Local indices of this attempt's workers lost under --fault-tolerant,
  // those of them that were respawned, and the respawns.
  std::vector<size_t> lost_;
  std::vector<size_t> replaced_;
  std::vector<size_t> respawned_;
  std::map<int, int> respawns_of_slot_;  // local rank -> respawns in this attempt
  // Restarts of every worker plus respawns of one, job-wide (--max-restarts).
  int restarts_used_ = 0;
};

}  // namespace

int run_job(const RunConfig& config) {
  SignalWatch signals;
  try {
    return Job(config, signals).run();
  } catch (const Interrupted& i) {
    std::fprintf(stderr, "sinew run: interrupted by SIG%s\n", sigabbrev_np(i.sig));
    return 128 + i.sig;
  }
}

}  // namespace sinew::cli
