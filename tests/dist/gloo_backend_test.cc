// What only the gloo backend must show: readiness, timeouts and argument
// errors. The shared collective checks (collective_checks.h) and abort run
// for gloo with every other backend in collectives_test.
#include <gtest/gtest.h>

#include "dist/rank_threads.h"
#include "sinew/core/error.h"
#include "sinew/dist/process_group.h"

namespace sinew::dist {
namespace {

using checks::CheckLog;
using namespace std::chrono_literals;

GroupOptions gloo_options(StorePtr store, int rank, int size, Millis timeout) {
  return sinew::testing::group_options(std::move(store), rank, size, timeout, "gloo");
}

std::vector<std::string> run_world(int world, Millis timeout, const sinew::testing::CheckFn& fn) {
  return sinew::testing::run_checks(world, "gloo", timeout, fn);
}

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
    checks::expect_wait_fails<TimeoutError>(log, *work, Deadline::after(5s), "recv without a sender", "recv");
    log.expect(Clock::now() - start < 5s, "the recv failed within 5 s");
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
