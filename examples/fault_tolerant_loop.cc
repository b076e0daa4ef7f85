// A training loop that survives the loss of a rank. Each step averages a
// "gradient" over the group and checks the result exactly; when a rank dies,
// the survivors' allreduce fails with PeerLostError, they agree on who is
// gone, continue in the reconfigured (smaller) group and redo the step.
//
//   sinew run --standalone --fault-tolerant --nproc-per-node 4 bin/fault_tolerant_loop --kill-rank 2 --at-step 50
//
// --kill-rank R --at-step S makes rank R SIGKILL itself at step S (after
// writing the time to the job store, so the others can say how long they
// took to notice). Without --fault-tolerant, `sinew run` stops every worker
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

#include "sinew/core/error.h"
#include "sinew/dist/init.h"

using namespace sinew;
using namespace sinew::dist;

namespace {

constexpr std::chrono::seconds kRecoveryTimeout{30};

int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct Args {
  int kill_rank = -1;
  int at_step = -1;
  int steps = 200;
  int elems = 4096;
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
                                       : nullptr;
    if (!field)
      throw InvalidArgument::make("argument", name, "--kill-rank R, --at-step S, --steps N or --elems N");
    size_t used = 0;
    try {
      *field = std::stoi(argv[i + 1], &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || argv[i + 1][used] != '\0') throw InvalidArgument::make(name, argv[i + 1], "an integer");
  }
  if (a.steps < 1 || a.elems < 1) throw InvalidArgument::make("--steps/--elems", "< 1", "positive counts");
  if ((a.kill_rank >= 0) != (a.at_step >= 0))
    throw InvalidArgument::make("--kill-rank/--at-step", "only one given", "both, or neither");
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

}  // namespace

int main(int argc, char** argv) try {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const Args args = parse(argc, argv);
  InitOptions io;
  io.timeout = std::chrono::seconds(60);
  auto pg = init_process_group(io);
  auto store = job_store();
  const int orig = pg->rank();
  const int world = pg->size();
  if (args.kill_rank >= world)
    throw InvalidArgument::make("--kill-rank", std::to_string(args.kill_rank), fmt::format("a rank below {}", world));

  std::vector<int> members(world);  // original ranks of the current group, in its rank order
  for (int r = 0; r < world; ++r) members[r] = r;
  std::vector<int> lost;
  double recovery_ms = 0;
  std::vector<float> grad(args.elems);
  for (int step = 0; step < args.steps;) {
    if (orig == args.kill_rank && step == args.at_step) {
      store->set("fault_tolerant_loop/killed_at", std::to_string(wall_ns()));
      ::raise(SIGKILL);
    }
    for (int i = 0; i < args.elems; ++i) grad[i] = grad_value(orig, step, i);
    try {
      pg->allreduce(TensorView::flat(grad.data(), DType::kF32, args.elems), ReduceKind::kAvg)->wait();
    } catch (const PeerLostError& e) {
      const int64_t detected = wall_ns();
      const auto t0 = Clock::now();
      const std::vector<int> failed = pg->agree_on_failures(Deadline::after(kRecoveryTimeout));
      const double agree_ms = ms_since(t0);
      const auto t1 = Clock::now();
      pg = pg->reconfigure(Deadline::after(kRecoveryTimeout));
      pg->wait_ready(Deadline::after(kRecoveryTimeout));
      const double reconfigure_ms = ms_since(t1);
      std::vector<int> gone, survivors;
      for (int r = 0; r < static_cast<int>(members.size()); ++r)
        (std::binary_search(failed.begin(), failed.end(), r) ? gone : survivors).push_back(members[r]);
      members = survivors;
      lost.insert(lost.end(), gone.begin(), gone.end());
      std::string detect = "?";
      if (store->check({"fault_tolerant_loop/killed_at"})) {
        const double ms = (detected - std::stoll(store->get_string("fault_tolerant_loop/killed_at"))) / 1e6;
        detect = fmt::format("{:.1f}", ms);
        recovery_ms = std::max(recovery_ms, ms + agree_ms + reconfigure_ms);
      }
      fmt::print("[step {}] rank {} lost; continuing with {} rank{} as rank {} (epoch {}, {} ms to detect, "
                 "{:.1f} ms to agree, {:.1f} ms to reconfigure)\n",
                 step, fmt::join(gone, ","), pg->size(), pg->size() == 1 ? "" : "s", pg->rank(), pg->epoch(), detect, agree_ms, reconfigure_ms);
      continue;  // redo this step in the new group
    }
    int sum_ranks = 0;
    for (int m : members) sum_ranks += m + 1;
    const float n = static_cast<float>(members.size());
    for (int i = 0; i < args.elems; ++i) {
      const float want = static_cast<float>(sum_ranks * ((i + step) % 7 + 1)) / n;
      if (grad[i] != want) {
        fmt::print("[step {}] wrong average at element {}: got {}, want {} (members {})\n", step, i, grad[i], want,
                   members);
        return 1;
      }
    }
    ++step;
  }
  leave_together(*store, *pg);
  if (pg->rank() == 0)
    fmt::print("done: {} steps, every average exact; {} of {} ranks finished (lost: {}), epoch {}{}\n", args.steps,
               pg->size(), world, lost.empty() ? "none" : fmt::format("{}", fmt::join(lost, ",")), pg->epoch(),
               recovery_ms > 0 ? fmt::format(", recovery took {:.1f} ms from the kill", recovery_ms) : "");
  return 0;
} catch (const sinew::Error& e) {
  fmt::print(stderr, "fault_tolerant_loop: {}: {}\n", sinew::error_code_name(e.code()), e.what());
  return 2;
}
