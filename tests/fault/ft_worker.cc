// A rank for the fault-injection tests: allreduces in a loop, optionally
// kills or stops itself at a step, and on PeerLostError agrees with the
// survivors and carries on in the reconfigured group. With --grow-at-step
// the members admit a joiner (a process started with SINEW_JOIN=1) at that
// step. Prints one result line, or "EXCLUDED" if its peers declared it failed.
//
// Store keys it writes for the test harness (job store, attempt 0):
//   in/<phase>/<orig>   entering a shrink or grow (phase "shrink", "grow"),
//                       or past the agreement, before reconfigure() ("agreed");
//                       --kill-phase "start" (no key) starts the timer at exec
//   paused/<orig>       --pause-rank stopped itself at --pause-phase
//   reached/<orig>      passed --mark-step
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sinew/core/env.h"
#include "sinew/core/error.h"
#include "sinew/dist/init.h"
#include "sinew/dist/launch_protocol.h"

using namespace sinew;
using namespace sinew::dist;

static int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {

std::mutex finish_mu;
bool finished = false;  // under finish_mu

struct Args {
  int fail_rank = -1, at_step = -1, steps = 20, also_fail = -1;
  std::string how = "kill";
  int grow_at = -1;                 // members admit the joiner(s) at this step
  int pause_rank = -1;              // stops (sleeps) on entering --pause-phase; the harness kills it
  std::string pause_phase;
  int kill_rank = -1;               // SIGKILLs itself --kill-after-us after entering --kill-phase
  std::string kill_phase;
  int kill_after_us = 0;
  int mark_step = -1;
  int step_sleep_ms = 0;
};

// Original ranks of `ids` (ranks of the current group).
std::string origs(const std::vector<int>& ids, const std::vector<int64_t>& members) {
  std::vector<int64_t> o;
  for (int r : ids) o.push_back(r < static_cast<int>(members.size()) ? members[r] : -1);
  return fmt::format("[{}]", fmt::join(o, ","));
}

class Worker {
 public:
  Worker(Args a, StorePtr store, int orig) : a_(std::move(a)), store_(std::move(store)), orig_(orig) {}

  void enter(const std::string& phase) {
    if (store_) store_->set(fmt::format("in/{}/{}", phase, orig_), "1");
    if (orig_ == a_.kill_rank && phase == a_.kill_phase) {
      const int us = a_.kill_after_us;
      std::thread([us] {
        std::this_thread::sleep_for(std::chrono::microseconds(us));
        std::lock_guard<std::mutex> g(finish_mu);
        if (!finished) ::raise(SIGKILL);
      }).detach();
    }
    if (orig_ == a_.pause_rank && phase == a_.pause_phase) {
      store_->set(fmt::format("paused/{}", orig_), "1");
      std::this_thread::sleep_for(std::chrono::seconds(60));
    }
  }

  // Agree, reconfigure, then learn the new group's members and step (a joiner
  // knows neither). A death meanwhile sends it round again in the new group.
  ProcessGroupPtr recover(ProcessGroupPtr pg, int& step, bool agree = true) {
    for (;;) {
      try {
        if (agree) {
          auto failed = pg->agree_on_failures(Deadline::after(std::chrono::seconds(30)));
          enter("agreed");
          // Original ranks once this epoch's members are known, else its ranks ("r").
          history_ += synced_epoch_ == pg->epoch() ? fmt::format("e{}{}", pg->epoch(), origs(failed, members_))
                                                   : fmt::format("e{}r[{}]", pg->epoch(), fmt::join(failed, ","));
          pg = pg->reconfigure(Deadline::after(std::chrono::seconds(30)));
          ++reconfigs_;
        }
        return sync(pg, step);
      } catch (const PeerLostError& e) {
        note_lost(e, pg->epoch());
        if (std::string(e.what()).find("declared failed") != std::string::npos) throw;
        agree = true;
      }
    }
  }

  ProcessGroupPtr sync(ProcessGroupPtr pg, int& step) {
    std::vector<int64_t> all(pg->size(), -1);
    int64_t me = orig_;
    pg->allgather_into_tensor(TensorView::flat(all.data(), DType::kI64, pg->size()),
                              TensorView::flat(&me, DType::kI64, 1))
        ->wait();
    int64_t s = step;
    pg->allreduce(TensorView::flat(&s, DType::kI64, 1), ReduceKind::kMax)->wait();
    members_ = all;
    synced_epoch_ = pg->epoch();
    step = static_cast<int>(s);
    return pg;
  }

  void note_lost(const PeerLostError& e, uint64_t epoch) {
    if (first_lost_.empty())
      first_lost_ = synced_epoch_ == epoch ? origs(e.ranks(), members_) : fmt::format("r[{}]", fmt::join(e.ranks(), ","));
    if (detect_ms_ < 0 && store_->check({"killed_at"}))
      detect_ms_ = (now_ns() - std::stoll(store_->get_string("killed_at"))) / 1e6;
  }

  int run(ProcessGroupPtr pg, bool joiner) {
    int step = 0;
    if (joiner) {
      pg = recover(pg, step, /*agree=*/false);
    } else {
      members_.resize(pg->size());
      for (int r = 0; r < pg->size(); ++r) members_[r] = r;
      synced_epoch_ = 0;
    }
    bool grown = joiner;
    while (step < a_.steps) {
      try {
        if (step == a_.grow_at && !grown) {
          grown = true;
          wait_for_joiner();
          enter("grow");
          pg = recover(pg, step);
          continue;
        }
        if (orig_ == a_.fail_rank && step == a_.at_step && a_.how == "store-wait") {
          // Not a failure: a long wait on the job store (whose client the group's
          // heartbeats must not share) for twice the heartbeat timeout.
          try {
            store_->wait({"never_set"},
                         std::chrono::milliseconds(2 * std::atoi(std::getenv("SINEW_FT_HEARTBEAT_TIMEOUT_MS"))));
          } catch (const TimeoutError&) {
          }
        } else if (orig_ == a_.fail_rank && step == a_.at_step) {
          store_->set("killed_at", std::to_string(now_ns()));
          ::raise(a_.how == "stop" ? SIGSTOP : SIGKILL);
        }
        std::vector<int64_t> v(1000, orig_ + 1);
        pg->allreduce(TensorView::flat(v.data(), DType::kI64, 1000))->wait();
        int64_t want = 0;
        for (auto m : members_) want += m + 1;
        if (v[0] != want || v[999] != want) {
          fmt::print("rank {} step {}: got {} want {}\n", orig_, step, v[0], want);
          return 1;
        }
        if (step == a_.mark_step) store_->set(fmt::format("reached/{}", orig_), "1");
        if (a_.step_sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a_.step_sleep_ms));
        ++step;
      } catch (const PeerLostError& e) {
        note_lost(e, pg->epoch());
        if (orig_ == a_.also_fail) ::raise(SIGKILL);
        enter("shrink");
        pg = recover(pg, step);
      }
    }
    // Once the result is out a kill timer must not fire: it would lose it.
    std::lock_guard<std::mutex> g(finish_mu);
    finished = true;
    fmt::print("RESULT orig {} rank {} size {} epoch {} reconfigs {} detect_ms {:.1f} members {} failed {} "
               "first_lost {}\n",
               orig_, pg->rank(), pg->size(), pg->epoch(), reconfigs_, detect_ms_, fmt::join(members_, ","),
               history_.empty() ? "-" : history_, first_lost_.empty() ? "-" : first_lost_);
    std::fflush(stdout);
    return 0;
  }

 private:
  // Up to 10 s; then the grow goes ahead without one (a joiner killed
  // before it asked: the members only bump the epoch).
  void wait_for_joiner() {
    const auto deadline = Deadline::after(std::chrono::seconds(10));
    while (!deadline.expired()) {
      const std::string pending = launch::keys::join_pending();
      if (store_->check({pending}) && store_->get_string(pending).size() > 1) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  Args a_;
  StorePtr store_;
  int orig_;
  std::vector<int64_t> members_;  // original ranks of the current group, by rank
  uint64_t synced_epoch_ = ~uint64_t{0};
  int reconfigs_ = 0;
  double detect_ms_ = -1;
  std::string history_;  // agreed failed sets (original ranks) per epoch
  std::string first_lost_;
};

}  // namespace

int main(int argc, char** argv) try {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--fail-rank") a.fail_rank = std::stoi(v);
    else if (k == "--at-step") a.at_step = std::stoi(v);
    else if (k == "--steps") a.steps = std::stoi(v);
    else if (k == "--how") a.how = v;
    else if (k == "--also-fail") a.also_fail = std::stoi(v);  // dies as the agreement starts
    else if (k == "--grow-at-step") a.grow_at = std::stoi(v);
    else if (k == "--pause-rank") a.pause_rank = std::stoi(v);
    else if (k == "--pause-phase") a.pause_phase = v;
    else if (k == "--kill-rank") a.kill_rank = std::stoi(v);
    else if (k == "--kill-phase") a.kill_phase = v;
    else if (k == "--kill-after-us") a.kill_after_us = std::stoi(v);
    else if (k == "--mark-step") a.mark_step = std::stoi(v);
    else if (k == "--step-sleep-ms") a.step_sleep_ms = std::stoi(v);
  }
  const bool joiner = getenv_opt(launch::env::kJoin).value_or("") == "1";
  // The harness names every process, joiners included (their RANK is a slot).
  const int orig = std::stoi(getenv_opt("FT_ORIG").value_or(getenv_opt("RANK").value_or("0")));
  InitOptions io;
  // FT_TIMEOUT_S: the group timeout (default 30 s); the gloo test shortens
  // it, since an op that starts as gloo's connections are closed can only
  // end at its timeout (docs/fault_tolerance.md).
  const char* t = std::getenv("FT_TIMEOUT_S");
  io.timeout = std::chrono::seconds(t ? std::atoi(t) : 30);
  Worker(a, nullptr, orig).enter("start");  // --kill-phase start: a timer from process start (joiners)
  auto pg = init_process_group(io);
  Worker w(a, job_store(), orig);
  return w.run(pg, joiner);
} catch (const sinew::PeerLostError& e) {
  if (std::string(e.what()).find("declared failed") != std::string::npos) {
    fmt::print("EXCLUDED: {}\n", e.what());
    return 3;
  }
  fmt::print("ft_worker: {}: {}\n", sinew::error_code_name(e.code()), e.what());
  return 2;
} catch (const sinew::Error& e) {
  fmt::print("ft_worker: {}: {}\n", sinew::error_code_name(e.code()), e.what());
  return 2;
}
