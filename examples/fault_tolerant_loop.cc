// A training loop that survives the loss of a rank and takes in a
// replacement. Each step averages a "gradient" over the group, checks the
// result exactly and adds it to the "weights"; when a rank dies, the
// survivors' allreduce fails with PeerLostError, they agree on who is gone,
// continue in the reconfigured (smaller) group and redo the step. Every
// --admit-every K steps (and at the end) all members reconfigure without a
// failure, which admits processes waiting to join; after every reconfigure
// rank 0 hands the group its state (weights and step), so a joiner resumes
// where the others are.
//
//   sinew run --standalone --fault-tolerant --nproc-per-node 4 bin/fault_tolerant_loop --kill-rank 2 --at-step 50
//   sinew run --standalone --fault-tolerant --max-restarts 1 --nproc-per-node 4 bin/fault_tolerant_loop \
//       --kill-rank 2 --at-step 50 --admit-every 20
//
// --kill-rank R --at-step S makes rank R SIGKILL itself at step S (-1: while
// its group is still initializing) after writing the time to the job store,
// so the others can say how long they took to notice. With --max-restarts, `sinew run` respawns it as a joiner
// (init_process_group() returns a group in epoch > 0), admitted at the next
// multiple of K. Without --fault-tolerant, `sinew run` stops every worker
// when one dies, as torchrun does.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "sinew/core/env.h"
#include "sinew/dist/launch_protocol.h"
#include "sinew/core/error.h"
#include "sinew/dist/init.h"

using namespace sinew;
using namespace sinew::dist;

namespace {

constexpr std::chrono::seconds kRecoveryTimeout{30};
// Regroups, 10 ms apart, the members make at the end waiting for a joiner still owed (about 30 s).
constexpr int kMaxFinalWaits = 3000;

int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct Args {
  int kill_rank = -1;
  int at_step = -2;  // -1: while the group initializes
  int steps = 200;
  int elems = 4096;
  int admit_every = 20;  // 0: reconfigure only after a failure
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i += 2) {
    const std::string name = argv[i];
    if (i + 1 >= argc) throw InvalidArgument::make(name, "(missing)", "a value");
    int* field = name == "--kill-rank" ? &a.kill_rank
                 : name == "--at-step" ? &a.at_step
                 : name == "--steps"   ? &a.steps
                 : name == "--elems"   ? &a.elems
                 : name == "--admit-every" ? &a.admit_every
                                       : nullptr;
    if (!field)
      throw InvalidArgument::make("argument", name,
                                  "--kill-rank R, --at-step S, --steps N, --elems N or --admit-every K");
    size_t used = 0;
    try {
      *field = std::stoi(argv[i + 1], &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || argv[i + 1][used] != '\0') throw InvalidArgument::make(name, argv[i + 1], "an integer");
  }
  if (a.steps < 1 || a.elems < 1) throw InvalidArgument::make("--steps/--elems", "< 1", "positive counts");
  if (a.admit_every < 0) throw InvalidArgument::make("--admit-every", std::to_string(a.admit_every), "0 or more");
  if ((a.kill_rank >= 0) != (a.at_step >= -1))
    throw InvalidArgument::make("--kill-rank/--at-step", "only one given", "both, or neither");
  if (a.at_step < -2 || (a.kill_rank < 0 && a.at_step != -2))
    throw InvalidArgument::make("--at-step", std::to_string(a.at_step), "a step >= 0, or -1 for during init");
  return a;
}

// Rank r's gradient at a step: small integers, so any summation order is
// exact and the average is one correctly rounded division.
float grad_value(int orig_rank, int step, int i) {
  return static_cast<float>((orig_rank + 1) * ((i + step) % 7 + 1));
}

// Store-side barrier before exiting: a rank that leaves while a peer still
// finishes the last collective would look dead to that peer's watchdog.
void leave_together(Store& store, const ProcessGroup& pg) {
  const std::string key = fmt::format("fault_tolerant_loop/left/e{}", pg.epoch());
  store.add(key, 1);
  const Deadline deadline = Deadline::after(kRecoveryTimeout);
  while (store.add(key, 0) < pg.size()) {
    if (deadline.expired()) throw TimeoutError(fmt::format("not every rank reached the end within 30 s ({})", key));
    std::this_thread::sleep_for(Millis(1));
  }
}

// What every rank of the current group shares. `members` holds each rank's
// id, the RANK its launcher gave it (a joiner keeps the RANK of the slot it
// was respawned in), in group rank order; -1 while not known.
struct State {
  int64_t step = 0;
  int64_t lost = 0;    // ranks lost so far
  int64_t joined = 0;  // joiners admitted so far
  std::vector<double> weights;
  std::vector<int> members;
};

// Right after a reconfigure: everyone takes rank 0's state and learns who
// the members are.
void resync(ProcessGroup& pg, int id, State& st) {
  int64_t counters[3] = {st.step, st.lost, st.joined};
  broadcast_state(pg, {TensorView::flat(counters, DType::kI64, 3),
                       TensorView::flat(st.weights.data(), DType::kF64, static_cast<int64_t>(st.weights.size()))},
                  0);
  st.step = counters[0];
  st.lost = counters[1];
  st.joined = counters[2];
  std::vector<int32_t> ids(pg.size());
  int32_t mine = id;
  pg.allgather_into_tensor(TensorView::flat(ids.data(), DType::kI32, pg.size()), TensorView::flat(&mine, DType::kI32, 1))
      ->wait();
  st.members.assign(ids.begin(), ids.end());
}

// This rank was declared failed by the others: it leaves quietly.
struct Excluded {
  std::string why;
};

struct Regrouped {
  std::vector<int> gone;     // ids of the ranks that failed
  std::vector<int> joiners;  // ids of the admitted joiners
  double agree_ms = 0;
  double reconfigure_ms = 0;
};

// Every member calls it: drops failed ranks, admits waiting joiners and
// resyncs; again if a rank dies meanwhile.
Regrouped regroup(ProcessGroupPtr& pg, int id, State& st) {
  Regrouped out;
  for (;;) {
    try {
      const auto t0 = Clock::now();
      const std::vector<int> failed = pg->agree_on_failures(Deadline::after(kRecoveryTimeout));
      out.agree_ms += ms_since(t0);
      const auto t1 = Clock::now();
      pg = pg->reconfigure(Deadline::after(kRecoveryTimeout));
      pg->wait_ready(Deadline::after(kRecoveryTimeout));
      out.reconfigure_ms += ms_since(t1);
      // Survivors keep their order; the joiners come after them.
      std::vector<int> next;
      for (int r = 0; r < static_cast<int>(st.members.size()); ++r)
        (std::binary_search(failed.begin(), failed.end(), r) ? out.gone : next).push_back(st.members[r]);
      const size_t survivors = next.size();
      next.resize(pg->size(), -1);
      st.members = next;
      st.lost += static_cast<int64_t>(failed.size());
      st.joined += static_cast<int64_t>(pg->size()) - static_cast<int64_t>(survivors);
      resync(*pg, id, st);
      out.joiners.insert(out.joiners.end(), st.members.begin() + static_cast<std::ptrdiff_t>(survivors),
                         st.members.end());
      return out;
    } catch (const PeerLostError& e) {
      // Lost another rank during the regroup: agree on it too; unless the
      // survivors counted this rank among the failed (its connections broke
      // and they could not tell it from a death): it is out of the group.
      if (std::find(e.ranks().begin(), e.ranks().end(), pg->rank()) != e.ranks().end()) throw Excluded{e.what()};
    }
  }
}

}  // namespace

int main(int argc, char** argv) try {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const Args args = parse(argc, argv);
  InitOptions io;
  io.timeout = std::chrono::seconds(60);
  const LaunchEnv env = read_launch_env();
  auto pg = init_process_group(io);
  auto store = job_store();
  if (env.rank == args.kill_rank && args.at_step == -1) {
    // Dies while its group is still connecting (init runs in the background).
    store->set("fault_tolerant_loop/killed_at", std::to_string(wall_ns()));
    ::raise(SIGKILL);
  }
  const int id = env.rank;
  const int world = env.world_size;
  const bool joiner = pg->epoch() > 0;  // admitted into a running group (sinew run respawned us)
  if (args.kill_rank >= world)
    throw InvalidArgument::make("--kill-rank", std::to_string(args.kill_rank), fmt::format("a rank below {}", world));

  State st;
  st.weights.assign(args.elems, 0.0);
  std::vector<int> lost, joined;
  double recovery_ms = 0;
  if (joiner) {
    st.members.assign(pg->size(), -1);
    try {
      resync(*pg, id, st);
    } catch (const PeerLostError&) {
      regroup(pg, id, st);
    }
    fmt::print("rank {} rejoined as rank {} of {} (epoch {}); resuming at step {}\n", id, pg->rank(), pg->size(),
               pg->epoch(), st.step);
  } else {
    for (int r = 0; r < world; ++r) st.members.push_back(r);
  }
  // Respawns `sinew run` may still make (it exports the budget; SINEW_RUN_ATTEMPT is the same on every rank).
  const int restarts_left = [&] {
    const auto max = sinew::dist::launch::env::read(sinew::dist::launch::env::kMaxRestarts);
    return env.launcher == "sinew" && max ? std::stoi(*max) - env.run_attempt : 0;
  }();
  int final_waits = 0;
  // The step of the last regroup: each step admits once, the same on every rank as the step comes from rank 0.
  int64_t regrouped_at = st.step;
  // Regroups (every member calls it), records who left and joined, and says when joiners came in.
  auto regroup_all = [&](int64_t step) {
    const Regrouped g = regroup(pg, id, st);
    regrouped_at = st.step;
    lost.insert(lost.end(), g.gone.begin(), g.gone.end());
    joined.insert(joined.end(), g.joiners.begin(), g.joiners.end());
    if (!g.joiners.empty() && pg->rank() == 0)
      fmt::print("[step {}] admitted {} joiner{} (rank {}): world size {} (epoch {})\n", step, g.joiners.size(),
                 g.joiners.size() == 1 ? "" : "s", fmt::join(g.joiners, ","), pg->size(), pg->epoch());
    return g;
  };
  std::vector<float> grad(args.elems);
  for (;;) {
    const int64_t step = st.step;
    if (!joiner && id == args.kill_rank && step == args.at_step) {
      store->set("fault_tolerant_loop/killed_at", std::to_string(wall_ns()));
      ::raise(SIGKILL);
    }
    if (args.admit_every > 0 && step != regrouped_at && (step % args.admit_every == 0 || step == args.steps)) {
      const Regrouped g = regroup_all(step);
      if (!g.gone.empty())
        fmt::print("[step {}] rank {} lost (found at a regroup); continuing as rank {} (epoch {})\n", step,
                   fmt::join(g.gone, ","), pg->rank(), pg->epoch());
      continue;
    }
    if (step >= args.steps) {
      // A lost rank the launcher still has restarts for (sinew run --fault-tolerant --max-restarts) is on its
      // way back as a joiner: wait for it (a bounded number of regroups, the same on every rank) so it can
      // finish with the others instead of waiting forever to be admitted.
      const int64_t owed = std::min<int64_t>(st.lost, std::max(0, restarts_left));
      if (st.joined >= owed || final_waits >= kMaxFinalWaits) break;
      ++final_waits;
      std::this_thread::sleep_for(Millis(10));
      regroup_all(step);
      continue;
    }
    for (int i = 0; i < args.elems; ++i) grad[i] = grad_value(id, static_cast<int>(step), i);
    try {
      pg->allreduce(TensorView::flat(grad.data(), DType::kF32, args.elems), ReduceKind::kAvg)->wait();
    } catch (const PeerLostError&) {
      const int64_t detected = wall_ns();
      const Regrouped g = regroup_all(step);
      std::string detect = "?";
      if (store->check({"fault_tolerant_loop/killed_at"})) {
        const double ms = (detected - std::stoll(store->get_string("fault_tolerant_loop/killed_at"))) / 1e6;
        detect = fmt::format("{:.1f}", ms);
        recovery_ms = std::max(recovery_ms, ms + g.agree_ms + g.reconfigure_ms);
      }
      fmt::print("[step {}] rank {} lost; continuing with {} rank{} as rank {} (epoch {}, {} ms to detect, "
                 "{:.1f} ms to agree, {:.1f} ms to reconfigure)\n",
                 step, fmt::join(g.gone, ","), pg->size(), pg->size() == 1 ? "" : "s", pg->rank(), pg->epoch(), detect,
                 g.agree_ms, g.reconfigure_ms);
      continue;  // redo the step (rank 0's) in the new group
    }
    int sum_ranks = 0;
    for (int m : st.members) sum_ranks += m + 1;
    const float n = static_cast<float>(st.members.size());
    for (int i = 0; i < args.elems; ++i) {
      const float want = static_cast<float>(sum_ranks * ((i + step) % 7 + 1)) / n;
      if (grad[i] != want) {
        fmt::print("[step {}] wrong average at element {}: got {}, want {} (members {})\n", step, i, grad[i], want,
                   st.members);
        return 1;
      }
      st.weights[i] += grad[i];
    }
    ++st.step;
  }
  // A joiner's weights came from rank 0 and were updated since like everyone's: all must still agree exactly.
  std::vector<double> root_weights = st.weights;
  pg->broadcast(TensorView::flat(root_weights.data(), DType::kF64, args.elems), 0)->wait();
  if (root_weights != st.weights) {
    fmt::print("rank {}: weights differ from rank 0's at the end\n", pg->rank());
    return 1;
  }
  leave_together(*store, *pg);
  if (pg->rank() == 0)
    fmt::print("done: {} steps, every average exact, weights identical on every rank; final world size {} "
               "(started with {}, lost {}, joined {}), epoch {}{}\n",
               args.steps, pg->size(), world, lost, joined, pg->epoch(),
               recovery_ms > 0 ? fmt::format(", recovery took {:.1f} ms from the kill", recovery_ms) : "");
  return 0;
} catch (const Excluded& e) {
  // Not a failure of the job (the others carry on): exit 0, so `sinew run
  // --fault-tolerant` does not stop them.
  fmt::print(stderr, "fault_tolerant_loop: this rank left the job: {}\n", e.why);
  return 0;
} catch (const sinew::Error& e) {
  fmt::print(stderr, "fault_tolerant_loop: {}: {}\n", sinew::error_code_name(e.code()), e.what());
  return 2;
}
