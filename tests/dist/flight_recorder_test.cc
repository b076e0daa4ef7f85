// The Flight Recorder through process-group hooks: what it records on each
// backend, how a wrapped ring stays analysable, and what a timeout dumps.
#include "sinew/dist/flight_recorder.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "dist/fr_dump.h"
#include "dist/rank_threads.h"
#include "sinew/dist/hooks.h"
#include "sinew/dist/process_group.h"
#include "sinew/dist/work.h"

namespace sinew::dist {
namespace {

// ctest runs each of these tests in its own process, in parallel, and they
// share the SINEW_FR_DUMP_TEMP_FILE prefix CMake sets: give this process its
// own before the recorder reads it, so one test's dump never overwrites
// another's that is being checked.
const bool g_own_dump_prefix = [] {
  if (const char* p = std::getenv("SINEW_FR_DUMP_TEMP_FILE"))
    ::setenv("SINEW_FR_DUMP_TEMP_FILE", (std::string(p) + "pid" + std::to_string(::getpid()) + "_").c_str(), 1);
  return true;
}();

// A small ring, C++ stacks and exact timing for this program, set before the
// recorder reads its settings (PyTorch's spellings for the last two).
const bool kSmallRing = [] {
  return setenv("SINEW_FR_BUFFER_SIZE", "64", 1) == 0 && setenv("TORCH_FR_CPP_STACK", "1", 1) == 0 &&
         setenv("TORCH_NCCL_ENABLE_TIMING", "1", 1) == 0;
}();

using testing::run_ranks;

using testing::fr_dump;
using testing::fr_entries_of;

// Runs fn on `world` ranks (threads) of a group named `name`.
void run_named(int world, const std::string& backend, const std::string& name,
               const std::function<void(ProcessGroup&)>& fn, Millis timeout = Millis(30000)) {
  testing::run_group(world, backend, fn, timeout, "auto", name);
}

class BackendFr : public ::testing::TestWithParam<std::string> {};

TEST_P(BackendFr, RecordsEveryOpWithPyTorchsFields) {
  ASSERT_TRUE(kSmallRing);
  reset_flight_recorder();
  const std::string name = "fr_fields_" + GetParam();
  run_named(2, GetParam(), name, [](ProcessGroup& pg) {
    std::vector<float> a(32, 1.0f);
    pg.allreduce(TensorView(a.data(), DType::kF32, {8, 4}))->wait();
    std::vector<int64_t> b(5, pg.rank());
    pg.broadcast(TensorView::flat(b.data(), DType::kI64, 5), 1)->wait();
    std::vector<double> in(3), out0(3), out1(3);
    pg.allgather({TensorView::flat(out0.data(), DType::kF64, 3), TensorView::flat(out1.data(), DType::kF64, 3)},
                 TensorView::flat(in.data(), DType::kF64, 3))
        ->wait();
    std::vector<uint8_t> p(7);
    if (pg.rank() == 0) pg.send(TensorView::flat(p.data(), DType::kU8, 7), 1)->wait();
    else pg.recv(TensorView::flat(p.data(), DType::kU8, 7), 0)->wait();
    pg.split(0, pg.rank());  // an event in the parent's trace (its allgather is an op of the parent)
  });
  auto d = fr_dump();
  const std::string pg_id = name + "@e0";
  ASSERT_TRUE(d["pg_config"].contains(pg_id)) << d["pg_config"].dump();
  EXPECT_EQ(d["pg_config"][pg_id]["backend"], GetParam());
  EXPECT_EQ(d["pg_config"][pg_id]["size"], 2);
  auto es = fr_entries_of(d, pg_id);
  ASSERT_EQ(es.size(), 10u) << d.dump(1);  // 5 ops (the split's allgather included) on each of the 2 ranks
  int splits = 0;
  for (const auto& e : d["entries"])
    if (e["pg_id"] == pg_id && e["event"] == "split") ++splits;
  EXPECT_EQ(splits, 2);
  std::map<std::string, int> ops;
  EXPECT_EQ(d["exact_timing"], true);
  for (const auto& e : es) {
    ops[e["profiling_name"]]++;
    EXPECT_EQ(e["state"], "completed");
    EXPECT_TRUE(e["retired"].get<bool>());
    // The duration is the recorded start to completion, not a figure of its own.
    const int64_t started = e["time_discovered_started_ns"], completed = e["time_discovered_completed_ns"];
    EXPECT_NEAR(e["duration_ms"].get<double>(), (completed - started) / 1e6, 1e-6) << e.dump();
    EXPECT_LE(e["time_created_ns"].get<int64_t>(), e["time_discovered_started_ns"].get<int64_t>());
    EXPECT_LE(e["time_discovered_started_ns"].get<int64_t>(), e["time_discovered_completed_ns"].get<int64_t>());
    EXPECT_EQ(e["timeout_ms"], 30000);
    EXPECT_EQ(e["epoch"], 0);
    ASSERT_FALSE(e["frames"].empty()) << "TORCH_FR_CPP_STACK=1 but no frames";
    EXPECT_TRUE(e["frames"][0].contains("name") && e["frames"][0].contains("filename"));
    const std::string op = e["profiling_name"];
    if (op == GetParam() + ":allgather_into_tensor") continue;  // the split's membership exchange
    if (op == GetParam() + ":allreduce") {
      EXPECT_EQ(e["collective_seq_id"], 1);
      EXPECT_EQ(e["input_sizes"], nlohmann::json::parse("[[8, 4]]"));
      EXPECT_EQ(e["input_dtypes"], nlohmann::json::parse(R"(["Float"])"));
      EXPECT_FALSE(e["is_p2p"].get<bool>());
    } else if (op == GetParam() + ":broadcast") {
      EXPECT_EQ(e["collective_seq_id"], 2);
      EXPECT_EQ(e["output_dtypes"], nlohmann::json::parse(R"(["Long"])"));
    } else if (op == GetParam() + ":allgather") {
      EXPECT_EQ(e["collective_seq_id"], 3);
      EXPECT_EQ(e["output_sizes"], nlohmann::json::parse("[[3], [3]]"));
      EXPECT_EQ(e["output_count"], 2);
    } else {
      EXPECT_TRUE(op == GetParam() + ":send" || op == GetParam() + ":recv") << op;
      EXPECT_TRUE(e["is_p2p"].get<bool>());
      EXPECT_EQ(e["p2p_seq_id"], 1);
      EXPECT_EQ(e["collective_seq_id"], 0);
      EXPECT_EQ(e["peer"], op == GetParam() + ":send" ? 1 : 0);
      EXPECT_EQ(op == GetParam() + ":send" ? e["input_sizes"] : e["output_sizes"], nlohmann::json::parse("[[7]]"));
    }
  }
  EXPECT_EQ(ops.size(), 6u);
  EXPECT_EQ(d["pg_status"][pg_id]["last_completed_collective"], 4);
  EXPECT_EQ(d["pg_status"][pg_id]["last_completed_p2p"], 1);
  EXPECT_EQ(d["format"], "sinew-fr");
  EXPECT_EQ(d["format_version"], 1);
}

// Records the order of hook calls for one group.
class Tape : public ProcessGroupHooks {
 public:
  void on_enqueue(Work& w, bool, int, std::span<const TensorView>, std::span<const TensorView>) override {
    add("enqueue " + w.op_name());
  }
  void on_start(Work& w) override { add("start " + w.op_name()); }
  void on_complete(Work& w) override { add("complete " + w.op_name()); }
  void on_error(Work& w, Status& s) override { add("error " + w.op_name() + " " + error_code_name(s.code())); }
  void on_abort(const std::string&) override { add("abort"); }
  std::vector<std::string> calls() {
    std::lock_guard<std::mutex> g(mu_);
    return calls_;
  }

 private:
  void add(std::string s) {
    std::lock_guard<std::mutex> g(mu_);
    calls_.push_back(std::move(s));
  }
  std::mutex mu_;
  std::vector<std::string> calls_;
};

TEST_P(BackendFr, HooksSeeEnqueueStartCompleteErrorAndAbort) {
  std::vector<std::shared_ptr<Tape>> tapes = {std::make_shared<Tape>(), std::make_shared<Tape>()};
  std::atomic<bool> rank0_failed{false}, rank0_done{false};
  run_named(2, GetParam(), "fr_hooks_" + GetParam(), [&](ProcessGroup& pg) {
    pg.add_hooks(tapes[pg.rank()]);
    int64_t v = 1;
    pg.allreduce(TensorView::flat(&v, DType::kI64, 1))->wait();
    pg.barrier()->wait();
    if (pg.rank() == 0) {
      // Rank 1 never joins this one: an abort from another thread fails it
      // (a small op may run on the calling thread, so it may block here).
      std::thread aborter([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        pg.abort("test abort");
      });
      auto w = pg.allreduce(TensorView::flat(&v, DType::kI64, 1));
      rank0_failed = !w->wait_status(Deadline::after(Millis(5000))).is_ok();
      aborter.join();
      rank0_done = true;
    } else {
      while (!rank0_done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  EXPECT_TRUE(rank0_failed.load());
  auto t1 = tapes[1]->calls();
  t1.resize(std::min<size_t>(t1.size(), 6));  // then "abort" when the group is destroyed
  EXPECT_EQ(t1, (std::vector<std::string>{"enqueue allreduce", "start allreduce", "complete allreduce",
                                          "enqueue barrier", "start barrier", "complete barrier"}));
  auto t0 = tapes[0]->calls();
  ASSERT_GE(t0.size(), 8u);
  EXPECT_EQ(t0[6], "enqueue allreduce");
  EXPECT_NE(std::find(t0.begin(), t0.end(), "abort"), t0.end());
  EXPECT_NE(std::find(t0.begin(), t0.end(), "error allreduce Aborted"), t0.end()) << ::testing::PrintToString(t0);
}

// The in-process backends: sinew, and gloo where it is built in (mpi records
// through the same hooks; the end-to-end test under mpirun covers it).
std::vector<std::string> in_process_backends() {
  std::vector<std::string> out;
  for (const auto& b : available_backends())
    if (b != "mpi") out.push_back(b);
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, BackendFr, ::testing::ValuesIn(in_process_backends()));

TEST(FlightRecorder, WrappedRingCountsWhatItDropped) {
  reset_flight_recorder();
  ASSERT_EQ(flight_recorder_capacity(), 64u);
  run_named(1, "sinew", "fr_wrap", [](ProcessGroup& pg) {
    int64_t v = 1;
    for (int i = 0; i < 100; ++i) pg.allreduce(TensorView::flat(&v, DType::kI64, 1))->wait();
  });
  auto d = fr_dump();
  auto es = fr_entries_of(d, "fr_wrap@e0");
  ASSERT_FALSE(es.empty());
  ASSERT_LE(es.size(), 64u);
  const auto& st = d["pg_status"]["fr_wrap@e0"];
  const uint64_t last_dropped = st["last_dropped_collective"];
  EXPECT_EQ(st["dropped"].get<uint64_t>(), last_dropped);  // seqs 1..last_dropped are gone
  // What is left is exactly the sequence after the dropped ones.
  for (size_t i = 0; i < es.size(); ++i) EXPECT_EQ(es[i]["collective_seq_id"].get<uint64_t>(), last_dropped + 1 + i);
  EXPECT_EQ(es.back()["collective_seq_id"], 100);
  EXPECT_EQ(st["last_completed_collective"], 100);
}

TEST(FlightRecorder, TimeoutDumpsAndTheErrorNamesRankGroupSeqPeerAndPath) {
  reset_flight_recorder();
  std::string message;
  std::atomic<bool> done{false};
  run_named(
      2, "sinew", "fr_timeout",
      [&](ProcessGroup& pg) {
        int64_t v = 1;
        pg.allreduce(TensorView::flat(&v, DType::kI64, 1))->wait();
        if (pg.rank() == 1) {  // skips the second allreduce and waits for rank 0 to give up
          while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          return;
        }
        try {
          pg.allreduce(TensorView::flat(&v, DType::kI64, 1))->wait();
        } catch (const TimeoutError& e) {
          message = e.what();
        }
        done = true;
      },
      Millis(400));
  ASSERT_FALSE(message.empty());
  EXPECT_NE(message.find("rank 0"), std::string::npos) << message;
  EXPECT_NE(message.find("'fr_timeout'"), std::string::npos) << message;
  EXPECT_NE(message.find("allreduce"), std::string::npos) << message;
  EXPECT_NE(message.find("2"), std::string::npos) << message;
  EXPECT_NE(message.find("[1]"), std::string::npos) << message;
  const auto at = message.find("flight recorder dump: ");
  ASSERT_NE(at, std::string::npos) << message;
  std::string path = message.substr(at + 22);
  path = path.substr(0, path.find_first_of(" ;]"));
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << path;
  auto d = nlohmann::json::parse(f);
  EXPECT_EQ(d["dump_reason"], "timeout");
  bool found = false;
  for (const auto& e : fr_entries_of(d, "fr_timeout@e0"))
    if (e["collective_seq_id"] == 2 && e["awaited_ranks"] == nlohmann::json::parse("[1]")) found = true;
  EXPECT_TRUE(found) << d.dump(1);
  std::remove(path.c_str());
}

// A dump taken on another thread while rank 0's op waits for its peer shows
// the op, started, whether it runs inline on the issuing thread (small) or
// on the group's worker thread (large): what a hang's diagnosis rests on.
TEST(FlightRecorder, AnOpWaitingForAPeerIsInADumpTakenMeanwhile) {
  for (const int64_t count : {int64_t{2}, int64_t{1} << 20}) {
    reset_flight_recorder();
    const std::string name = "fr_waiting_" + std::to_string(count);
    std::atomic<bool> seen{false}, release{false};
    std::string last_dump;
    std::thread watcher([&] {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!seen && std::chrono::steady_clock::now() < until) {
        auto d = fr_dump();
        for (const auto& e : fr_entries_of(d, name + "@e0"))
          if (e["collective_seq_id"] == 2 && e["state"] == "started") seen = true;
        if (!seen) {
          last_dump = d.dump(1);
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
      }
      release = true;  // also when the record never showed: the test fails, it does not hang
    });
    run_named(2, "sinew", name, [&](ProcessGroup& pg) {
      std::vector<float> v(static_cast<size_t>(count), 1.0f);
      const TensorView t = TensorView::flat(v.data(), DType::kF32, count);
      pg.allreduce(t)->wait();
      // Rank 1 issues the second allreduce only once rank 0's has been seen
      // waiting for it (no other entry of this group can have seq 2 before).
      if (pg.rank() == 1)
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      pg.allreduce(t)->wait();
      EXPECT_EQ(v[0], 4.0f);
    });
    watcher.join();
    EXPECT_TRUE(seen) << count << " elements; the last dump: " << last_dump;
  }
}

TEST(FlightRecorder, AbortIsAnEventInTheTrace) {
  reset_flight_recorder();
  run_named(1, "sinew", "fr_abort", [](ProcessGroup& pg) { pg.abort("stopping early"); });
  auto d = fr_dump();
  bool found = false;
  for (const auto& e : d["entries"])
    if (e["pg_id"] == "fr_abort@e0" && e["event"] == "abort" && e["error"] == "stopping early") found = true;
  EXPECT_TRUE(found) << d.dump(1);
  std::remove(dump_flight_recorder("cleanup").c_str());
}

}  // namespace
}  // namespace sinew::dist
