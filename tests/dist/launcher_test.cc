// `sinew run` end to end (the built binary launching launch_worker), and
// read_launch_env() under each launcher's environment.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "sinew/core/error.h"
#include "sinew/dist/init.h"

extern char** environ;

namespace sinew::dist {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::ContainsRegex;

const std::string kSinew = SINEW_BIN_DIR "/sinew";
const std::string kWorker = SINEW_BIN_DIR "/launch_worker";

std::string hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

bool launcher_var(const std::string& key) {
  static const char* kDropped[] = {"RANK",
                                   "WORLD_SIZE",
                                   "LOCAL_RANK",
                                   "LOCAL_WORLD_SIZE",
                                   "MASTER_ADDR",
                                   "MASTER_PORT",
                                   "OMP_NUM_THREADS",
                                   "SINEW_STORE_TOKEN",
                                   "SINEW_STORE_HOSTED",
                                   "SINEW_BACKEND",
                                   "SINEW_RUN_KILL_GRACE_S",
                                   "SINEW_RUN_ATTEMPT",
                                   "SINEW_JOIN"};
  for (const char* d : kDropped)
    if (key == d) return true;
  return key.rfind("PET_", 0) == 0 || key.rfind("OMPI_", 0) == 0 || key.rfind("SLURM_", 0) == 0;
}

// A process (by default `sinew`) with its stdout and stderr captured.
class Launcher {
 public:
  Launcher(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {},
           const std::string& program = kSinew) {
    std::vector<std::string> argv{program};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env;
    auto overridden = [&](const std::string& name) {
      return std::any_of(extra_env.begin(), extra_env.end(),
                         [&](const std::string& kv) { return kv.substr(0, kv.find('=')) == name; });
    };
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      const std::string name = kv.substr(0, kv.find('='));
      if (!launcher_var(name) && !overridden(name)) env.push_back(kv);
    }
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    int out[2], err[2];
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(err, O_CLOEXEC), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, err[1], STDERR_FILENO);
    auto c_argv = c_strings(argv);
    auto c_env = c_strings(env);
    int rc = posix_spawn(&pid_, program.c_str(), &fa, nullptr, c_argv.data(), c_env.data());
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
    EXPECT_EQ(rc, 0) << "cannot spawn " << program;
  }
  ~Launcher() {
    if (!status_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
    if (err_fd_ >= 0) close(err_fd_);
  }

  pid_t pid() const { return pid_; }
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

  // Reads output until `done` holds (true) or `timeout` passes (false).
  bool read_until(const std::function<bool()>& done, milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
      auto left =
          std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      if (!read_some(std::min<int64_t>(left.count(), 100)) && status_) return done();
    }
    return true;
  }

  // Waits for the launcher to exit, reading its output; the exit code (or
  // 128 + signal), or -1 if it is still running after `timeout`.
  int wait(milliseconds timeout = seconds(20)) {
    read_until([this] { return reap() && out_fd_ < 0 && err_fd_ < 0; }, timeout);
    if (!status_) return -1;
    return WIFEXITED(*status_) ? WEXITSTATUS(*status_) : 128 + WTERMSIG(*status_);
  }

  bool reap() {
    if (status_) return true;
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) status_ = st;
    return status_.has_value();
  }

  // Pids the workers printed as "pid=N".
  std::vector<pid_t> worker_pids() const {
    std::vector<pid_t> pids;
    std::regex re("\\] pid=(\\d+)");
    for (auto it = std::sregex_iterator(out_.begin(), out_.end(), re); it != std::sregex_iterator();
         ++it)
      pids.push_back(std::stoi((*it)[1]));
    return pids;
  }

 private:
  static std::vector<char*> c_strings(std::vector<std::string>& v) {
    std::vector<char*> out;
    for (auto& s : v) out.push_back(s.data());
    out.push_back(nullptr);
    return out;
  }

  // Reads what is available within `ms`; false once both pipes are closed.
  bool read_some(int64_t ms) {
    reap();
    std::vector<pollfd> fds;
    if (out_fd_ >= 0) fds.push_back({out_fd_, POLLIN, 0});
    if (err_fd_ >= 0) fds.push_back({err_fd_, POLLIN, 0});
    if (fds.empty()) {
      std::this_thread::sleep_for(milliseconds(std::min<int64_t>(ms, 10)));
      return false;
    }
    if (poll(fds.data(), fds.size(), static_cast<int>(ms)) <= 0) return true;
    for (auto& p : fds) {
      if (p.revents == 0) continue;
      char buf[4096];
      ssize_t n = read(p.fd, buf, sizeof(buf));
      int& fd = p.fd == out_fd_ ? out_fd_ : err_fd_;
      std::string& text = p.fd == out_fd_ ? out_ : err_;
      if (n > 0) {
        text.append(buf, static_cast<size_t>(n));
      } else {
        close(fd);
        fd = -1;
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::string out_, err_;
  std::optional<int> status_;
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// The lines that start with "[host:rank] ".
std::vector<std::string> rank_lines(const std::string& text, int rank) {
  std::string prefix = "[" + hostname() + ":" + std::to_string(rank) + "] ";
  std::vector<std::string> out;
  for (auto& l : lines_of(text))
    if (l.rfind(prefix, 0) == 0) out.push_back(l.substr(prefix.size()));
  return out;
}

// "KEY=VALUE KEY=VALUE" -> map.
std::map<std::string, std::string> parse_kv(const std::string& line) {
  std::map<std::string, std::string> kv;
  std::istringstream in(line);
  for (std::string item; in >> item;) {
    auto eq = item.find('=');
    if (eq != std::string::npos) kv[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return kv;
}

// A process that is gone: no such pid, or a zombie (not yet reaped by its new parent).
bool process_gone(pid_t pid) {
  if (kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto close = s.rfind(')');
  return close != std::string::npos && close + 2 < s.size() && s[close + 2] == 'Z';
}

// Waits (bounded) until every pid is gone, reaping orphans handed to us as
// child subreaper.
bool all_gone(const std::vector<pid_t>& pids, milliseconds timeout = seconds(5)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    bool gone = true;
    for (pid_t p : pids) gone = gone && process_gone(p);
    if (gone) return true;
    if (std::chrono::steady_clock::now() > deadline) {
      for (pid_t p : pids)  // leave nothing behind, even when failing
        if (!process_gone(p)) kill(p, SIGKILL);
      return false;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

TEST(SinewRun, WorkersGetTorchrunEnvironmentAndPrefixedOutput) {
  Launcher l({"run", "--standalone", "--nproc-per-node", "3", kWorker, "print-env", "launch-env"});
  ASSERT_EQ(l.wait(), 0) << l.err();
  std::smatch m;
  std::regex re("sinew run: standalone rendezvous at 127\\.0\\.0\\.1:(\\d+) \\(run id (\\w+)\\)");
  ASSERT_TRUE(std::regex_search(l.err(), m, re)) << l.err();
  const std::string port = m[1], run_id = m[2];
  EXPECT_THAT(l.err(),
              HasSubstr("Setting OMP_NUM_THREADS environment variable for each process to be 1"));
  std::string token;
  for (int r = 0; r < 3; ++r) {
    auto lines = rank_lines(l.out(), r);
    ASSERT_EQ(lines.size(), 2u) << l.out();
    auto env = parse_kv(lines[0]);
    EXPECT_EQ(env["RANK"], std::to_string(r));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(r));
    EXPECT_EQ(env["ROLE_RANK"], std::to_string(r));
    EXPECT_EQ(env["WORLD_SIZE"], "3");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(env["ROLE_WORLD_SIZE"], "3");
    EXPECT_EQ(env["GROUP_RANK"], "0");
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "1");
    EXPECT_EQ(env["ROLE_NAME"], "default");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["MASTER_PORT"], port);
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "0");
    EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "0");
    EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], run_id);
    EXPECT_EQ(env["TORCHELASTIC_USE_AGENT_STORE"], "False");
    EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
    EXPECT_EQ(env["SINEW_STORE_HOSTED"], "1");
    EXPECT_TRUE(std::regex_match(env["SINEW_STORE_TOKEN"], std::regex("[0-9a-f]{32}")))
        << env["SINEW_STORE_TOKEN"];
    if (r == 0) token = env["SINEW_STORE_TOKEN"];
    EXPECT_EQ(env["SINEW_STORE_TOKEN"], token);
    EXPECT_EQ(lines[1], "launcher=sinew rank=" + std::to_string(r) +
                            " world_size=3 local_rank=" + std::to_string(r) +
                            " local_world_size=3 node_rank=0 master=127.0.0.1:" + port +
                            " hosted=1 restart=0 run_id=" + run_id);
  }
  EXPECT_THAT(l.err(), HasSubstr("attempt 0 succeeded"));
}

TEST(SinewRun, LocalRanksFilterShowsOnlyThoseRanks) {
  Launcher l({"run", "--standalone", "--nproc-per-node", "3", "--local-ranks-filter", "1", kWorker,
              "print-env", "stderr:hello"});
  ASSERT_EQ(l.wait(), 0) << l.err();
  EXPECT_EQ(rank_lines(l.out(), 0).size(), 0u);
  EXPECT_EQ(rank_lines(l.out(), 2).size(), 0u);
  ASSERT_EQ(rank_lines(l.out(), 1).size(), 1u) << l.out();
  EXPECT_EQ(parse_kv(rank_lines(l.out(), 1)[0])["RANK"], "1");
  EXPECT_EQ(rank_lines(l.err(), 1), std::vector<std::string>{"hello"});
  EXPECT_EQ(rank_lines(l.err(), 0).size(), 0u);
  EXPECT_EQ(rank_lines(l.err(), 2).size(), 0u);
}

TEST(SinewRun, FailingWorkerSetsExitCodeAndStopsTheOthers) {
  Launcher l(
      {"run", "--standalone", "--nproc-per-node", "2", kWorker, "fail-rank:1:3", "sleep:30"});
  ASSERT_EQ(l.wait(), 3) << l.err();
  EXPECT_THAT(l.err(), HasSubstr("rank 1 (pid"));
  EXPECT_THAT(l.err(), HasSubstr("failed: 3; stopping the other workers"));
  EXPECT_THAT(l.err(), HasSubstr("attempt 0 failed"));
  std::regex row1("\\n +1 +1 +\\d+ +3 +[0-9.]+s  <- first failure\\n");
  std::regex row0("\\n +0 +0 +\\d+ +SIGTERM +[0-9.]+s  \\(stopped by sinew run\\)\\n");
  EXPECT_TRUE(std::regex_search(l.err(), row1)) << l.err();
  EXPECT_TRUE(std::regex_search(l.err(), row0)) << l.err();
}

TEST(SinewRun, RestartAfterFailureSucceeds) {
  Launcher l({"run", "--standalone", "--nproc-per-node", "2", "--max-restarts", "1", kWorker,
              "exit-on-attempt:0:5", "print-env"});
  ASSERT_EQ(l.wait(), 0) << l.err();
  EXPECT_THAT(l.err(), HasSubstr("attempt 0 failed"));
  EXPECT_THAT(l.err(), HasSubstr("restarting all workers (restart 1 of 1)"));
  EXPECT_THAT(l.err(), HasSubstr("attempt 1 succeeded"));
  for (int r = 0; r < 2; ++r) {
    auto lines = rank_lines(l.out(), r);
    ASSERT_EQ(lines.size(), 1u) << l.out();
    EXPECT_EQ(parse_kv(lines[0])["TORCHELASTIC_RESTART_COUNT"], "1");
    EXPECT_EQ(parse_kv(lines[0])["TORCHELASTIC_MAX_RESTARTS"], "1");
  }
}

TEST(SinewRun, NoRestartsLeftExitsWithTheWorkersCode) {
  Launcher l({"run", "--standalone", "--nproc-per-node", "2", kWorker, "exit-on-attempt:0:5"});
  EXPECT_EQ(l.wait(), 5) << l.err();
  EXPECT_THAT(l.err(), Not(HasSubstr("restarting")));
}

TEST(SinewRun, SigtermStopsSleepingWorkers) {
  Launcher l({"run", "--standalone", "--nproc-per-node", "2", kWorker, "print-pid", "sleep:60"});
  ASSERT_TRUE(l.read_until([&] { return l.worker_pids().size() == 2; }, seconds(10)))
      << l.out() << l.err();
  auto pids = l.worker_pids();
  kill(l.pid(), SIGTERM);
  EXPECT_EQ(l.wait(seconds(10)), 128 + SIGTERM) << l.err();
  EXPECT_TRUE(all_gone(pids));
  EXPECT_THAT(l.err(), HasSubstr("received SIGTERM, forwarding it to the workers"));
  EXPECT_THAT(l.err(), HasSubstr("attempt 0 interrupted"));
  std::regex row("\\n +1 +1 +\\d+ +SIGTERM +[0-9.]+s  \\(stopped by sinew run\\)\\n");
  EXPECT_TRUE(std::regex_search(l.err(), row)) << l.err();
}

TEST(SinewRun, WorkerIgnoringSigtermIsKilledAfterGrace) {
  Launcher l({"run", "--standalone", "--nproc-per-node", "1", kWorker, "ignore-term", "print-pid",
              "sleep:60"},
             {"SINEW_RUN_KILL_GRACE_S=1"});
  ASSERT_TRUE(l.read_until([&] { return l.worker_pids().size() == 1; }, seconds(10))) << l.err();
  auto pids = l.worker_pids();
  kill(l.pid(), SIGTERM);
  EXPECT_EQ(l.wait(seconds(10)), 128 + SIGTERM) << l.err();
  EXPECT_TRUE(all_gone(pids));
  std::regex row("\\n +0 +0 +\\d+ +SIGKILL +[0-9.]+s  \\(stopped by sinew run\\)\\n");
  EXPECT_TRUE(std::regex_search(l.err(), row)) << l.err();
}

TEST(SinewRun, KillingTheLauncherKillsTheWorkers) {
  // Orphaned workers are re-parented to this process, which reaps them.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  Launcher l({"run", "--standalone", "--nproc-per-node", "2", kWorker, "print-pid", "sleep:60"});
  ASSERT_TRUE(l.read_until([&] { return l.worker_pids().size() == 2; }, seconds(10))) << l.err();
  auto pids = l.worker_pids();
  kill(l.pid(), SIGKILL);
  EXPECT_EQ(l.wait(seconds(10)), 128 + SIGKILL);
  EXPECT_TRUE(all_gone(pids));
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST(SinewRun, FaultTolerantKeepsTheSurvivorsOfAKilledWorker) {
  // ft_worker's rank 1 SIGKILLs itself; ranks 0 and 2 reconfigure and finish.
  Launcher l({"run", "--standalone", "--fault-tolerant", "--nproc-per-node", "3",
              SINEW_BIN_DIR "/ft_worker", "--fail-rank", "1", "--at-step", "3", "--steps", "10"});
  ASSERT_EQ(l.wait(seconds(30)), 0) << l.out() << l.err();
  EXPECT_THAT(l.err(), HasSubstr("lost: SIGKILL; --fault-tolerant: the other workers continue"));
  EXPECT_THAT(l.err(), HasSubstr("attempt 0 succeeded (run id"));
  EXPECT_THAT(l.err(), HasSubstr(", 1 of 3 workers lost):"));
  std::regex lost("\\n +1 +1 +\\d+ +SIGKILL +[0-9.]+s  \\(lost; the others continued\\)\\n");
  EXPECT_TRUE(std::regex_search(l.err(), lost)) << l.err();
  EXPECT_THAT(rank_lines(l.out(), 0),
              ::testing::Contains(HasSubstr("RESULT orig 0 rank 0 size 2 epoch 1 reconfigs 1")))
      << l.out();
  EXPECT_THAT(rank_lines(l.out(), 2),
              ::testing::Contains(HasSubstr("RESULT orig 2 rank 1 size 2 epoch 1 reconfigs 1")))
      << l.out();
  // A worker that exits with an error code still fails the job (here with
  // the environment spelling of the option).
  Launcher bad({"run", "--standalone", "--nproc-per-node", "2", kWorker, "fail-rank:1:3"},
               {"SINEW_RUN_FAULT_TOLERANT=1"});
  EXPECT_EQ(bad.wait(), 3) << bad.err();
  EXPECT_THAT(bad.err(), HasSubstr("failed: 3; stopping the other workers"));
}

TEST(SinewRun, FaultTolerantMaxRestartsRespawnsAKilledWorkerAsAJoiner) {
  // Rank 1 SIGKILLs itself at step 10; sinew run respawns it with SINEW_JOIN=1,
  // the survivors admit it at a regroup (every 10 steps) and hand it their state.
  const std::string example = SINEW_BIN_DIR "/fault_tolerant_loop";
  if (access(example.c_str(), X_OK) != 0)
    GTEST_SKIP() << example << " is not built (SINEW_BUILD_EXAMPLES=OFF)";
  Launcher l({"run", "--standalone", "--fault-tolerant", "--max-restarts", "1", "--nproc-per-node",
              "3", example, "--kill-rank", "1", "--at-step", "10", "--steps", "60", "--admit-every",
              "10", "--elems", "256"});
  ASSERT_EQ(l.wait(seconds(60)), 0) << l.out() << l.err();
  EXPECT_THAT(l.err(), HasSubstr("sinew run: respawning local rank 1 as a joiner (restart 1 of 1)"));
  EXPECT_THAT(l.err(), HasSubstr("attempt 0 succeeded (run id"));
  EXPECT_THAT(l.err(), HasSubstr(", 1 of 3 workers lost, 1 respawned as joiner (--max-restarts 1)):"));
  std::regex killed("\\n +1 +1 +\\d+ +SIGKILL +[0-9.]+s  \\(lost; respawned as a joiner\\)\\n");
  std::regex respawn("\\n +1 +1 +\\d+ +0 +[0-9.]+s  \\(respawned as a joiner\\)\\n");
  EXPECT_TRUE(std::regex_search(l.err(), killed)) << l.err();
  EXPECT_TRUE(std::regex_search(l.err(), respawn)) << l.err();
  // The joiner (slot rank 1) gets the last rank and resumes at a multiple of 10.
  std::regex rejoined("rank 1 rejoined as rank 2 of 3 \\(epoch \\d+\\); resuming at step [1-6]0");
  auto slot1 = rank_lines(l.out(), 1);
  EXPECT_TRUE(std::any_of(slot1.begin(), slot1.end(),
                          [&](const std::string& s) { return std::regex_search(s, rejoined); }))
      << l.out();
  auto rank0 = rank_lines(l.out(), 0);
  EXPECT_THAT(rank0, ::testing::Contains(::testing::ContainsRegex(
                         "^\\[step [1-6]0\\] admitted 1 joiner \\(rank 1\\): world size 3")))
      << l.out();
  EXPECT_THAT(rank0, ::testing::Contains(HasSubstr(
                         "done: 60 steps, every average exact, weights identical on every rank; "
                         "final world size 3 (started with 3, lost [1], joined [1])")))
      << l.out();
}

// A rank killed while its group is still initializing: the launcher records
// it lost in the job store, the others' init fails with PeerLost naming it at
// once (not after the group timeout), and they agree, shrink and finish.
class RankDyingDuringInit : public ::testing::TestWithParam<const char*> {};

TEST_P(RankDyingDuringInit, OthersShrinkAndFinish) {
  const std::string example = SINEW_BIN_DIR "/fault_tolerant_loop";
  if (access(example.c_str(), X_OK) != 0)
    GTEST_SKIP() << example << " is not built (SINEW_BUILD_EXAMPLES=OFF)";
  for (int trial = 0; trial < 3; ++trial) {
    Launcher l({"run", "--standalone", "--fault-tolerant", "--nproc-per-node", "4", example, "--kill-rank", "2",
                "--at-step", "-1", "--steps", "30", "--admit-every", "0", "--elems", "256"},
               {std::string("SINEW_TRANSPORT=") + GetParam(), "UCX_NET_DEVICES=lo", "SINEW_FR_BUFFER_SIZE=0"});
    ASSERT_EQ(l.wait(seconds(60)), 0) << l.out() << l.err();
    EXPECT_THAT(l.err(), HasSubstr("sinew run: rank 2 (pid"));
    EXPECT_THAT(l.err(), HasSubstr("attempt 0 succeeded"));
    EXPECT_THAT(rank_lines(l.out(), 0),
                ::testing::Contains(HasSubstr("done: 30 steps, every average exact, weights identical on every rank; "
                                              "final world size 3 (started with 4, lost [2], joined [])")))
        << l.out() << l.err();
  }
}

// Over UCX the rank dies before, while or after it publishes its worker
// address: the others' address wait polls the launcher's record, and a rank
// that gives up during the wire-up leaves a record naming whom it lost, so
// its peers do not take it for dead.
INSTANTIATE_TEST_SUITE_P(Transports, RankDyingDuringInit, ::testing::Values("shm", "ucx"));

TEST(SinewRun, UnderscoreSpellingsAndPetEnvironment) {
  Launcher l({"run", "--rdzv_id", "job7", "--master_addr", "127.0.0.1", "--max_restarts", "0",
              "--local_ranks_filter", "0,1", "--store-token", "tok123", "--backend", "gloo",
              kWorker, "print-env"},
             {"PET_NPROC_PER_NODE=2", "PET_MONITOR_INTERVAL=0.05"});
  ASSERT_EQ(l.wait(), 0) << l.err();
  EXPECT_EQ(rank_lines(l.out(), 2).size(), 0u);
  for (int r = 0; r < 2; ++r) {
    auto lines = rank_lines(l.out(), r);
    ASSERT_EQ(lines.size(), 1u) << l.out();
    auto env = parse_kv(lines[0]);
    EXPECT_EQ(env["WORLD_SIZE"], "2");
    EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "job7");
    EXPECT_EQ(env["SINEW_STORE_TOKEN"], "tok123");
    EXPECT_EQ(env["SINEW_BACKEND"], "gloo");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_NE(env["MASTER_PORT"], "0");
  }
}

TEST(SinewRun, LogDirHoldsPerRankFiles) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("sinew_launcher_test_" + std::to_string(getpid()));
  Launcher l({"run", "--rdzv-id", "logs", "--log-dir", dir.string(), "--nproc-per-node", "2",
              kWorker, "print-env", "stderr:oops", "partial:tail"});
  ASSERT_EQ(l.wait(), 0) << l.err();
  for (int r = 0; r < 2; ++r) {
    fs::path rank_dir = dir / "logs" / "attempt_0" / std::to_string(r);
    std::ifstream out(rank_dir / "stdout.log"), err(rank_dir / "stderr.log");
    std::string out_text((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
    std::string err_text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
    auto lines = lines_of(out_text);
    ASSERT_EQ(lines.size(), 2u) << out_text;
    EXPECT_EQ(parse_kv(lines[0])["RANK"], std::to_string(r));
    EXPECT_EQ(lines[1], "tail");
    EXPECT_EQ(err_text, "oops\n");
    // The console still shows everything, the partial last line included.
    auto console = rank_lines(l.out(), r);
    ASSERT_EQ(console.size(), 2u) << l.out();
    EXPECT_EQ(console[1], "tail");
  }
  fs::remove_all(dir);
}

TEST(SinewRun, TwoNodesOnOneHostShareOneJob) {
  std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  std::vector<std::string> common{"run",    "--nnodes",  "2",   "--rdzv-endpoint",
                                  endpoint, "--rdzv-id", "two", "--nproc-per-node",
                                  "2"};
  auto node = [&](int rank) {
    auto args = common;
    args.insert(args.end(), {"--node-rank", std::to_string(rank), kWorker, "print-env"});
    return args;
  };
  Launcher n1(node(1), {"SINEW_STORE_TOKEN=shared"});
  Launcher n0(node(0), {"SINEW_STORE_TOKEN=shared"});
  ASSERT_EQ(n0.wait(), 0) << n0.err();
  ASSERT_EQ(n1.wait(), 0) << n1.err();
  for (int r = 0; r < 4; ++r) {
    auto lines = rank_lines(r < 2 ? n0.out() : n1.out(), r);
    ASSERT_EQ(lines.size(), 1u) << n0.out() << n1.out();
    auto env = parse_kv(lines[0]);
    EXPECT_EQ(env["WORLD_SIZE"], "4");
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(r % 2));
    EXPECT_EQ(env["GROUP_RANK"], std::to_string(r / 2));
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "2");
    EXPECT_EQ(env["MASTER_ADDR"] + ":" + env["MASTER_PORT"], endpoint);
    EXPECT_EQ(env["SINEW_STORE_TOKEN"], "shared");
  }
}

TEST(SinewRun, WorkersJoinTheLaunchersStore) {
  Launcher l({"run", "--standalone", "--nproc-per-node", "3", kWorker, "init"});
  ASSERT_EQ(l.wait(), 0) << l.out() << l.err();
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(rank_lines(l.out(), r),
              std::vector<std::string>{"init rank=" + std::to_string(r) + " size=3 sum=6"})
        << l.out();
}

TEST(InitProcessGroup, RankZeroHostsTheStoreWithoutALauncher) {
  std::string port = std::to_string(free_port());
  std::vector<std::unique_ptr<Launcher>> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(std::make_unique<Launcher>(
        std::vector<std::string>{"init"},
        std::vector<std::string>{"RANK=" + std::to_string(r), "WORLD_SIZE=2",
                                 "LOCAL_RANK=" + std::to_string(r), "MASTER_ADDR=127.0.0.1",
                                 "MASTER_PORT=" + port},
        kWorker));
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(ranks[r]->wait(), 0) << ranks[r]->err();
    EXPECT_EQ(ranks[r]->out(), "init rank=" + std::to_string(r) + " size=2 sum=3\n");
  }
}

TEST(SinewRun, AFailureOnOneNodeRestartsEveryNode) {
  std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  auto node = [&](int rank, std::vector<std::string> steps) {
    std::vector<std::string> args{"run",
                                  "--nnodes",
                                  "2",
                                  "--node-rank",
                                  std::to_string(rank),
                                  "--rdzv-endpoint",
                                  endpoint,
                                  "--max-restarts",
                                  "1",
                                  "--monitor-interval",
                                  "0.02",
                                  kWorker};
    args.insert(args.end(), steps.begin(), steps.end());
    return args;
  };
  // Node 0's workers wait in attempt 0 and succeed at once in attempt 1;
  // node 1's fail in attempt 0.
  Launcher n0(node(0, {"exit-on-attempt:1:0", "sleep:20"}), {"SINEW_STORE_TOKEN=t2"});
  Launcher n1(node(1, {"exit-on-attempt:0:7", "print-env"}), {"SINEW_STORE_TOKEN=t2"});
  ASSERT_EQ(n0.wait(), 0) << n0.err();
  ASSERT_EQ(n1.wait(), 0) << n1.err();
  EXPECT_THAT(n0.err(), HasSubstr("rank 1 on another node failed (exit 7)"));
  EXPECT_THAT(n0.err(), HasSubstr("attempt 0 failed on another node"));
  EXPECT_THAT(n0.err(), HasSubstr("restarting all workers (restart 1 of 1)"));
  EXPECT_THAT(n0.err(), HasSubstr("attempt 1 succeeded"));
  auto lines = rank_lines(n1.out(), 1);
  ASSERT_EQ(lines.size(), 1u) << n1.out();
  EXPECT_EQ(parse_kv(lines[0])["TORCHELASTIC_RESTART_COUNT"], "1");
  EXPECT_EQ(parse_kv(lines[0])["WORLD_SIZE"], "2");
}

TEST(SinewRun, MultiNodeRequiresAToken) {
  Launcher l({"run", "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:1", kWorker});
  EXPECT_EQ(l.wait(), 2);
  EXPECT_THAT(l.err(), HasSubstr("--store-token"));
  EXPECT_THAT(l.err(), HasSubstr("SINEW_STORE_TOKEN"));
}

TEST(SinewRun, MissingProgramIsAnError) {
  Launcher l({"run", "--standalone", "/nonexistent/prog"});
  EXPECT_EQ(l.wait(), 2);
  EXPECT_THAT(l.err(), HasSubstr("/nonexistent/prog"));
}

// Sets variables for one test and restores the environment afterwards.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::map<std::string, std::string> vars) {
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      std::string key = kv.substr(0, kv.find('='));
      if (launcher_var(key) || key.rfind("TORCHELASTIC_", 0) == 0)
        saved_[key] = kv.substr(key.size() + 1);
    }
    for (auto& [k, v] : saved_) unsetenv(k.c_str());
    for (auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
    set_ = std::move(vars);
  }
  ~ScopedEnv() {
    for (auto& [k, v] : set_) unsetenv(k.c_str());
    for (auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
  }

 private:
  std::map<std::string, std::string> saved_, set_;
};

TEST(ReadLaunchEnv, SingleProcessWithoutALauncher) {
  ScopedEnv env({});
  auto e = read_launch_env();
  EXPECT_EQ(e.launcher, "single");
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
}

TEST(ReadLaunchEnv, TorchrunWithoutSinewStore) {
  ScopedEnv env({{"RANK", "2"},
                 {"WORLD_SIZE", "4"},
                 {"LOCAL_RANK", "0"},
                 {"LOCAL_WORLD_SIZE", "2"},
                 {"GROUP_RANK", "1"},
                 {"MASTER_ADDR", "node7"},
                 {"MASTER_PORT", "1234"},
                 {"TORCHELASTIC_RESTART_COUNT", "3"},
                 {"TORCHELASTIC_RUN_ID", "r9"}});
  auto e = read_launch_env();
  EXPECT_EQ(e.launcher, "torchrun");
  EXPECT_FALSE(e.store_hosted);
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.master_addr, "node7");
  EXPECT_EQ(e.master_port, 1234);
  EXPECT_EQ(e.restart_count, 3);
  EXPECT_EQ(e.run_attempt, 3);  // without SINEW_RUN_ATTEMPT: the restart count
  EXPECT_FALSE(e.join);
  EXPECT_EQ(e.run_id, "r9");
  EXPECT_EQ(e.token, "");
}

TEST(ReadLaunchEnv, SinewRespawnJoinsTheRunningAttempt) {
  ScopedEnv env({{"RANK", "1"},
                 {"WORLD_SIZE", "3"},
                 {"SINEW_STORE_HOSTED", "1"},
                 {"TORCHELASTIC_RESTART_COUNT", "2"},
                 {"SINEW_RUN_ATTEMPT", "1"},
                 {"SINEW_JOIN", "1"}});
  auto e = read_launch_env();
  EXPECT_EQ(e.launcher, "sinew");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.restart_count, 2);
  EXPECT_EQ(e.run_attempt, 1);
  EXPECT_TRUE(e.join);
}

TEST(ReadLaunchEnv, OpenMpi) {
  ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "5"},
                 {"OMPI_COMM_WORLD_SIZE", "8"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                 {"MASTER_ADDR", "head"},
                 {"SINEW_STORE_TOKEN", "t"}});
  auto e = read_launch_env();
  EXPECT_EQ(e.launcher, "mpirun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.master_addr, "head");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.token, "t");
  EXPECT_FALSE(e.store_hosted);
}

TEST(ReadLaunchEnv, SlurmWithBracketNodeList) {
  ScopedEnv env({{"SLURM_PROCID", "7"},
                 {"SLURM_NTASKS", "8"},
                 {"SLURM_LOCALID", "3"},
                 {"SLURM_NODEID", "1"},
                 {"SLURM_TASKS_PER_NODE", "4(x2)"},
                 {"SLURM_JOB_NODELIST", "gpu[03-04]"}});
  auto e = read_launch_env();
  EXPECT_EQ(e.launcher, "srun");
  EXPECT_EQ(e.rank, 7);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 3);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.master_addr, "gpu03");
}

TEST(ReadLaunchEnv, SlurmWithPlainNodeListAndUnevenTasks) {
  ScopedEnv env({{"SLURM_PROCID", "2"},
                 {"SLURM_NTASKS", "3"},
                 {"SLURM_LOCALID", "0"},
                 {"SLURM_NODEID", "1"},
                 {"SLURM_TASKS_PER_NODE", "2,1"},
                 {"SLURM_STEP_NODELIST", "alpha,beta"},
                 {"MASTER_PORT", "4000"}});
  auto e = read_launch_env();
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_EQ(e.master_addr, "alpha");
  EXPECT_EQ(e.master_port, 4000);
}

TEST(ReadLaunchEnv, SlurmPrefersExplicitMasterAndNtasksPerNode) {
  ScopedEnv env({{"SLURM_PROCID", "0"},
                 {"SLURM_NTASKS", "2"},
                 {"SLURM_NTASKS_PER_NODE", "2"},
                 {"SLURM_TASKS_PER_NODE", "9"},
                 {"SLURM_JOB_NODELIST", "n[1-2]"},
                 {"MASTER_ADDR", "10.0.0.1"}});
  auto e = read_launch_env();
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
}

TEST(ReadLaunchEnv, BadIntegerNamesTheVariable) {
  {
    ScopedEnv env({{"RANK", "x1"}, {"WORLD_SIZE", "2"}});
    try {
      read_launch_env();
      FAIL() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("RANK"));
      EXPECT_THAT(e.what(), HasSubstr("x1"));
    }
  }
  {
    ScopedEnv env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "two"}});
    try {
      read_launch_env();
      FAIL() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("SLURM_NTASKS"));
      EXPECT_THAT(e.what(), HasSubstr("two"));
    }
  }
  {
    ScopedEnv env({{"RANK", "4"}, {"WORLD_SIZE", "4"}});
    EXPECT_THROW(read_launch_env(), InvalidArgument);
  }
}

// --- Flight Recorder in real processes -------------------------------------

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
