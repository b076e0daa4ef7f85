// `sinew bench recovery`: what a rank's death costs. Per world size and
// trial, the front end hosts a store and spawns the ranks; after a warm-up
// the victim (rank W/2) writes "killed_at" (wall clock, ns) to the job store
// and SIGKILLs itself while the others allreduce. Phases, from the kill:
//   detect   the first survivor's op fails with PeerLostError
//   revoke   the last survivor's op has failed (max over survivors)
//   agree    agree_on_failures() on the slowest survivor (its duration)
//   shrink   reconfigure() until the first allreduce of the new group has
//            completed, on the slowest survivor (its duration)
// and the torchrun-style baseline, restart-all: the front end sees the
// victim die (waitpid), stops the others and spawns a fresh group of W
// processes in a fresh key space; until all W have finished init and a first
// allreduce (process start included).
//   grow     a running group of W admits one new process at its next epoch:
//            from the members' reconfigure() start (the earliest member's;
//            they start once the joiner's request is in the store, so the
//            joiner's spawn and start-up are excluded) until the last of the
//            W+1 ranks has finished its first allreduce in the grown group.
// And what detection costs when nothing fails: the median 8 B allreduce
// latency with the watchdog on (default) and off (SINEW_FT_HEARTBEAT_MS of
// an hour, so it never wakes), in alternating fresh groups; the overhead is
// taken between the best group of each (the per-wait pid checks of dead
// peers stay on in both: they are part of waiting, not a separate cost).
#include "recovery_bench.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <inttypes.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "sinew/core/env.h"
#include "sinew/core/error.h"
#include "sinew/core/log.h"
#include "sinew/dist/init.h"
#include "sinew/dist/job.h"
#include "sinew/dist/launch_protocol.h"
#include "sinew/dist/tcp_store.h"
#include "self_exe.h"

namespace sinew::bench {
namespace {

constexpr int64_t kElems = 1024;   // a small "gradient": recovery, not bandwidth, is timed
constexpr int kWarmupSteps = 10;
constexpr int kVictimSteps = 20;   // the victim dies mid-loop, while the others wait on it
constexpr Millis kStopGrace{5'000};  // SIGTERM to SIGKILL, as the launcher does
constexpr int kLatencyIters = 2000;    // 8 B allreduces timed per group (median)
constexpr const char* kWatchdogOff = "3600000";  // SINEW_FT_HEARTBEAT_MS: an hour

int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

TensorView view(std::vector<float>& v) { return TensorView::flat(v.data(), DType::kF32, static_cast<int64_t>(v.size())); }

void allreduce_filled(dist::ProcessGroup& pg, std::vector<float>& v, float value, Deadline deadline) {
  std::fill(v.begin(), v.end(), value);
  pg.allreduce(view(v))->wait(deadline);
}

// Store-side barrier before exiting: a rank that leaves while a peer still
// finishes the last collective would be seen dead by that peer's watchdog.
void leave_together(dist::Store& store, const std::string& key, int n, Deadline deadline) {
  store.add(key, 1);
  while (store.add(key, 0) < n) {
    if (deadline.expired())
      throw TimeoutError(fmt::format("bench recovery: only {} of {} ranks reached '{}'", store.add(key, 0), n, key));
    std::this_thread::sleep_for(Millis(1));
  }
}

// A fresh group after the restart: init, the first allreduce, "ready/<rank>".
constexpr int64_t kPerfElems = 2 << 20;  // 8 MiB of float32
constexpr int kPerfIters = 10;

int fresh_worker(dist::ProcessGroup& pg, dist::Store& store, Deadline deadline) {
  const int W = pg.size();
  std::vector<float> v(kElems);
  allreduce_filled(pg, v, static_cast<float>(pg.rank() + 1), deadline);
  const float want = static_cast<float>(W * (W + 1) / 2);
  if (v.front() != want || v.back() != want)
    throw InternalError(fmt::format("bench recovery: fresh allreduce gave {} on rank {}, want {}", v.front(),
                                    pg.rank(), want));
  store.set(fmt::format("ready/{}", pg.rank()), std::to_string(wall_ns()));
  leave_together(store, "finished", W, deadline);
  return 0;
}

// grow: the members admit the joiner once its request is in the store;
// every rank records "<start ns> <end ns>" (the joiner: from before it asked).
int grow_worker(dist::ProcessGroupPtr pg, dist::Store& store, int64_t joiner_start, Deadline deadline) {
  const bool joiner = joiner_start != 0;
  std::vector<float> v(kElems);
  int64_t start = joiner_start;
  const int orig = pg->rank();  // a member keeps its rank; the joiner's is W
  if (!joiner) {
    for (int i = 0; i < kWarmupSteps; ++i) allreduce_filled(*pg, v, 1.0f, deadline);
    pg->barrier()->wait(deadline);
    const std::string pending = dist::launch::keys::join_pending();
    while (!(store.check({pending}) && store.get_string(pending).size() > 1)) {
      if (deadline.expired()) throw TimeoutError("bench recovery: the joiner never asked to join");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    start = wall_ns();
    pg = pg->reconfigure(deadline);
  }
  const int W = pg->size();
  allreduce_filled(*pg, v, static_cast<float>(pg->rank() + 1), deadline);
  const int64_t end = wall_ns();
  const float want = static_cast<float>(W * (W + 1) / 2);
  if (v.front() != want || v.back() != want)
    throw InternalError(fmt::format("bench recovery: allreduce after the grow gave {} on rank {}, want {}", v.front(),
                                    pg->rank(), want));
  store.set(fmt::format("grow/{}", orig), fmt::format("{} {}", start, end));
  leave_together(store, "finished", W, deadline);
  return 0;
}

// latency: the median of kLatencyIters 8 B allreduces, max over ranks.
int latency_worker(dist::ProcessGroup& pg, dist::Store& store, Deadline deadline) {
  std::array<float, 2> x{1.0f, 2.0f};
  auto op = [&] { pg.allreduce(TensorView::flat(x.data(), DType::kF32, 2))->wait(deadline); };
  for (int i = 0; i < 200; ++i) op();
  std::vector<double> us(kLatencyIters);
  for (auto& u : us) {
    auto t0 = Clock::now();
    op();
    u = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  double m = median(us);
  pg.allreduce(TensorView::flat(&m, DType::kF64, 1), dist::ReduceKind::kMax)->wait(deadline);
  if (pg.rank() == 0) store.set("latency", fmt::format("{}", m));
  leave_together(store, "finished", pg.size(), deadline);
  return 0;
}

}  // namespace

int run_recovery_worker(const RecoveryConfig& cfg) {
  const Deadline deadline = Deadline::after(std::chrono::seconds(cfg.trial_timeout_s));
  const bool joiner = dist::launch::env::read(dist::launch::env::kJoin).value_or("") == "1";
  const int64_t started = wall_ns();  // after exec: a joiner's spawn is not timed
  dist::InitOptions io;
  io.timeout = Millis(30'000);
  auto pg = dist::init_process_group(io);
  auto store = dist::job_store();
  pg->wait_ready(deadline);
  if (cfg.mode == "fresh") return fresh_worker(*pg, *store, deadline);
  if (cfg.mode == "grow") return grow_worker(pg, *store, joiner ? started : 0, deadline);
  if (cfg.mode == "latency") return latency_worker(*pg, *store, deadline);

  const int W = pg->size();
  const int orig = pg->rank();
  std::vector<float> v(kElems);
  for (int i = 0; i < kWarmupSteps; ++i) allreduce_filled(*pg, v, 1.0f, deadline);
  pg->barrier()->wait(deadline);
  if (orig == cfg.victim) {
    for (int i = 0; i < kVictimSteps; ++i) allreduce_filled(*pg, v, 1.0f, deadline);
    store->set("killed_at", std::to_string(wall_ns()));
    ::raise(SIGKILL);
  }

  int64_t detected_ns = 0;
  std::vector<int> lost;
  try {
    while (!deadline.expired()) allreduce_filled(*pg, v, 1.0f, deadline);
  } catch (const PeerLostError& e) {
    detected_ns = wall_ns();
    lost = e.ranks();
  } catch (const Error&) {
    if (cfg.mode != "doomed") throw;
  }
  if (cfg.mode == "doomed") {
    // torchrun's workers cannot recover: they wait for the launcher to stop them.
    while (!deadline.expired()) std::this_thread::sleep_for(Millis(10));
    return 1;
  }
  if (lost != std::vector<int>{cfg.victim})
    throw InternalError(fmt::format("bench recovery: rank {} lost {} (want [{}])", orig, lost, cfg.victim));

  auto t0 = Clock::now();
  auto failed = pg->agree_on_failures(deadline);
  const double agree_ms = ms_since(t0);
  if (failed != std::vector<int>{cfg.victim})
    throw InternalError(fmt::format("bench recovery: rank {} agreed on {} (want [{}])", orig, failed, cfg.victim));

  t0 = Clock::now();
  pg = pg->reconfigure(deadline);
  allreduce_filled(*pg, v, static_cast<float>(orig + 1), deadline);
  const double shrink_ms = ms_since(t0);
  const float want = static_cast<float>(W * (W + 1) / 2 - (cfg.victim + 1));
  if (pg->size() != W - 1 || v.front() != want || v.back() != want)
    throw InternalError(fmt::format("bench recovery: rank {} after shrink: size {}, allreduce {}, want size {} and {}",
                                    orig, pg->size(), v.front(), W - 1, want));
  store->set(fmt::format("res/{}", orig), fmt::format("{} {} {}", detected_ns, agree_ms, shrink_ms));

  // Collective speed after the shrink against a group of the same size built
  // from scratch by the same processes, timed alternately (same conditions).
  dist::GroupOptions fo;
  fo.store = dist::make_prefix_store("fresh-compare", store);
  fo.rank = pg->rank();
  fo.size = pg->size();
  fo.name = "fresh";
  fo.timeout = Millis(30'000);
  auto fresh = dist::create_process_group(fo);
  fresh->wait_ready(deadline);
  std::vector<float> big(kPerfElems, 1.0f);
  auto time_group = [&](dist::ProcessGroup& g) {
    g.barrier()->wait(deadline);
    auto s = Clock::now();
    for (int i = 0; i < kPerfIters; ++i)
      g.allreduce(TensorView::flat(big.data(), DType::kF32, kPerfElems))->wait(deadline);
    double per_op = ms_since(s) / kPerfIters;
    g.allreduce(TensorView::flat(&per_op, DType::kF64, 1), dist::ReduceKind::kMax)->wait(deadline);
    return per_op;
  };
  std::vector<double> after, scratch;
  for (int round = 0; round < 5; ++round) {
    after.push_back(time_group(*pg));
    scratch.push_back(time_group(*fresh));
  }
  fresh.reset();

  // Rank 0 of the survivors aggregates for the front end.
  if (pg->rank() == 0) {
    std::vector<std::string> keys;
    for (int r = 0; r < W; ++r)
      if (r != cfg.victim) keys.push_back(fmt::format("res/{}", r));
    dist::wait_keys(*store, keys, deadline, nullptr);
    const int64_t killed = std::stoll(store->get_string("killed_at"));
    double first = 1e300, last = 0, agree = 0, shrink = 0;
    for (const auto& k : keys) {
      int64_t ns = 0;
      double a = 0, s = 0;
      if (std::sscanf(store->get_string(k).c_str(), "%" SCNd64 " %lf %lf", &ns, &a, &s) != 3)
        throw InternalError("bench recovery: malformed " + k);
      first = std::min(first, (ns - killed) / 1e6);
      last = std::max(last, (ns - killed) / 1e6);
      agree = std::max(agree, a);
      shrink = std::max(shrink, s);
    }
    store->set("result", fmt::format("{} {} {} {} {} {}", first, last, agree, shrink, median(after), median(scratch)));
  }
  leave_together(*store, "finished", W - 1, deadline);
  return 0;
}

namespace {

// The ranks of one group, started with sinew run's worker environment. The
// job SIGKILLs and reaps whatever is still running when it goes.
class Ranks {
 public:
  // `joiners` more processes start with SINEW_JOIN=1 (ranks world, world+1, ...).
  Ranks(const std::string& exe, const RecoveryConfig& cfg, const std::string& mode, int world, int victim,
        const dist::TcpStoreServer& server, const std::string& token, int attempt,
        const std::map<std::string, std::string>& extra_env = {}, int joiners = 0) {
    namespace env = dist::launch::env;
    std::vector<std::string> base = dist::inherited_env([](const std::string& name) {
      return name == env::kRank || name == env::kLocalRank || name == env::kJoin;
    });
    for (const auto& [k, v] : std::map<std::string, std::string>{
             {env::kWorldSize, std::to_string(world)},
             {env::kLocalWorldSize, std::to_string(world)},
             {env::kMasterAddr, "127.0.0.1"},
             {env::kMasterPort, std::to_string(server.port())},
             {env::kStoreToken, token},
             {env::kStoreHosted, "1"},
             {env::kRestartCount, std::to_string(attempt)},
             // Each trial's revoke warnings would drown the table.
             {"SINEW_LOG_LEVEL", log_level_env().read().value_or("error")}})
      dist::set_env(base, k, v);
    for (const auto& [k, v] : extra_env) dist::set_env(base, k, v);
    for (int r = 0; r < world + joiners; ++r) {
      dist::ProcessSpec p;
      p.argv = {exe, "bench-recovery-worker", "--mode", mode, "--victim", std::to_string(victim),
                "--timeout-s", std::to_string(cfg.trial_timeout_s)};
      p.env = base;
      if (r >= world) p.env.push_back(std::string(env::kJoin) + "=1");
      // A joiner takes a slot (RANK < WORLD_SIZE), as `sinew run` respawns one.
      dist::set_env(p.env, env::kRank, std::to_string(r < world ? r : 0));
      dist::set_env(p.env, env::kLocalRank, std::to_string(r < world ? r : 0));
      p.rank = r;
      job_.spawn(std::move(p));
    }
  }

  // Reaps exited ranks without blocking; true once rank r has exited.
  bool exited(int r) { return job_.exited(r); }
  int status(int r) const { return job_.result(r).wait_status; }

  // Waits for every rank; past the deadline the rest are SIGKILLed and this
  // throws TimeoutError.
  void wait(Deadline deadline, const std::string& what) {
    if (job_.wait(deadline)) return;
    job_.stop(Millis(0), SIGKILL);
    throw TimeoutError(fmt::format("bench recovery: {} did not finish in time; killed it", what));
  }

  // As the launcher stops workers: `sig`, then SIGKILL after a grace period.
  void stop(int sig) { job_.stop(kStopGrace, sig); }

 private:
  dist::Job job_;
};

bool killed_by_sigkill(int st) { return WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL; }
bool exited_ok(int st) { return WIFEXITED(st) && WEXITSTATUS(st) == 0; }

// One launcher-hosted job: the store the front end hosts, and a client on
// the key space init_process_group() gives attempt `attempt` of it.
struct Job {
  std::string token = dist::make_job_token();
  dist::TcpStoreServer server{"127.0.0.1", 0, token};
  dist::StorePtr attempt_store(int attempt) const {
    dist::TcpStoreOptions o;
    o.port = server.port();
    o.token = token;
    o.timeout = Millis(10'000);
    o.connect_timeout = Millis(10'000);
    return dist::make_prefix_store(dist::launch::keys::attempt_space(attempt), dist::make_tcp_store(o));
  }
};

// detect, revoke, agree, shrink in ms, then one 8 MiB allreduce in the
// shrunk group and in a fresh group of that size.
// `env` picks the transport (default: shared memory, all ranks on this host).
std::array<double, 6> sinew_trial(const std::string& exe, const RecoveryConfig& cfg, int world, int victim,
                                  const std::map<std::string, std::string>& env = {}) {
  Job job;
  Ranks ranks(exe, cfg, "sinew", world, victim, job.server, job.token, 0, env);
  ranks.wait(Deadline::after(std::chrono::seconds(cfg.trial_timeout_s + 5)), "the sinew group");
  for (int r = 0; r < world; ++r) {
    bool ok = r == victim ? killed_by_sigkill(ranks.status(r)) : exited_ok(ranks.status(r));
    if (!ok)
      throw IoError(fmt::format("bench recovery: rank {} of the sinew group ended with status {:#x}", r,
                                      ranks.status(r)));
  }
  std::array<double, 6> out{};
  std::string text = job.attempt_store(0)->get_string("result");
  if (std::sscanf(text.c_str(), "%lf %lf %lf %lf %lf %lf", &out[0], &out[1], &out[2], &out[3], &out[4], &out[5]) != 6)
    throw InternalError("bench recovery: malformed result '" + text + "'");
  return out;
}

// restart-all in ms.
double restart_trial(const std::string& exe, const RecoveryConfig& cfg, int world, int victim) {
  Job job;
  const Deadline deadline = Deadline::after(std::chrono::seconds(cfg.trial_timeout_s + 5));
  {
    Ranks doomed(exe, cfg, "doomed", world, victim, job.server, job.token, 0);
    // The launcher's monitor loop, at its most attentive.
    while (!doomed.exited(victim)) {
      for (int r = 0; r < world; ++r)
        if (r != victim && doomed.exited(r))
          throw IoError(fmt::format("bench recovery: rank {} exited before the victim died", r));
      if (deadline.expired()) throw TimeoutError("bench recovery: the victim of the restart trial did not die");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (!killed_by_sigkill(doomed.status(victim)))
      throw IoError(fmt::format("bench recovery: the victim ended with status {:#x}", doomed.status(victim)));
    doomed.stop(SIGTERM);
  }
  Ranks fresh(exe, cfg, "fresh", world, victim, job.server, job.token, 1);
  fresh.wait(deadline, "the restarted group");
  for (int r = 0; r < world; ++r)
    if (!exited_ok(fresh.status(r)))
      throw IoError(fmt::format("bench recovery: restarted rank {} ended with status {:#x}", r,
                                      fresh.status(r)));
  const int64_t killed = std::stoll(job.attempt_store(0)->get_string("killed_at"));
  auto store = job.attempt_store(1);
  int64_t ready = 0;
  for (int r = 0; r < world; ++r) ready = std::max<int64_t>(ready, std::stoll(store->get_string(fmt::format("ready/{}", r))));
  return (ready - killed) / 1e6;
}

// grow in ms (and the joiner's own wait, from before it asked).
std::pair<double, double> grow_trial(const std::string& exe, const RecoveryConfig& cfg, int world) {
  Job job;
  Ranks ranks(exe, cfg, "grow", world, -1, job.server, job.token, 0, {}, /*joiners=*/1);
  ranks.wait(Deadline::after(std::chrono::seconds(cfg.trial_timeout_s + 5)), "the growing group");
  for (int r = 0; r <= world; ++r)
    if (!exited_ok(ranks.status(r)))
      throw IoError(fmt::format("bench recovery: rank {} of the growing group ended with status {:#x}", r,
                                ranks.status(r)));
  auto store = job.attempt_store(0);
  int64_t start = INT64_MAX, end = 0, joiner_start = 0, joiner_end = 0;
  for (int r = 0; r <= world; ++r) {
    int64_t s = 0, e = 0;
    if (std::sscanf(store->get_string(fmt::format("grow/{}", r)).c_str(), "%" SCNd64 " %" SCNd64, &s, &e) != 2)
      throw InternalError(fmt::format("bench recovery: malformed grow/{}", r));
    if (r < world) start = std::min(start, s);
    else joiner_start = s, joiner_end = e;
    end = std::max(end, e);
  }
  return {(end - start) / 1e6, (joiner_end - joiner_start) / 1e6};
}

// Median 8 B allreduce latency in us of one fresh group, watchdog on or off.
double latency_trial(const std::string& exe, const RecoveryConfig& cfg, int world, bool detection) {
  Job job;
  std::map<std::string, std::string> env;
  if (!detection) env["SINEW_FT_HEARTBEAT_MS"] = kWatchdogOff;
  Ranks ranks(exe, cfg, "latency", world, -1, job.server, job.token, 0, env);
  ranks.wait(Deadline::after(std::chrono::seconds(cfg.trial_timeout_s + 5)), "the latency group");
  for (int r = 0; r < world; ++r)
    if (!exited_ok(ranks.status(r)))
      throw IoError(fmt::format("bench recovery: rank {} of the latency group ended with status {:#x}", r,
                                ranks.status(r)));
  return std::stod(job.attempt_store(0)->get_string("latency"));
}

}  // namespace

int run_recovery_bench(const RecoveryConfig& cfg, Report& report) {
  const std::string exe = self_exe();
  int failures = 0;
  for (int world : cfg.worlds) {
    if (world < 2) throw InvalidArgument::make("--ws", std::to_string(world), "world sizes of at least 2");
    const int victim = world / 2;
    fmt::print(stderr, "sinew bench recovery: {} ranks, rank {} killed, {} trials\n", world, victim, cfg.trials);
    static const char* kPhases[] = {"detect", "revoke", "agree", "shrink"};
    std::map<std::string, std::vector<double>> ms;
    for (int t = 0; t < cfg.trials; ++t) {
      std::string line = fmt::format("  ws{} trial {}:", world, t + 1);
      try {
        auto phases = sinew_trial(exe, cfg, world, victim);
        for (int i = 0; i < 4; ++i) {
          ms[kPhases[i]].push_back(phases[i]);
          line += fmt::format(" {} {:.2f} ms,", kPhases[i], phases[i]);
        }
        ms["after-shrink"].push_back(phases[4]);
        ms["fresh-group"].push_back(phases[5]);
        line += fmt::format(" 8 MiB allreduce {:.3f} ms after shrink vs {:.3f} ms fresh,", phases[4], phases[5]);
      } catch (const Error& e) {
        ++failures;
        line += fmt::format(" sinew trial failed ({}),", e.what());
      }
      // The same over UCX (as between hosts), with and without keeping the
      // survivors' worker and connections, alternating.
      for (const char* keep : {"1", "0"}) {
        const std::map<std::string, std::string> env = {{"SINEW_TRANSPORT", "ucx"},
                                                        {"UCX_NET_DEVICES", "lo"},
                                                        {"SINEW_UCX_KEEP_CONNECTIONS", keep}};
        const std::string key = keep[0] == '1' ? "shrink-ucx" : "shrink-ucx-fresh";
        try {
          ms[key].push_back(sinew_trial(exe, cfg, world, victim, env)[3]);
          line += fmt::format(" {} {:.2f} ms,", key, ms[key].back());
        } catch (const Error& e) {
          ++failures;
          line += fmt::format(" {} trial failed ({}),", key, e.what());
        }
      }
      try {
        double restart = restart_trial(exe, cfg, world, victim);
        ms["restart-all"].push_back(restart);
        line += fmt::format(" restart-all {:.2f} ms", restart);
      } catch (const Error& e) {
        ++failures;
        line += fmt::format(" restart-all trial failed ({})", e.what());
      }
      try {
        auto [grow, joiner] = grow_trial(exe, cfg, world);
        ms["grow"].push_back(grow);
        line += fmt::format(", grow {:.2f} ms (joiner asked to first allreduce {:.2f} ms)", grow, joiner);
      } catch (const Error& e) {
        ++failures;
        line += fmt::format(", grow trial failed ({})", e.what());
      }
      try {
        // Alternating, so drifting machine load hits both alike.
        double on = latency_trial(exe, cfg, world, true), off = latency_trial(exe, cfg, world, false);
        ms["latency-on"].push_back(on);
        ms["latency-off"].push_back(off);
        line += fmt::format(", 8 B allreduce {:.2f} us detection on / {:.2f} us off", on, off);
      } catch (const Error& e) {
        ++failures;
        line += fmt::format(", latency trial failed ({})", e.what());
      }
      fmt::print(stderr, "{}\n", line);
    }
    for (const char* phase : {"detect", "revoke", "agree", "shrink", "grow", "restart-all"}) {
      const auto& v = ms[phase];
      if (v.empty()) continue;
      const std::string c = fmt::format("{}/ws{}", phase, world);
      const std::string impl = std::string(phase) == "restart-all" ? "torchrun-style" : "sinew";
      report.add({"recovery", c, impl, "ms", median(v), "ms"});
      report.add({"recovery", c, impl, "ms_max", *std::max_element(v.begin(), v.end()), "ms"});
    }
    // Over UCX: survivors keep their connections, or make new ones (a fresh worker per epoch).
    for (const auto& [key, impl] : {std::pair{"shrink-ucx", "sinew"}, std::pair{"shrink-ucx-fresh", "fresh-connections"}}) {
      const auto& v = ms[key];
      if (v.empty()) continue;
      const std::string c = fmt::format("shrink-ucx/ws{}", world);
      report.add({"recovery", c, impl, "ms", median(v), "ms"});
      report.add({"recovery", c, impl, "ms_max", *std::max_element(v.begin(), v.end()), "ms"});
    }
    // Post-shrink collective speed: same case, two impls, so the table shows the ratio.
    const std::string c = fmt::format("allreduce-8MiB-after-shrink/ws{}", world - 1);
    if (!ms["after-shrink"].empty()) report.add({"recovery", c, "sinew", "ms", median(ms["after-shrink"]), "ms"});
    if (!ms["fresh-group"].empty()) report.add({"recovery", c, "fresh-group", "ms", median(ms["fresh-group"]), "ms"});
    // What detection costs when nothing fails.
    const std::string lc = fmt::format("detection-cost-8B-allreduce/ws{}", world);
    if (!ms["latency-on"].empty() && !ms["latency-off"].empty()) {
      const auto& on = ms["latency-on"];
      const auto& off = ms["latency-off"];
      report.add({"recovery", lc, "detection-on", "us", median(on), "us"});
      report.add({"recovery", lc, "detection-off", "us", median(off), "us"});
      // The best group of each: on a shared machine a group whose ranks
      // happen to share a core is 100x slower, whatever detection does.
      const double best_on = *std::min_element(on.begin(), on.end());
      const double best_off = *std::min_element(off.begin(), off.end());
      report.add({"recovery", lc, "detection-on", "us_min", best_on, "us"});
      report.add({"recovery", lc, "detection-off", "us_min", best_off, "us"});
      report.add({"recovery", lc, "sinew", "overhead_pct", 100.0 * (best_on - best_off) / best_off, "%"});
    }
  }
  return failures;
}

}  // namespace sinew::bench
