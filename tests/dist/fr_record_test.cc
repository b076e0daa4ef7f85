// What the Flight Recorder stores for the common op, with its default
// settings (no C++ stacks, coarse completion times): the straight path
// that packs one tensor in and one out, the general path beside it, and a
// record read while its op is still running.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "dist/fr_dump.h"
#include "dist/rank_threads.h"
#include "sinew/dist/flight_recorder.h"
#include "sinew/dist/process_group.h"
#include "sinew/dist/work.h"

namespace sinew::dist {
namespace {

// ctest runs each test in its own process, in parallel, with one dump
// prefix for the file: give this process its own before the recorder
// reads it.
const bool kOwnDumpPrefix = [] {
  if (const char* p = std::getenv("SINEW_FR_DUMP_TEMP_FILE"))
    return ::setenv("SINEW_FR_DUMP_TEMP_FILE", (std::string(p) + "pid" + std::to_string(::getpid()) + "_").c_str(),
                    1) == 0;
  return true;
}();

using testing::fr_dump;
using testing::fr_entries_of;

ProcessGroupPtr make_group(const StorePtr& store, int rank, int size, const std::string& name) {
  GroupOptions o;
  o.backend = "sinew";
  o.store = store;
  o.rank = rank;
  o.size = size;
  o.name = name;
  o.timeout = Millis(30000);
  return create_process_group(o);
}

nlohmann::json j(const char* text) { return nlohmann::json::parse(text); }

// The ops of the shapes tests: every rank of `pg` issues them.
void issue_shape_ops(ProcessGroup& pg) {
  const int64_t w = pg.size();
  std::vector<double> buf(64, 1.0);
  int32_t scalar = 3;
  pg.allreduce(TensorView(&scalar, DType::kI32, {}))->wait();
  pg.allreduce(TensorView(buf.data(), DType::kF32, {8, 4}))->wait();
  pg.allreduce(TensorView(buf.data(), DType::kF64, {2, 3, 4}))->wait();
  std::vector<int64_t> ints(12, 1);  // summed across ranks: small integers, not doubles' bits
  pg.allreduce(TensorView(ints.data(), DType::kI64, {2, 1, 3, 2}))->wait();
  pg.broadcast(TensorView(buf.data(), DType::kF32, {2, 1, 1, 3, 2}), 0)->wait();
  std::vector<float> in(6, 1.0f), out(6 * w), out_list(6 * w);
  pg.allgather_into_tensor(TensorView(out.data(), DType::kF32, {w, 6}), TensorView::flat(in.data(), DType::kF32, 6))
      ->wait();
  std::vector<TensorView> outs;
  for (int64_t r = 0; r < w; ++r) outs.emplace_back(out_list.data() + 6 * r, DType::kF32, std::vector<int64_t>{2, 3});
  pg.allgather(outs, TensorView(in.data(), DType::kF32, {2, 3}))->wait();
  pg.barrier()->wait();
  // Past the size that runs on the calling thread: handed to the group's
  // worker thread.
  std::vector<float> big(32768, 1.0f);
  pg.allreduce(TensorView(big.data(), DType::kF32, {32768}))->wait();
}

// Each rank's records of issue_shape_ops() on a group of `w` ranks.
void check_shape_entries(const nlohmann::json& d, const std::string& pg_id, int w) {
  auto es = fr_entries_of(d, pg_id);
  nlohmann::json gathered = nlohmann::json::array();
  for (int r = 0; r < w; ++r) gathered.push_back({2, 3});
  const std::vector<std::tuple<std::string, nlohmann::json, nlohmann::json, nlohmann::json>> want = {
      {"sinew:allreduce", j("[[]]"), j("[[]]"), j(R"(["Int"])")},
      {"sinew:allreduce", j("[[8, 4]]"), j("[[8, 4]]"), j(R"(["Float"])")},
      {"sinew:allreduce", j("[[2, 3, 4]]"), j("[[2, 3, 4]]"), j(R"(["Double"])")},
      {"sinew:allreduce", j("[[2, 1, 3, 2]]"), j("[[2, 1, 3, 2]]"), j(R"(["Long"])")},
      {"sinew:broadcast", j("[[12]]"), j("[[12]]"), j(R"(["Float"])")},  // past four dims: the element count
      {"sinew:allgather_into_tensor", j("[[6]]"), nlohmann::json::array({{w, 6}}), j(R"(["Float"])")},
      {"sinew:allgather", j("[[2, 3]]"), gathered, j(R"(["Float"])")},
      {"sinew:barrier", j("[]"), j("[]"), j("[]")},
      {"sinew:allreduce", j("[[32768]]"), j("[[32768]]"), j(R"(["Float"])")},
  };
  ASSERT_EQ(es.size(), want.size() * w) << d.dump(1);
  std::vector<int> seen(want.size(), 0);
  for (const auto& e : es) {
    SCOPED_TRACE(e.dump());
    const size_t i = e["collective_seq_id"].get<size_t>() - 1;
    ASSERT_LT(i, want.size());
    ++seen[i];
    const auto& [op, in_sizes, out_sizes, dtypes] = want[i];
    EXPECT_EQ(e["profiling_name"], op);
    EXPECT_EQ(e["input_sizes"], in_sizes);
    EXPECT_EQ(e["output_sizes"], out_sizes);
    EXPECT_EQ(e["input_dtypes"], dtypes);
    nlohmann::json out_dtypes = nlohmann::json::array();  // one per output, all of the op's dtype
    for (size_t k = 0; k < out_sizes.size(); ++k) out_dtypes.push_back(dtypes[0]);
    EXPECT_EQ(e["output_dtypes"], out_dtypes);
    EXPECT_EQ(e["input_count"], in_sizes.size());
    EXPECT_EQ(e["output_count"], out_sizes.size());
    EXPECT_EQ(e["state"], "completed");
    EXPECT_FALSE(e["is_p2p"].get<bool>());
    EXPECT_TRUE(e["peer"].is_null());
    EXPECT_TRUE(e["duration_ms"].is_null());  // coarse completion times: no durations
    EXPECT_LE(e["time_created_ns"].get<int64_t>(), e["time_discovered_started_ns"].get<int64_t>());
    EXPECT_LE(e["time_discovered_started_ns"].get<int64_t>(), e["time_discovered_completed_ns"].get<int64_t>());
    EXPECT_TRUE(e["frames"].empty());
  }
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(seen[i], w) << "records of collective #" << i + 1;
}

TEST(FrRecord, ShapesOfEveryRankUpToFourDimsAndPastThem) {
  ASSERT_TRUE(kOwnDumpPrefix);
  reset_flight_recorder();
  auto pg = make_group(make_memory_store(), 0, 1, "fr_shapes");
  issue_shape_ops(*pg);
  auto d = fr_dump();
  EXPECT_EQ(d["exact_timing"], false);
  check_shape_entries(d, "fr_shapes@e0", 1);
  const auto& st = d["pg_status"]["fr_shapes@e0"];
  EXPECT_EQ(st["last_enqueued_collective"], 9);
  EXPECT_EQ(st["last_started_collective"], 9);
  EXPECT_EQ(st["last_completed_collective"], 9);
}

// Over shared memory small ops run inline on the issuing thread and are
// stamped from their waits' clock reads, and a larger op runs on the
// group's thread: the records hold the same fields as on one rank.
TEST(FrRecord, TwoRanksOverSharedMemoryRecordTheSameFields) {
  ASSERT_TRUE(kOwnDumpPrefix);
  reset_flight_recorder();
  auto store = make_memory_store();
  testing::run_ranks(2, [&](int r) {
    auto pg = make_group(store, r, 2, "fr_shapes_shm");
    pg->wait_ready(Deadline::after(Millis(30000)));
    issue_shape_ops(*pg);
  });
  check_shape_entries(fr_dump(), "fr_shapes_shm@e0", 2);
}

TEST(FrRecord, AnOpStillRunningIsStartedWithNoCompletionAndNamesWhoItAwaits) {
  ASSERT_TRUE(kOwnDumpPrefix);
  reset_flight_recorder();
  auto store = make_memory_store();
  std::atomic<bool> seen{false};
  nlohmann::json running;
  testing::run_ranks(3, [&](int r) {
    if (r == 2) {  // the observer: dumps until rank 0's second allreduce is seen waiting on rank 1
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!seen.load() && std::chrono::steady_clock::now() < deadline) {
        for (const auto& e : fr_entries_of(fr_dump(), "fr_running@e0"))
          if (e["collective_seq_id"] == 2 && e["awaited_ranks"] == j("[1]")) {
            running = e;
            seen = true;
          }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      seen = true;  // let rank 1 go even when not seen, so the test fails rather than hangs
      return;
    }
    auto pg = make_group(store, r, 2, "fr_running");
    int64_t v = 1;
    pg->allreduce(TensorView::flat(&v, DType::kI64, 1))->wait();
    if (r == 1)
      while (!seen.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    pg->allreduce(TensorView::flat(&v, DType::kI64, 1))->wait();
  });
  ASSERT_FALSE(running.is_null()) << "rank 0's second allreduce was never seen waiting on rank 1";
  EXPECT_EQ(running["state"], "started");
  EXPECT_FALSE(running["retired"].get<bool>());
  EXPECT_TRUE(running["time_discovered_completed_ns"].is_null());
  EXPECT_LE(running["time_created_ns"].get<int64_t>(), running["time_discovered_started_ns"].get<int64_t>());
  EXPECT_EQ(running["input_sizes"], j("[[1]]"));
  EXPECT_EQ(running["input_dtypes"], j(R"(["Long"])"));
  // Once both ranks got through, every record of the group is complete.
  auto es = fr_entries_of(fr_dump(), "fr_running@e0");
  ASSERT_EQ(es.size(), 4u);
  for (const auto& e : es) {
    EXPECT_EQ(e["state"], "completed") << e.dump();
    EXPECT_FALSE(e["time_discovered_completed_ns"].is_null()) << e.dump();
  }
}

// Over shared memory an op's completion is stamped from its own waits'
// clock reads, not a clock read at completion: an op that waited for a
// late peer completes no earlier than the peer joined it.
TEST(FrRecord, AnOpThatWaitedForALatePeerCompletesAfterThePeerJoined) {
  ASSERT_TRUE(kOwnDumpPrefix);
  reset_flight_recorder();
  auto store = make_memory_store();
  testing::run_ranks(2, [&](int r) {
    auto pg = make_group(store, r, 2, "fr_late");
    int64_t v = 1;
    pg->allreduce(TensorView::flat(&v, DType::kI64, 1))->wait();
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    pg->allreduce(TensorView::flat(&v, DType::kI64, 1))->wait();
  });
  const auto d = fr_dump();
  EXPECT_EQ(d["exact_timing"], false);  // the stamp under test is the one without timing
  std::vector<nlohmann::json> second;  // both ranks' second allreduce, the waiting one first
  for (const auto& e : fr_entries_of(d, "fr_late@e0"))
    if (e["collective_seq_id"] == 2) second.push_back(e);
  ASSERT_EQ(second.size(), 2u) << d.dump(1);
  if (second[0]["time_created_ns"].get<int64_t>() > second[1]["time_created_ns"].get<int64_t>())
    std::swap(second[0], second[1]);
  const auto& waited = second[0];
  SCOPED_TRACE(waited.dump());
  EXPECT_EQ(waited["state"], "completed");
  // The late rank's op was created when it joined; the waiting one cannot
  // have completed before that (the stamp may lag the truth, never lead it:
  // 1 ms of slack for the two clocks' views of "now").
  EXPECT_GE(waited["time_discovered_completed_ns"].get<int64_t>(),
            second[1]["time_created_ns"].get<int64_t>() - 1'000'000)
      << "completion stamped before the peer arrived";
}

}  // namespace
}  // namespace sinew::dist
