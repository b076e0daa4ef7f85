// The reconfigure contract (tests/fault/reconfigure_api_test.cc) on the mpi
// backend, under mpirun. The test is the "coordinator": handles are
// exchanged with an allgather on a separate world group. Every rank prints
// its failures and "N passed, M failed" and exits non-zero on any failure.
//
//   mpirun -np 4 mpi_reconfigure_check
//   mpirun --enable-recovery -np 4 mpi_reconfigure_check --kill
//     (ranks 1 and 3 SIGKILL themselves; the survivors see PeerLostError,
//     agree on the failed set and reconfigure)
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

#include "dist/collective_checks.h"
#include "sinew/core/error.h"
#include "sinew/dist/process_group.h"

using namespace sinew;
using namespace sinew::dist;
using checks::CheckLog;
using namespace std::chrono_literals;

namespace {

constexpr Millis kLong{20000};

ProcessGroupPtr mpi_group(Millis timeout) {
  GroupOptions o;
  o.backend = "mpi";
  o.timeout = timeout;
  auto pg = create_process_group(o);
  pg->wait_ready(Deadline::after(30s));
  return pg;
}

// Every rank's handle of `pg`, in rank order (the coordinator's view).
std::vector<std::string> all_handles(ProcessGroup& world, ProcessGroup& pg) {
  constexpr int64_t kWidth = 128;
  const std::string mine = pg.reconfigure_handle();
  std::vector<uint8_t> in(kWidth), out(kWidth * world.size());
  std::memcpy(in.data(), mine.data(), std::min<size_t>(mine.size(), kWidth - 1));
  world.allgather_into_tensor(checks::flat(out, DType::kU8), checks::flat(in, DType::kU8))->wait();
  std::vector<std::string> handles;
  for (int r = 0; r < world.size(); ++r) handles.emplace_back(reinterpret_cast<const char*>(&out[r * kWidth]));
  return handles;
}

int64_t allreduce_sum(ProcessGroup& pg, int64_t v) {
  pg.allreduce(TensorView::flat(&v, DType::kI64, 1))->wait(Deadline::after(30s));
  return v;
}

template <class E, class F>
void expect_throw(CheckLog& log, const std::string& what, const std::vector<std::string>& needles, F&& f) {
  try {
    f();
    log.expect(false, what + ": did not throw");
  } catch (const E& e) {
    const std::string m = e.what();
    for (const auto& n : needles)
      log.expect(m.find(n) != std::string::npos, fmt::format("{}: message names '{}': {}", what, n, m));
  } catch (const std::exception& e) {
    log.expect(false, fmt::format("{}: threw the wrong type: {}", what, e.what()));
  }
}

struct Ctx {
  ProcessGroup& world;
  int r;  // world rank
  int n;  // world size
};

void permuted_then_allreduce_and_send_recv(Ctx c, CheckLog& log) {
  auto pg = mpi_group(kLong);
  auto h = all_handles(c.world, *pg);
  std::vector<std::string> order{h[c.n - 1]};
  for (int i = 0; i + 1 < c.n; ++i) order.push_back(h[i]);
  auto next = pg->reconfigure("perm", order, kLong);
  log.expect(next->rank() == (c.r + 1) % c.n, fmt::format("new rank {}", next->rank()));
  log.expect(next->size() == c.n, fmt::format("new size {}", next->size()));
  log.expect(next->epoch() == 1, fmt::format("epoch {}", next->epoch()));
  log.expect(next->backend_name() == "mpi", next->backend_name());
  log.expect(allreduce_sum(*next, c.r + 1) == c.n * (c.n + 1) / 2, "allreduce sum after renumbering");
  int64_t v = next->rank() == 0 ? 99 : 0;
  if (next->rank() == 0) next->send(TensorView::flat(&v, DType::kI64, 1), 1, 5)->wait();
  if (next->rank() == 1) {
    next->recv(TensorView::flat(&v, DType::kI64, 1), 0, 5)->wait();
    log.expect(v == 99, fmt::format("recv after reconfigure got {}", v));
  }
}

void identity_keeps_ranks(Ctx c, CheckLog& log) {
  auto pg = mpi_group(kLong);
  auto h = all_handles(c.world, *pg);
  auto next = pg->reconfigure("identity", h, kLong);
  log.expect(next->rank() == c.r, fmt::format("rank {} kept", next->rank()));
  log.expect(allreduce_sum(*next, 1) == c.n, "allreduce of ones");
}

void shrink_last_and_middle(Ctx c, CheckLog& log) {
  auto pg = mpi_group(kLong);
  auto h = all_handles(c.world, *pg);
  int64_t all_but_last = 0, all_but_one = 0;
  for (int i = 0; i < c.n; ++i) {
    if (i != c.n - 1) all_but_last += i;
    if (i != 1) all_but_one += i;
  }
  if (c.r != c.n - 1) {
    auto a = pg->reconfigure("drop-last", std::vector<std::string>(h.begin(), h.end() - 1), kLong);
    log.expect(a->rank() == c.r && a->size() == c.n - 1, fmt::format("drop-last: rank {} of {}", a->rank(), a->size()));
    log.expect(allreduce_sum(*a, c.r) == all_but_last, "drop-last allreduce");
  }
  if (c.r != 1) {
    std::vector<std::string> list;
    for (int i = 0; i < c.n; ++i)
      if (i != 1) list.push_back(h[i]);
    auto b = pg->reconfigure("drop-middle", list, kLong);
    log.expect(b->rank() == (c.r == 0 ? 0 : c.r - 1), fmt::format("drop-middle: rank {}", b->rank()));
    log.expect(allreduce_sum(*b, c.r) == all_but_one, "drop-middle allreduce");
  }
}

void scale_down_then_up(Ctx c, CheckLog& log) {
  auto pg = mpi_group(kLong);
  auto h = all_handles(c.world, *pg);
  if (c.r < 2) {
    auto small = pg->reconfigure("down", {h[0], h[1]}, kLong);
    log.expect(small->size() == 2, "down: size 2");
    log.expect(allreduce_sum(*small, 1) == 2, "down: allreduce");
  }
  auto up = pg->reconfigure("up", h, kLong);
  log.expect(up->size() == c.n && up->rank() == c.r, "up: all ranks back in order");
  log.expect(allreduce_sum(*up, 1) == c.n, "up: allreduce");
}

void single_to_all(Ctx c, CheckLog& log) {
  auto pg = mpi_group(kLong);
  auto h = all_handles(c.world, *pg);
  if (c.r == 0) {
    auto single = pg->reconfigure("single", {h[0]}, kLong);
    log.expect(single->size() == 1 && single->rank() == 0, "single: rank 0 of 1");
    log.expect(allreduce_sum(*single, 7) == 7, "single: allreduce");
  }
  auto all = pg->reconfigure("all", h, kLong);
  log.expect(all->rank() == c.r && all->size() == c.n, "all: rank and size");
  log.expect(allreduce_sum(*all, c.r + 1) == c.n * (c.n + 1) / 2, "all: allreduce");
}

// The last rank arrives late (say, a restarted worker): the others wait for it.
void late_join(Ctx c, CheckLog& log) {
  auto pg = mpi_group(kLong);
  auto h = all_handles(c.world, *pg);
  if (c.r == c.n - 1) std::this_thread::sleep_for(500ms);
  auto next = pg->reconfigure("late", h, kLong);
  log.expect(allreduce_sum(*next, 10 + c.r) == 10 * c.n + c.n * (c.n - 1) / 2, "late: allreduce");
}

void split_into_two_then_merge(Ctx c, CheckLog& log) {
  if (c.n != 4) return;
  auto pg = mpi_group(kLong);
  auto h = all_handles(c.world, *pg);
  const bool low = c.r < 2;
  auto half = low ? pg->reconfigure("low", {h[0], h[1]}, kLong) : pg->reconfigure("high", {h[3], h[2]}, kLong);
  log.expect(half->size() == 2 && half->rank() == (low ? c.r : 3 - c.r), "halves renumbered by list order");
  log.expect(allreduce_sum(*half, c.r) == (low ? 0 + 1 : 2 + 3), "half allreduce");
  auto whole = pg->reconfigure("merged", {h[2], h[3], h[0], h[1]}, kLong);
  log.expect(whole->rank() == (c.r + 2) % 4, fmt::format("merged rank {}", whole->rank()));
  log.expect(allreduce_sum(*whole, c.r) == 0 + 1 + 2 + 3, "merged allreduce");
}

void recover_after_abort(Ctx c, CheckLog& log) {
  auto pg = mpi_group(kLong);
  auto h = all_handles(c.world, *pg);
  std::string hooked;
  pg->add_abort_hook([&](const std::string& why) { hooked = why; });
  log.expect(pg->error_state() == ProcessGroup::ErrorState::kSuccess, "error state before abort");
  pg->abort("coordinator says so");
  log.expect(hooked == "coordinator says so", "abort hook got the reason: " + hooked);
  log.expect(pg->aborted(), "aborted()");
  const auto start = Clock::now();
  expect_throw<AbortedError>(log, "barrier after abort", {"aborted", "coordinator says so"},
                             [&] { pg->barrier()->wait(Deadline::after(5s)); });
  log.expect(Clock::now() - start < 5s, "ops after abort fail at once");
  auto next = pg->reconfigure("after-abort", h, kLong);
  log.expect(allreduce_sum(*next, 1) == c.n, "allreduce after abort");
}

// Only rank 0 joins an allreduce: it times out, leaving the collective
// pending on the old communicator; reconfigure must not be disturbed by it.
void recover_after_timeout(Ctx c, CheckLog& log) {
  auto pg = mpi_group(300ms);
  auto h = all_handles(c.world, *pg);
  if (c.r == 0) {
    expect_throw<TimeoutError>(log, "allreduce without peers", {"allreduce", "300 ms"},
                               [&] { allreduce_sum(*pg, 1); });
    log.expect(pg->error_state() == ProcessGroup::ErrorState::kTimeout, "error state kTimeout");
  }
  auto next = pg->reconfigure("after-timeout", h, kLong);
  log.expect(allreduce_sum(*next, c.r) == c.n * (c.n - 1) / 2, "allreduce after timeout");
}

// Also without a failure, reconfigure(Deadline) builds the next epoch.
void automatic_reconfigure_without_failure(Ctx c, CheckLog& log) {
  auto pg = mpi_group(kLong);
  auto failed = pg->agree_on_failures(Deadline::after(kLong));
  log.expect(failed.empty(), fmt::format("no failed ranks, got {}", failed));
  auto next = pg->reconfigure(Deadline::after(kLong));
  log.expect(next->epoch() == 1 && next->rank() == c.r && next->size() == c.n, "epoch 1, same ranks");
  log.expect(allreduce_sum(*next, c.r + 1) == c.n * (c.n + 1) / 2, "allreduce at epoch 1");
  auto again = next->reconfigure(Deadline::after(kLong));
  log.expect(again->epoch() == 2, fmt::format("epoch {}", again->epoch()));
  log.expect(allreduce_sum(*again, 2) == 2 * c.n, "allreduce at epoch 2");
}

void reused_uuid_rejected(Ctx c, CheckLog& log) {
  auto pg = mpi_group(kLong);
  auto h = all_handles(c.world, *pg);
  auto next = pg->reconfigure("once", h, kLong);
  log.expect(allreduce_sum(*next, 1) == c.n, "first use works");
  std::vector<std::string> reversed(h.rbegin(), h.rend());
  expect_throw<InvalidArgument>(log, "reused uuid", {"'once'", "not used before"},
                                [&] { pg->reconfigure("once", reversed, kLong); });
  expect_throw<InvalidArgument>(log, "reused uuid, same list", {"'once'", "not used before"},
                                [&] { pg->reconfigure("once", h, kLong); });
}

// Argument errors are local: no rank waits.
void bad_arguments(Ctx c, CheckLog& log) {
  auto pg = mpi_group(kLong);
  auto h = all_handles(c.world, *pg);
  std::vector<std::string> others;
  for (int i = 0; i < c.n; ++i)
    if (i != c.r) others.push_back(h[i]);
  expect_throw<InvalidArgument>(log, "own handle missing", {"this rank's handle", h[c.r]},
                                [&] { pg->reconfigure("missing", others, 1s); });
  expect_throw<InvalidArgument>(log, "uuid with '/'", {"'a/b'", "without '/'"}, [&] { pg->reconfigure("a/b", h, 1s); });
  expect_throw<InvalidArgument>(log, "garbage handle", {"'not-a-handle'", "reconfigure_handle()"},
                                [&] { pg->reconfigure("garbage", {h[c.r], "not-a-handle"}, 1s); });
  expect_throw<InvalidArgument>(log, "duplicate handle", {"each rank's handle once"},
                                [&] { pg->reconfigure("dup", {h[c.r], h[c.r]}, 1s); });
  const std::string bad_pid = fmt::format("mpi|default|w{}|pid1", c.r);
  expect_throw<InvalidArgument>(log, "handle of another job", {bad_pid},
                                [&] { pg->reconfigure("pid", {bad_pid}, 1s); });
  c.world.barrier()->wait();
}

// Ranks 0 and 1 pass different orders under one uuid: both learn it from
// the rendezvous instead of building mismatched communicators.
void mismatched_lists_rejected(Ctx c, CheckLog& log) {
  auto pg = mpi_group(kLong);
  auto h = all_handles(c.world, *pg);
  if (c.r == 0)
    expect_throw<InvalidArgument>(log, "rank 0's list", {"same uuid and handle list", "world rank 1"},
                                  [&] { pg->reconfigure("mismatch", {h[0], h[1]}, kLong); });
  if (c.r == 1)
    expect_throw<InvalidArgument>(log, "rank 1's list", {"same uuid and handle list", "world rank 0"},
                                  [&] { pg->reconfigure("mismatch", {h[1], h[0]}, kLong); });
  c.world.barrier()->wait();
}

// A member that never calls: the others' reconfigure fails at its timeout.
void reconfigure_times_out(Ctx c, CheckLog& log) {
  auto pg = mpi_group(kLong);
  auto h = all_handles(c.world, *pg);
  if (c.r == 0) {
    const auto start = Clock::now();
    expect_throw<TimeoutError>(log, "rank 1 never comes", {"'absent'", "world rank(s) [1]"},
                               [&] { pg->reconfigure("absent", {h[0], h[1]}, 400ms); });
    log.expect(Clock::now() - start < 5s, "gave up within 5 s");
  }
  c.world.barrier()->wait();
}

// Rank `victim` of `pg` SIGKILLs itself (after `delay`) once every other
// rank has sent it a message: their earlier ops are complete by then, so
// only later ones can see the death.
void die_after_hearing_from_all(ProcessGroup& pg, int victim, Millis delay = Millis(0)) {
  int64_t token = 1;
  auto t = TensorView::flat(&token, DType::kI64, 1);
  if (pg.rank() != victim) {
    pg.send(t, victim, 7)->wait(Deadline::after(30s));
    return;
  }
  for (int r = 0; r < pg.size(); ++r)
    if (r != victim) pg.recv(t, r, 7)->wait(Deadline::after(30s));
  std::this_thread::sleep_for(delay);
  std::raise(SIGKILL);
}

// mpirun --enable-recovery -np 4: rank 1 dies; the survivors detect it,
// agree and go on with three ranks. Then old rank 3 dies while the others
// are already agreeing, and ranks 0 and 2 go on as a pair.
void survive_killed_ranks(Ctx c, CheckLog& log) {
  if (c.n != 4) {
    log.expect(false, fmt::format("--kill runs with -np 4, not {}", c.n));
    return;
  }
  auto pg = mpi_group(kLong);
  auto h = all_handles(c.world, *pg);
  die_after_hearing_from_all(*pg, 1);
  const auto start = Clock::now();
  try {
    allreduce_sum(*pg, 1);
    log.expect(false, "allreduce with a dead rank completed");
  } catch (const PeerLostError& e) {
    log.expect(e.ranks() == std::vector<int>{1}, fmt::format("PeerLostError names rank 1: {}", e.ranks()));
  }
  log.expect(Clock::now() - start < 5s, "the death was seen within 5 s");
  log.expect(pg->error_state() == ProcessGroup::ErrorState::kCommError, "error state kCommError");
  expect_throw<PeerLostError>(log, "op after revoke", {"revoked", "[1]"},
                              [&] { pg->barrier()->wait(Deadline::after(5s)); });
  log.expect(pg->agree_on_failures(Deadline::after(kLong)) == std::vector<int>{1}, "agreed failed set {1}");
  auto three = pg->reconfigure(Deadline::after(kLong));
  const int want_rank = c.r == 0 ? 0 : c.r - 1;
  log.expect(three->size() == 3 && three->rank() == want_rank && three->epoch() == 1,
             fmt::format("survivors renumbered: rank {} of {} epoch {}", three->rank(), three->size(), three->epoch()));
  log.expect(allreduce_sum(*three, c.r + 1) == 1 + 3 + 4, "three survivors' allreduce");

  // Old rank 3 (rank 2 of `three`) dies during the others' agreement.
  die_after_hearing_from_all(*three, 2, 300ms);
  auto two = three->reconfigure(Deadline::after(kLong));
  log.expect(two->size() == 2 && two->rank() == (c.r == 0 ? 0 : 1) && two->epoch() == 2,
             fmt::format("pair: rank {} of {} epoch {}", two->rank(), two->size(), two->epoch()));
  log.expect(allreduce_sum(*two, c.r + 1) == 1 + 3, "pair's allreduce");
  // The external API works among the survivors too, from the first group.
  auto swapped = pg->reconfigure("after-kill", {h[2], h[0]}, kLong);
  log.expect(swapped->rank() == (c.r == 2 ? 0 : 1), "external reconfigure after the deaths");
  log.expect(allreduce_sum(*swapped, c.r * 10) == 20, "allreduce after the external reconfigure");
}

}  // namespace

int main(int argc, char** argv) {
  const bool kill_mode = argc > 1 && std::string(argv[1]) == "--kill";
  checks::CheckTally tally;
  try {
    // Exchanges handles; in --kill mode the dead rank's group is not used after.
    auto world = mpi_group(kLong);
    tally.rank = world->rank();
    Ctx c{*world, world->rank(), world->size()};
    using Case = void (*)(Ctx, CheckLog&);
    std::vector<std::pair<const char*, Case>> cases;
    if (kill_mode) {
      cases = {{"survive_killed_ranks", survive_killed_ranks}};
    } else {
      cases = {{"permuted_then_allreduce_and_send_recv", permuted_then_allreduce_and_send_recv},
               {"identity_keeps_ranks", identity_keeps_ranks},
               {"shrink_last_and_middle", shrink_last_and_middle},
               {"scale_down_then_up", scale_down_then_up},
               {"single_to_all", single_to_all},
               {"late_join", late_join},
               {"split_into_two_then_merge", split_into_two_then_merge},
               {"recover_after_abort", recover_after_abort},
               {"recover_after_timeout", recover_after_timeout},
               {"automatic_reconfigure_without_failure", automatic_reconfigure_without_failure},
               {"reused_uuid_rejected", reused_uuid_rejected},
               {"bad_arguments", bad_arguments},
               {"mismatched_lists_rejected", mismatched_lists_rejected},
               {"reconfigure_times_out", reconfigure_times_out}};
    }
    for (const auto& [name, fn] : cases) tally.run(name, [&, fn = fn](CheckLog& log) { fn(c, log); });
  } catch (const std::exception& e) {
    tally.setup_failed(e);
  }
  return tally.finish();
}
