// The worker program launcher_test runs under `sinew run`. Its arguments are
// steps executed in order:
//   print-env              one line with the launcher's variables
//   launch-env             one line with what read_launch_env() parsed
//   init                   init_process_group(), allreduce of rank+1, a job
//                          store counter; prints "init rank=R size=N sum=S"
//   print-pid              "pid=<pid>"
//   stderr:TEXT            TEXT and a newline on stderr
//   partial:TEXT           TEXT on stdout without a newline
//   ignore-term            ignore SIGTERM from now on
//   sleep:SECONDS          sleep
//   exit:CODE              exit with CODE
//   fail-rank:R:CODE       exit with CODE if RANK is R
//   exit-on-attempt:N:CODE exit with CODE if TORCHELASTIC_RESTART_COUNT is N
//   fr-capacity            "fr_capacity=N" (the Flight Recorder's ring size), or
//                          the settings error on stderr and exit 3
//   fr-group               a one-rank group with one allreduce, kept until
//                          exit; prints "fr-ready"
#include <signal.h>
#include <time.h>
#include <cerrno>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "sinew/dist/flight_recorder.h"
#include "sinew/dist/init.h"
#include "sinew/dist/launch_protocol.h"
#include "sinew/dist/process_group.h"

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "<unset>";
}

void print_env() {
  std::string line;
  namespace e = sinew::dist::launch::env;
  for (const char* name :
       {e::kRank, e::kLocalRank, e::kWorldSize, e::kLocalWorldSize, e::kGroupRank, e::kGroupWorldSize,
        e::kRoleRank, e::kRoleWorldSize, e::kRoleName, e::kMasterAddr, e::kMasterPort, e::kRestartCount,
        e::kMaxRestarts, e::kRunId, e::kUseAgentStore, "OMP_NUM_THREADS", e::kStoreToken, e::kStoreHosted,
        e::kBackend}) {
    line += std::string(line.empty() ? "" : " ") + name + "=" + env(name);
  }
  std::printf("%s\n", line.c_str());
}

void print_launch_env() {
  auto e = sinew::dist::read_launch_env();
  std::printf(
      "launcher=%s rank=%d world_size=%d local_rank=%d local_world_size=%d node_rank=%d "
      "master=%s:%d hosted=%d restart=%d run_id=%s\n",
      e.launcher.c_str(), e.rank, e.world_size, e.local_rank, e.local_world_size, e.node_rank,
      e.master_addr.c_str(), e.master_port, e.store_hosted ? 1 : 0, e.restart_count,
      e.run_id.c_str());
}

// "a:b:c" after the step name, split on ':'.
std::string field(const std::string& step, int index) {
  size_t pos = 0;
  for (int i = 0; i <= index; ++i) {
    pos = step.find(':', pos);
    if (pos == std::string::npos) return "";
    ++pos;
  }
  return step.substr(pos, step.find(':', pos) - pos);
}

void init_and_allreduce() {
  sinew::dist::InitOptions o;
  o.timeout = sinew::Millis(20'000);
  auto pg = sinew::dist::init_process_group(o);
  // Store use first: the allreduce then keeps rank 0 (which may host the
  // store) alive until every rank is done with it.
  sinew::dist::job_store()->add("joined", 1);
  double v = pg->rank() + 1;
  pg->allreduce(sinew::TensorView::flat(&v, sinew::DType::kF64, 1))->wait();
  std::printf("init rank=%d size=%d sum=%g\n", pg->rank(), pg->size(), v);
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

sinew::dist::ProcessGroupPtr g_fr_group;

void fr_group() {
  sinew::dist::GroupOptions o;
  o.store = sinew::dist::make_memory_store();
  o.rank = 0;
  o.size = 1;
  o.name = "fr_worker";
  g_fr_group = sinew::dist::create_process_group(o);
  double v = 1;
  g_fr_group->allreduce(sinew::TensorView::flat(&v, sinew::DType::kF64, 1))->wait();
  std::printf("fr-ready\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  for (int i = 1; i < argc; ++i) {
    std::string step = argv[i];
    if (step == "print-env") {
      print_env();
    } else if (step == "launch-env") {
      print_launch_env();
    } else if (step == "init") {
      init_and_allreduce();
    } else if (step == "print-pid") {
      std::printf("pid=%d\n", static_cast<int>(getpid()));
    } else if (starts_with(step, "stderr:")) {
      std::fprintf(stderr, "%s\n", field(step, 0).c_str());
    } else if (starts_with(step, "partial:")) {
      std::printf("%s", field(step, 0).c_str());
      std::fflush(stdout);
    } else if (step == "ignore-term") {
      signal(SIGTERM, SIG_IGN);
    } else if (starts_with(step, "sleep:")) {
      // The whole time, even when a signal (a dump request) interrupts it.
      const double s = std::atof(field(step, 0).c_str());
      timespec left{static_cast<time_t>(s), static_cast<long>((s - static_cast<time_t>(s)) * 1e9)};
      while (nanosleep(&left, &left) != 0 && errno == EINTR) {
      }
    } else if (starts_with(step, "exit:")) {
      return std::atoi(field(step, 0).c_str());
    } else if (starts_with(step, "fail-rank:")) {
      if (env("RANK") == field(step, 0)) return std::atoi(field(step, 1).c_str());
    } else if (step == "fr-capacity") {
      try {
        std::printf("fr_capacity=%zu\n", sinew::dist::flight_recorder_capacity());
      } catch (const sinew::Error& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 3;
      }
    } else if (step == "fr-group") {
      fr_group();
    } else if (starts_with(step, "exit-on-attempt:")) {
      if (env("TORCHELASTIC_RESTART_COUNT") == field(step, 0))
        return std::atoi(field(step, 1).c_str());
    } else {
      std::fprintf(stderr, "launch_worker: unknown step '%s'\n", step.c_str());
      return 99;
    }
  }
  return 0;
}
