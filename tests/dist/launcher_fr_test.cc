// The Flight Recorder in real processes: its settings as a worker reads
// them, dumps on a signal and on a write to its pipe, and the dumps of a
// hung or shrunk job launched by `sinew run`.
#include <fcntl.h>

#include <nlohmann/json.hpp>

#include "launcher_support.h"

namespace sinew::dist {
namespace {

using namespace launcher_test;

namespace fs = std::filesystem;

namespace fr_test {

fs::path temp_dir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("sinew_fr_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Waits up to 10 s for a dump file and parses it.
std::optional<nlohmann::json> await_dump(const fs::path& p) {
  for (int i = 0; i < 1000; ++i) {
    if (fs::exists(p)) {
      std::ifstream f(p);
      try {
        return nlohmann::json::parse(f);
      } catch (const nlohmann::json::exception&) {
      }
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  return std::nullopt;
}

}  // namespace fr_test

TEST(FlightRecorderSettings, PyTorchSpellingsInOrderAndTheOneUsedIsLogged) {
  auto capacity = [](std::vector<std::string> env) {
    env.push_back("SINEW_LOG_LEVEL=INFO");
    Launcher l({"fr-capacity"}, env, kWorker);
    EXPECT_EQ(l.wait(), 0) << l.err();
    return std::make_pair(l.out(), l.err());
  };
  auto [o1, e1] = capacity({"TORCH_NCCL_TRACE_BUFFER_SIZE=7"});
  EXPECT_EQ(o1, "fr_capacity=7\n");
  EXPECT_THAT(e1, HasSubstr("[FR] buffer size 7 from TORCH_NCCL_TRACE_BUFFER_SIZE"));
  auto [o2, e2] = capacity({"TORCH_NCCL_TRACE_BUFFER_SIZE=7", "TORCH_FR_BUFFER_SIZE=9"});
  EXPECT_EQ(o2, "fr_capacity=9\n");
  EXPECT_THAT(e2, HasSubstr("[FR] buffer size 9 from TORCH_FR_BUFFER_SIZE"));
  auto [o3, e3] = capacity({"TORCH_FR_BUFFER_SIZE=9", "SINEW_FR_BUFFER_SIZE=0"});
  EXPECT_EQ(o3, "fr_capacity=0\n");
  auto [o4, e4] = capacity({});
  EXPECT_EQ(o4, "fr_capacity=2000\n");
}

TEST(FlightRecorderSettings, BadValueNamesTheVariable) {
  Launcher l({"fr-capacity"}, {"TORCH_FR_BUFFER_SIZE=lots"}, kWorker);
  EXPECT_EQ(l.wait(), 3);
  EXPECT_THAT(l.err(), HasSubstr("TORCH_FR_BUFFER_SIZE"));
  EXPECT_THAT(l.err(), HasSubstr("'lots'"));
}

TEST(FlightRecorderDumps, OnSignalAndOnAWriteToThePipe) {
  auto dir = fr_test::temp_dir("signal");
  Launcher l({"fr-group", "sleep:30"},
             {"SINEW_FR_DUMP_TEMP_FILE=" + (dir / "trace_").string(), "SINEW_FR_PIPE_FILE=" + (dir / "pipe_").string()},
             kWorker);
  ASSERT_TRUE(l.read_until([&] { return l.out().find("fr-ready") != std::string::npos; }, seconds(20))) << l.err();
  kill(l.pid(), SIGUSR2);
  auto d = fr_test::await_dump(dir / "trace_0");
  ASSERT_TRUE(d) << l.err();
  EXPECT_EQ((*d)["dump_reason"], "signal");
  // Default timing (as PyTorch without TORCH_NCCL_ENABLE_TIMING): completion
  // times from the coarse clock, never before the start, and no durations.
  EXPECT_EQ((*d)["exact_timing"], false);
  bool found = false;
  for (const auto& e : (*d)["entries"])
    if (e["profiling_name"] == "sinew:allreduce" && e["pg_id"] == "fr_worker@e0") {
      found = true;
      EXPECT_TRUE(e["duration_ms"].is_null()) << e.dump();
      EXPECT_LE(e["time_discovered_started_ns"].get<int64_t>(), e["time_discovered_completed_ns"].get<int64_t>());
    }
  EXPECT_TRUE(found) << d->dump(1);
  fs::remove(dir / "trace_0");
  ASSERT_TRUE(fs::exists(dir / "pipe_0.pipe")) << l.err();
  {
    int fd = open((dir / "pipe_0.pipe").c_str(), O_WRONLY | O_NONBLOCK);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, "1", 1), 1);
    close(fd);
  }
  d = fr_test::await_dump(dir / "trace_0");
  ASSERT_TRUE(d) << l.err();
  EXPECT_EQ((*d)["dump_reason"], "pipe");
  kill(l.pid(), SIGKILL);
  l.wait();
  fs::remove_all(dir);
}

// The README's hang: rank 1 skips a collective; every rank dumps and the
// analyzer names the collective and the missing rank.
class FlightRecorderHang : public ::testing::TestWithParam<std::string> {};

TEST_P(FlightRecorderHang, EveryRankDumpsAndTheAnalyzerNamesTheMissingRank) {
  const std::string demo = SINEW_BIN_DIR "/collectives_demo";
  if (access(demo.c_str(), X_OK) != 0) GTEST_SKIP() << demo << " is not built (SINEW_BUILD_EXAMPLES=OFF)";
  auto dir = fr_test::temp_dir("hang_" + GetParam());
  Launcher l({"run", "--standalone", "--nproc-per-node", "3", demo, "--backend", GetParam(), "--skip", "1:3",
              "--steps", "6", "--timeout", "2"},
             {"SINEW_FR_DUMP_TEMP_FILE=" + (dir / "rank_").string()});
  EXPECT_NE(l.wait(seconds(60)), 0);
  EXPECT_THAT(l.out() + l.err(), ContainsRegex("Timeout: .*allreduce.*rank [02] of 3"));
  EXPECT_THAT(l.out() + l.err(), HasSubstr("flight recorder dump: " + (dir / "rank_").string()));
  for (int r = 0; r < 3; ++r) {
    auto d = fr_test::await_dump(dir / ("rank_" + std::to_string(r)));
    ASSERT_TRUE(d) << "rank " << r << " did not dump\n" << l.err();
    EXPECT_EQ((*d)["rank"], r);
    EXPECT_EQ((*d)["world_size"], 3);
    // Steps 0-2 are allreduces 1-3 everywhere; rank 1 never issued the 4th.
    uint64_t last = 0;
    for (const auto& e : (*d)["entries"])
      if (e["pg_id"] == "default@e0" && e["event"].is_null()) last = std::max<uint64_t>(last, e["collective_seq_id"]);
    EXPECT_EQ(last, r == 1 ? 3u : 4u) << "rank " << r;
  }
  Launcher fr({"fr", "analyze", dir.string()});
  fr.wait(seconds(30));
  EXPECT_THAT(fr.out(), ContainsRegex("culprit.*allreduce")) << fr.out() << fr.err();
  EXPECT_THAT(fr.out(), HasSubstr("[1]")) << fr.out();
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Backends, FlightRecorderHang, ::testing::Values("sinew", "gloo"));

TEST(FlightRecorderDumps, AKilledRanksPeersDumpBeforeTheyReconfigure) {
  const std::string example = SINEW_BIN_DIR "/fault_tolerant_loop";
  if (access(example.c_str(), X_OK) != 0) GTEST_SKIP() << example << " is not built (SINEW_BUILD_EXAMPLES=OFF)";
  auto dir = fr_test::temp_dir("killed");
  Launcher l({"run", "--standalone", "--fault-tolerant", "--nproc-per-node", "3", example, "--kill-rank", "2",
              "--at-step", "5", "--steps", "12", "--elems", "256"},
             {"SINEW_FR_DUMP_TEMP_FILE=" + (dir / "rank_").string()});
  ASSERT_EQ(l.wait(seconds(60)), 0) << l.out() << l.err();
  for (int r = 0; r < 2; ++r) {
    auto d = fr_test::await_dump(dir / ("rank_" + std::to_string(r)));
    ASSERT_TRUE(d) << "rank " << r << " did not dump\n" << l.err();
    const std::string reason = (*d)["dump_reason"];
    EXPECT_TRUE(reason == "revoke" || reason == "peer_lost") << reason;
    bool revoke = false, later_epoch = false;
    for (const auto& e : (*d)["entries"]) {
      if (e["event"] == "revoke") revoke = true;
      if (e["epoch"].get<int>() > 0) later_epoch = true;
    }
    EXPECT_TRUE(revoke || reason == "peer_lost") << d->dump(1);
    EXPECT_FALSE(later_epoch) << "dumped after the reconfigure\n" << d->dump(1);
  }
  fs::remove_all(dir);
}


}  // namespace
}  // namespace sinew::dist
