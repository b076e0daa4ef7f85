// The mpi backend under mpirun: the shared collective checks
// (tests/dist/collective_checks.h), then rank/size validation, a recv
// timeout and abort. Every rank prints its failures and "N passed, M failed"
// and exits non-zero on any failure (so mpirun does).
//
//   mpirun -np 3 mpi_backend_check
#include <cstdio>
#include <thread>

#include "dist/collective_checks.h"
#include "sinew/core/error.h"
#include "sinew/dist/process_group.h"

using namespace sinew;
using namespace sinew::dist;
using checks::CheckLog;
using namespace std::chrono_literals;

namespace {

ProcessGroupPtr mpi_group(Millis timeout, int rank = -1, int size = -1) {
  GroupOptions o;
  o.backend = "mpi";
  o.rank = rank;
  o.size = size;
  o.timeout = timeout;
  return create_process_group(o);
}

void check_rank_size_must_match_mpi(ProcessGroup& world, CheckLog& log) {
  try {
    mpi_group(10s, world.rank(), world.size() + 5);
    log.expect(false, "a size other than MPI's was accepted");
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    log.expect(m.find(std::to_string(world.size() + 5)) != std::string::npos &&
                   m.find(fmt::format("world size {}", world.size())) != std::string::npos,
               fmt::format("the error names both sizes: {}", m));
  }
}

// Rank 0 receives from rank 1, which never sends.
void check_recv_timeout(ProcessGroup& world, CheckLog& log) {
  auto pg = mpi_group(500ms);
  pg->wait_ready(Deadline::after(30s));
  if (pg->rank() == 0 && pg->size() > 1) {
    std::vector<float> x(4);
    const auto start = Clock::now();
    try {
      pg->recv(checks::flat(x, DType::kF32), 1, 11)->wait(Deadline::after(5s));
      log.expect(false, "recv without a sender completed");
    } catch (const TimeoutError& e) {
      log.expect(std::string(e.what()).find("recv") != std::string::npos,
                 fmt::format("the timeout names the recv: {}", e.what()));
    }
    log.expect(Clock::now() - start < 5s, "the recv failed within 5 s");
  }
  world.barrier()->wait();
}

void check_abort(ProcessGroup& world, CheckLog& log) {
  auto pg = mpi_group(60s);
  pg->wait_ready(Deadline::after(30s));
  if (pg->rank() == 0 && pg->size() > 1) checks::check_abort_unblocks_pending_recv(pg, log);
  world.barrier()->wait();
}

}  // namespace

int main() {
  checks::CheckTally tally;
  try {
    auto world = mpi_group(30s);
    world->wait_ready(Deadline::after(60s));
    tally.rank = world->rank();
    for (const auto& check : checks::all_checks())
      tally.run(check.name, [&](CheckLog& log) { check.fn(*world, log); });
    const std::pair<const char*, void (*)(ProcessGroup&, CheckLog&)> extra[] = {
        {"rank_size_must_match_mpi", check_rank_size_must_match_mpi},
        {"recv_timeout", check_recv_timeout},
        {"abort", check_abort},
    };
    for (const auto& [name, fn] : extra) tally.run(name, [&](CheckLog& log) { fn(*world, log); });
  } catch (const std::exception& e) {
    tally.setup_failed(e);
  }
  return tally.finish();
}
