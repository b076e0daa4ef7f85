// The gloo backend: every collective against exact expected values (the
// shared checks in collective_checks.h) for worlds of 1-4 ranks as threads
// over an in-process store; then timeout, abort and argument errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <latch>
#include <thread>

#include "dist/collective_checks.h"
#include "sinew/core/error.h"
#include "sinew/dist/process_group.h"

namespace sinew::dist {
namespace {

using checks::CheckLog;
using namespace std::chrono_literals;

// Tests bind gloo to loopback only (read once, on the first group).
const bool kLoopbackOnly = [] { return setenv("SINEW_GLOO_HOSTNAME", "127.0.0.1", 1) == 0; }();

GroupOptions gloo_options(StorePtr store, int rank, int size, Millis timeout) {
  GroupOptions o;
  o.backend = "gloo";
  o.store = std::move(store);
  o.rank = rank;
  o.size = size;
  o.timeout = timeout;
  return o;
}

using RankFn = std::function<void(ProcessGroupPtr&, CheckLog&)>;

// Runs fn on `world` ranks (threads), each with its own gloo group over one
// memory store. Groups are destroyed only once every rank is done, so no rank
// sees a peer's connections close mid-op. Returns all ranks' failures.
std::vector<std::string> run_world(int world, Millis timeout, const RankFn& fn) {
  auto store = make_memory_store();
  std::vector<CheckLog> logs(world);
  std::latch done(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      ProcessGroupPtr pg;
      // Ready before the check: a rank that leaves before its own init ran
      // would leave its peers waiting for it until the timeout.
      checks::guarded(logs[r], "create_process_group", [&] {
        pg = create_process_group(gloo_options(store, r, world, timeout));
        pg->wait_ready(Deadline::after(timeout + 10s));
      });
      if (pg) checks::guarded(logs[r], "check", [&] { fn(pg, logs[r]); });
      done.arrive_and_wait();
    });
  }
  for (auto& t : threads) t.join();
  std::vector<std::string> failures;
  for (int r = 0; r < world; ++r)
    for (const auto& f : logs[r].failures) failures.push_back(fmt::format("rank {}: {}", r, f));
  return failures;
}

class GlooCollectives : public ::testing::TestWithParam<std::tuple<size_t, int>> {};

TEST_P(GlooCollectives, MatchExpectedValues) {
  ASSERT_TRUE(kLoopbackOnly);
  const auto [index, world] = GetParam();
  const auto& check = checks::all_checks()[index];
  auto failures = run_world(world, 10s, [&](ProcessGroupPtr& pg, CheckLog& log) { check.fn(*pg, log); });
  EXPECT_TRUE(failures.empty()) << fmt::format("{}", fmt::join(failures, "\n"));
}

INSTANTIATE_TEST_SUITE_P(
    Worlds, GlooCollectives,
    ::testing::Combine(::testing::Range<size_t>(0, checks::all_checks().size()), ::testing::Values(1, 2, 3, 4)),
    [](const auto& info) {
      return fmt::format("{}_world{}", checks::all_checks()[std::get<0>(info.param)].name,
                         std::get<1>(info.param));
    });

TEST(GlooBackend, ReportsReadyAndItsName) {
  auto failures = run_world(2, 10s, [](ProcessGroupPtr& pg, CheckLog& log) {
    pg->wait_ready(Deadline::after(10s));
    log.expect(pg->init_status().is_ok(), "init_status is Ok once ready");
    log.expect(pg->backend_name() == "gloo", "backend_name() is gloo");
  });
  EXPECT_TRUE(failures.empty()) << fmt::format("{}", fmt::join(failures, "\n"));
}

TEST(GlooBackend, RecvWithoutSenderTimesOut) {
  auto failures = run_world(2, 500ms, [](ProcessGroupPtr& pg, CheckLog& log) {
    if (pg->rank() != 0) return;  // rank 1 never sends (its group lives until rank 0 is done)
    std::vector<float> x(4);
    const auto start = Clock::now();
    auto work = pg->recv(checks::flat(x, DType::kF32), 1, 11);
    try {
      work->wait(Deadline::after(5s));
      log.expect(false, "recv without a sender completed");
    } catch (const TimeoutError& e) {
      log.expect(std::string(e.what()).find("recv") != std::string::npos,
                 fmt::format("the timeout names the recv: {}", e.what()));
    }
    log.expect(Clock::now() - start < 5s, "the recv failed within 5 s");
  });
  EXPECT_TRUE(failures.empty()) << fmt::format("{}", fmt::join(failures, "\n"));
}

TEST(GlooBackend, AbortUnblocksPendingRecv) {
  auto failures = run_world(2, 60s, [](ProcessGroupPtr& pg, CheckLog& log) {
    if (pg->rank() == 0) checks::check_abort_unblocks_pending_recv(pg, log);
  });
  EXPECT_TRUE(failures.empty()) << fmt::format("{}", fmt::join(failures, "\n"));
}

TEST(GlooBackend, RendezvousWithoutPeersTimesOut) {
  auto pg = create_process_group(gloo_options(make_memory_store(), 0, 2, 300ms));
  try {
    pg->wait_ready(Deadline::after(10s));
    FAIL() << "init of a 2-rank group with one rank succeeded";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pg->init_status().code(), ErrorCode::kTimeout);
  std::vector<float> x(2);
  EXPECT_THROW(pg->allreduce(checks::flat(x, DType::kF32))->wait(Deadline::after(5s)), TimeoutError);
}

TEST(GlooBackend, RejectsBadArguments) {
  GroupOptions no_store = gloo_options(nullptr, 0, 1, 1s);
  try {
    create_process_group(no_store);
    FAIL() << "a gloo group without a store was created";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("store"), std::string::npos) << e.what();
  }

  // What a rank keeps for itself must be the same size in both split lists.
  auto failures = run_world(2, 10s, [](ProcessGroupPtr& pg, CheckLog& log) {
    const int r = pg->rank();
    std::vector<int32_t> in(2), out(2);
    std::vector<int64_t> in_splits = {1, 1};
    std::vector<int64_t> out_splits = r == 0 ? std::vector<int64_t>{2, 0} : std::vector<int64_t>{0, 2};
    try {
      pg->all_to_all_v(checks::flat(out, DType::kI32), checks::flat(in, DType::kI32), out_splits, in_splits);
      log.expect(false, "mismatched own split accepted");
    } catch (const InvalidArgument& e) {
      log.expect(std::string(e.what()).find("output_split_sizes") != std::string::npos,
                 fmt::format("the error names output_split_sizes: {}", e.what()));
    }
  });
  EXPECT_TRUE(failures.empty()) << fmt::format("{}", fmt::join(failures, "\n"));
}

}  // namespace
}  // namespace sinew::dist
