// A rank for the fault-injection tests: allreduces in a loop, optionally
// kills or stops itself at a step, and on PeerLostError agrees with the
// survivors and carries on in the reconfigured group. Prints one result line.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "sinew/core/error.h"
#include "sinew/dist/init.h"

using namespace sinew;
using namespace sinew::dist;

static int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int main(int argc, char** argv) try {
  int fail_rank = -1, at_step = -1, steps = 20, also_fail = -1;
  std::string how = "kill";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--fail-rank") fail_rank = std::atoi(argv[i + 1]);
    else if (a == "--at-step") at_step = std::atoi(argv[i + 1]);
    else if (a == "--steps") steps = std::atoi(argv[i + 1]);
    else if (a == "--how") how = argv[i + 1];
    else if (a == "--also-fail") also_fail = std::atoi(argv[i + 1]);  // dies as the agreement starts
  }
  InitOptions io;
  io.timeout = std::chrono::seconds(30);
  auto pg = init_process_group(io);
  auto store = job_store();
  const int orig = pg->rank();
  std::vector<int> members(pg->size());
  for (int r = 0; r < pg->size(); ++r) members[r] = r;  // original ranks of the current group
  double detect_ms = -1;
  int reconfigs = 0;
  for (int step = 0; step < steps;) {
    if (orig == fail_rank && step == at_step && how == "store-wait") {
      // Not a failure: a long wait on the job store (whose client the group's
      // heartbeats must not share) for twice the heartbeat timeout.
      try {
        store->wait({"never_set"}, std::chrono::milliseconds(2 * std::atoi(std::getenv("SINEW_FT_HEARTBEAT_TIMEOUT_MS"))));
      } catch (const TimeoutError&) {
      }
    } else if (orig == fail_rank && step == at_step) {
      store->set("killed_at", std::to_string(now_ns()));
      ::raise(how == "stop" ? SIGSTOP : SIGKILL);
    }
    std::vector<int64_t> v(1000, orig + 1);
    try {
      pg->allreduce(TensorView::flat(v.data(), DType::kI64, 1000))->wait();
    } catch (const PeerLostError& e) {
      if (orig == also_fail) ::raise(SIGKILL);
      if (detect_ms < 0 && store->check({"killed_at"}))
        detect_ms = (now_ns() - std::stoll(store->get_string("killed_at"))) / 1e6;
      auto failed = pg->agree_on_failures(Deadline::after(std::chrono::seconds(30)));
      auto next = pg->reconfigure(Deadline::after(std::chrono::seconds(30)));
      std::vector<int> survivors;
      for (size_t i = 0; i < members.size(); ++i)
        if (std::find(failed.begin(), failed.end(), static_cast<int>(i)) == failed.end()) survivors.push_back(members[i]);
      members = survivors;
      pg = next;
      ++reconfigs;
      continue;  // redo this step in the new group
    }
    int64_t want = 0;
    for (int m : members) want += m + 1;
    if (v[0] != want || v[999] != want) {
      fmt::print("rank {} step {}: got {} want {}\n", orig, step, v[0], want);
      return 1;
    }
    ++step;
  }
  fmt::print("RESULT orig {} rank {} size {} epoch {} reconfigs {} detect_ms {:.1f} members {}\n", orig, pg->rank(),
             pg->size(), pg->epoch(), reconfigs, detect_ms, fmt::join(members, ","));
  return 0;
} catch (const sinew::Error& e) {
  fmt::print("ft_worker: {}: {}\n", sinew::error_code_name(e.code()), e.what());
  return 2;
}
