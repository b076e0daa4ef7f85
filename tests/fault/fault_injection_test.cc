// Fault injection from outside the ranks, with real processes: a rank killed
// while the survivors are inside the shrink, a joiner or a member killed
// during a grow, a stopped peer, and a TCP connection shut down under a live
// rank. Every survivor's view (failed sets, size, epoch, members) must be
// identical, and ft_worker checks every allreduce result exactly.
//
// Seeded random trials (kills at random steps, during shrinks and during
// grows) run with --trials N (or SINEW_FT_TRIALS), seed --seed S (or
// SINEW_FT_SEED), e.g.
//   fault_injection_test --gtest_filter='FaultTrials.*' --trials 1000
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "ft_job.h"

namespace sinew::dist::ft {
namespace {

// Every rank in `survivors` finished with the same view; returns it.
View expect_same_views(const Job& job, const std::vector<int>& survivors) {
  std::optional<View> first;
  for (int r : survivors) {
    const Proc& p = job.proc(r);
    EXPECT_TRUE(p.exited_ok()) << "rank " << r << " status " << p.status << ":\n" << p.output();
    auto v = parse_view(p.output());
    if (!v) {
      ADD_FAILURE() << "rank " << r << " printed no result:\n" << p.output();
      continue;
    }
    EXPECT_EQ(v->orig, r);
    if (!first) first = v;
    EXPECT_EQ(v->shared(), first->shared()) << "rank " << r << " disagrees with rank " << first->orig;
    std::printf("rank %d: %s failed %s first_lost %s detect_ms %.1f\n", r, v->shared().c_str(), v->failed.c_str(),
                v->first_lost.c_str(), v->detect_ms);
  }
  return first.value_or(View{});
}

// A key of the default group's own namespace, as the ranks' job store holds it.
std::string group_key(const std::string& key) { return launch::keys::default_group_root() + "/" + key; }
std::string ack(int epoch, int r) { return group_key(fmt::format("ft/e{}/ack/{}", epoch, r)); }

// Kills `victim`, which stalled itself (paused/<victim>), once the keys in
// `waiting` show the others blocked on it and none of `not_yet` exists (the
// step the victim must never take); then waits for the rest.
void kill_stalled_rank(Job& job, int victim, std::vector<std::string> waiting,
                       const std::vector<std::string>& not_yet) {
  waiting.push_back(fmt::format("paused/{}", victim));
  ASSERT_TRUE(job.wait_keys(waiting, 15000ms));
  for (const auto& k : not_yet) ASSERT_FALSE(job.store().check({k})) << k << " exists: no interleaving";
  job.signal(victim, SIGKILL);
  ASSERT_TRUE(job.wait(20000ms)) << "hang";
}

std::string joined(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// (a) Rank 1 dies; rank 2 is stalled on its way into the shrink and is
// SIGKILLed while 0 and 3 wait in the agreement for its ack.
TEST(FaultInjection, KillDuringShrinkWhileSurvivorsAgree) {
  Job job(4, {"--fail-rank", "1", "--at-step", "5", "--steps", "15", "--pause-rank", "2", "--pause-phase", "shrink"});
  // Their acks are in and rank 2's is not: they are waiting for it.
  kill_stalled_rank(job, 2, {"in/shrink/0", "in/shrink/3", ack(0, 0), ack(0, 3)},
                    {ack(0, 2), group_key("ft/e0/decided")});
  EXPECT_TRUE(job.proc(1).sigkilled());
  EXPECT_TRUE(job.proc(2).sigkilled());
  View v = expect_same_views(job, {0, 3});
  EXPECT_EQ(v.shared(), "size 2 epoch 1 members 0,3");
  EXPECT_EQ(v.failed, "e0[1,2]");
}

// (a) Rank 2 acked the agreement (so the survivors return {1} with it still
// in), then dies before the new group is ready: the survivors' init sees
// its pid gone and they shrink again, instead of waiting out the deadline.
TEST(FaultInjection, KillAfterAgreementWhileTheNewGroupForms) {
  Job job(4, {"--fail-rank", "1", "--at-step", "5", "--steps", "15", "--pause-rank", "2", "--pause-phase", "agreed"});
  // Ranks 0 and 3 (ranks 0 and 2 of epoch 1) are inside the new group's
  // set-up, waiting for rank 2 (its rank 1) to say where it runs.
  kill_stalled_rank(job, 2, {"in/agreed/0", "in/agreed/3", group_key("e1/host/0"), group_key("e1/host/2")},
                    {group_key("e1/host/1")});
  View v = expect_same_views(job, {0, 3});
  EXPECT_EQ(v.shared(), "size 2 epoch 2 members 0,3");
  EXPECT_EQ(v.failed, "e0[1]e1r[1]");  // epoch 1's rank 1 is rank 2
}

// (a) The same for the survivor that admits the joiners (the first one): it
// dies after the agreement, before publishing the admitted list; the next
// survivor decides in its place.
TEST(FaultInjection, AdmittingSurvivorKilledAfterAgreement) {
  Job job(4, {"--fail-rank", "1", "--at-step", "5", "--steps", "15", "--pause-rank", "0", "--pause-phase", "agreed"});
  // The agreement is decided and both are past it; rank 0 never published
  // whom it admits.
  kill_stalled_rank(job, 0, {"in/agreed/2", "in/agreed/3", group_key("ft/e0/decided")},
                    {group_key("join/e0/admitted")});
  View v = expect_same_views(job, {2, 3});
  EXPECT_EQ(v.shared(), "size 2 epoch 2 members 2,3");
  EXPECT_EQ(v.failed, "e0[1]e1r[0]");
}

// (b) Three members admit a joiner at step 4; no failure.
TEST(FaultInjection, GrowAdmitsTheJoiner) {
  Job job(3, {"--grow-at-step", "4", "--steps", "12"}, {}, /*joiners=*/1);
  ASSERT_TRUE(job.wait(20000ms)) << "hang";
  View v = expect_same_views(job, {0, 1, 2, 3});
  EXPECT_EQ(v.shared(), "size 4 epoch 1 members 0,1,2,3");
}

// (b) The joiner is SIGKILLed while the members are inside the grow's
// reconfigure: they drop it in the next epoch (the grown group's init, or
// its watchdog, sees it gone).
TEST(FaultInjection, JoinerKilledDuringGrow) {
  Job job(3, {"--grow-at-step", "4", "--steps", "12"}, {}, /*joiners=*/1);
  ASSERT_TRUE(job.wait_keys({"in/grow/0", "in/grow/1", "in/grow/2"}, 15000ms));
  job.signal(3, SIGKILL);
  ASSERT_TRUE(job.wait(20000ms)) << "hang";
  EXPECT_TRUE(job.proc(3).sigkilled());
  View v = expect_same_views(job, {0, 1, 2});
  EXPECT_EQ(v.shared(), "size 3 epoch 2 members 0,1,2");
  // "r": before the grown group learned who is who; else its watchdog saw it.
  EXPECT_THAT(v.failed, ::testing::AnyOf("e0[]e1r[3]", "e0[]e1[3]"));
}

// (b) Member 1 stalls on its way into the grow and is SIGKILLed while the
// others wait for it in the agreement: the joiner is admitted, 1 is dropped.
TEST(FaultInjection, MemberKilledDuringGrow) {
  Job job(3, {"--grow-at-step", "4", "--steps", "12", "--pause-rank", "1", "--pause-phase", "grow"}, {},
          /*joiners=*/1);
  // Their acks of the grow's agreement are in; rank 1's is not.
  kill_stalled_rank(job, 1, {"in/grow/0", "in/grow/2", ack(0, 0), ack(0, 2)}, {ack(0, 1)});
  View v = expect_same_views(job, {0, 2, 3});
  EXPECT_EQ(v.shared(), "size 3 epoch 1 members 0,2,3");
  EXPECT_EQ(parse_view(job.proc(0).output())->failed, "e0[1]");
  EXPECT_EQ(parse_view(job.proc(2).output())->failed, "e0[1]");
  EXPECT_EQ(parse_view(job.proc(3).output())->failed, "-");  // the joiner came after
}

// (c) SIGSTOP from outside: the stalled heartbeat fails it (1 s timeout
// here). Resumed afterwards, it learns it was dropped and exits by itself.
TEST(FaultInjection, StoppedPeerIsDroppedAndExitsWhenResumed) {
  Job job(3, {"--mark-step", "3", "--steps", "40", "--step-sleep-ms", "5"});
  ASSERT_TRUE(job.wait_keys({"reached/0", "reached/1", "reached/2"}, 15000ms));
  job.store().set("killed_at", std::to_string(Job::wall_ns()));
  job.signal(1, SIGSTOP);
  ASSERT_TRUE(job.wait(20000ms)) << "hang";
  View v = expect_same_views(job, {0, 2});
  EXPECT_EQ(v.shared(), "size 2 epoch 1 members 0,2");
  EXPECT_EQ(v.failed, "e0[1]");
  EXPECT_EQ(v.first_lost, "[1]");
  for (int r : {0, 2}) {
    auto d = parse_view(job.proc(r).output())->detect_ms;
    EXPECT_TRUE(d > 0 && d < 10000) << "rank " << r << " detected the stop after " << d << " ms";
  }
  job.signal(1, SIGCONT);
  ASSERT_TRUE(job.wait(10000ms)) << "the resumed rank hangs:\n" << job.proc(1).output();
  EXPECT_TRUE(job.proc(1).excluded()) << job.proc(1).output();
  EXPECT_THAT(job.proc(1).output(), ::testing::HasSubstr("rank 1 was declared failed by its peers"));
}

// (d) Between "hosts" (UCX over TCP on the loopback): one of rank 1's
// connections to a peer is shut down from outside while both live. The two
// ends get PeerLostError naming each other; the agreement drops one or both
// (whoever the others heard of first), and everyone left agrees and goes on.
TEST(FaultInjection, DroppedConnectionBetweenHosts) {
  Job job(4, {"--mark-step", "3", "--steps", "60", "--step-sleep-ms", "5"},
          {"SINEW_TRANSPORT=ucx", "UCX_NET_DEVICES=lo", "SINEW_FT_STORE_HEARTBEAT_MS=50"});
  ASSERT_TRUE(job.wait_keys({"reached/0", "reached/1", "reached/2", "reached/3"}, 15000ms));
  auto conns = job.rank_connections(1);
  ASSERT_FALSE(conns.empty()) << "no TCP connection from rank 1 to a peer found";
  const auto [fd, peer] = conns.front();
  job.store().set("killed_at", std::to_string(Job::wall_ns()));
  ASSERT_EQ(job.shutdown_socket(1, fd), 0) << "pidfd_getfd/shutdown failed";
  ASSERT_TRUE(job.wait(30000ms)) << "hang";
  std::vector<int> survivors, dropped;
  for (int r = 0; r < 4; ++r) {
    if (job.proc(r).excluded()) dropped.push_back(r);
    else survivors.push_back(r);
  }
  SCOPED_TRACE(fmt::format("rank 1's connection to rank {} (fd {}) shut down", peer, fd));
  ASSERT_FALSE(dropped.empty());
  for (int r : dropped) {
    EXPECT_TRUE(r == 1 || r == peer) << "rank " << r << " was dropped:\n" << job.proc(r).output();
    EXPECT_THAT(job.proc(r).output(), ::testing::HasSubstr("declared failed by its peers"));
  }
  View v = expect_same_views(job, survivors);
  EXPECT_EQ(v.shared(), fmt::format("size {} epoch 1 members {}", survivors.size(), joined(survivors)));
  EXPECT_EQ(v.failed, fmt::format("e0[{}]", joined(dropped)));
  // A survivor that was an end of the connection names the other end.
  for (int r : {1, peer})
    if (std::count(survivors.begin(), survivors.end(), r))
      EXPECT_EQ(parse_view(job.proc(r).output())->first_lost, fmt::format("[{}]", r == 1 ? peer : 1));
}

// --trials N / --seed S on the command line win over SINEW_FT_TRIALS / SINEW_FT_SEED.
int flag_or_env(const char* flag, const char* env, int fallback) {
  const auto& argv = ::testing::internal::GetArgvs();
  for (size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == flag) return std::stoi(argv[i + 1]);
  const char* e = std::getenv(env);
  return e ? std::atoi(e) : fallback;
}

// One random trial: a SIGKILL or SIGSTOP at a random step, optionally a
// second SIGKILL a random time into the shrink; or a grow with the joiner
// or a member SIGKILLed a random time into it. Checks: no hang; every rank
// not killed either survives or was declared failed; all survivors hold the
// same view, whose members are the survivors (and a killed rank only if it
// died after the survivors' last collective with it).
struct Trial {
  std::string desc;
  int world = 0, joiners = 0;
  std::vector<std::string> args;
  std::set<int> doomed;  // ranks that kill themselves (or are stopped)
  int stopped = -1;
};

Trial draw(std::mt19937& gen) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
  Trial t;
  t.world = uni(2, 4);
  const int steps = 14;
  if (uni(0, 2) == 0) {  // grow
    t.joiners = 1;
    const int grow_at = uni(2, 8);
    t.args = {"--grow-at-step", std::to_string(grow_at), "--steps", std::to_string(steps)};
    const int what = uni(0, 2);  // 0: no kill, 1: the joiner, 2: a member
    const int us = uni(0, 8000);  // a shrink or grow takes a few ms here
    if (what == 1) {
      // From its start: before, during or after its admission.
      const int from_start = uni(0, 1500) * 1000;
      t.args.insert(t.args.end(), {"--kill-rank", std::to_string(t.world), "--kill-phase", "start", "--kill-after-us",
                                   std::to_string(from_start)});
      t.doomed.insert(t.world);
      t.desc = fmt::format("world {} grow at {}, joiner killed {} ms after start", t.world, grow_at, from_start / 1000);
    } else if (what == 2) {
      const int m = uni(0, t.world - 1);
      t.args.insert(t.args.end(),
                    {"--kill-rank", std::to_string(m), "--kill-phase", "grow", "--kill-after-us", std::to_string(us)});
      t.doomed.insert(m);
      t.desc = fmt::format("world {} grow at {}, member {} killed {} us into it", t.world, grow_at, m, us);
    } else {
      t.desc = fmt::format("world {} grow at {}", t.world, grow_at);
    }
    return t;
  }
  const int victim = uni(0, t.world - 1);
  const int step = uni(1, 10);
  const bool stop = uni(0, 4) == 0;
  t.args = {"--fail-rank", std::to_string(victim), "--at-step", std::to_string(step), "--steps", std::to_string(steps),
            "--how", stop ? "stop" : "kill"};
  t.doomed.insert(victim);
  if (stop) t.stopped = victim;
  t.desc = fmt::format("world {} rank {} {} at step {}", t.world, victim, stop ? "SIGSTOP" : "SIGKILL", step);
  if (t.world >= 3 && uni(0, 1) == 0) {
    int second = uni(0, t.world - 2);
    if (second >= victim) ++second;
    const int us = uni(0, 8000);  // a shrink or grow takes a few ms here
    t.args.insert(t.args.end(),
                  {"--kill-rank", std::to_string(second), "--kill-phase", "shrink", "--kill-after-us", std::to_string(us)});
    t.doomed.insert(second);
    t.desc += fmt::format(", rank {} killed {} us into the shrink", second, us);
  }
  return t;
}

TEST(FaultTrials, SeededRandom) {
  const int trials = flag_or_env("--trials", "SINEW_FT_TRIALS", 2);
  const int seed = flag_or_env("--seed", "SINEW_FT_SEED", 1);
  std::mt19937 gen(static_cast<uint32_t>(seed));
  int ok = 0, hangs = 0, split = 0, other = 0, dropped_live = 0;
  for (int i = 0; i < trials; ++i) {
    Trial t = draw(gen);
    Job job(t.world, t.args, {}, t.joiners);
    std::vector<int> hung;
    // A self-stopped rank never exits: wait for the others, then reap it.
    const bool finished = job.wait(60000ms, &hung, {t.stopped});
    for (int r = 0; r < job.count(); ++r) job.reap(r);
    std::string verdict;
    std::vector<int> survivors;
    std::set<std::string> views;
    if (!finished) {
      ++hangs;
      verdict = fmt::format("HANG (ranks {} still running after 60 s)", joined(hung));
    } else {
      bool bad = false;
      for (int r = 0; r < job.count(); ++r) {
        const Proc& p = job.proc(r);
        const bool printed = parse_view(p.output()).has_value();
        // A doomed rank whose timer fired after it finished still has a view.
        if (t.doomed.count(r) && (p.sigkilled() || r == t.stopped) && !printed) continue;
        if (p.exited_ok() || (t.doomed.count(r) && printed)) {
          survivors.push_back(r);
          auto v = parse_view(p.output());
          views.insert(v ? v->shared() : "no result");
        } else if (p.excluded()) {
          ++dropped_live;
        } else {
          bad = true;
          verdict += fmt::format(" rank {} failed (status {:#x}): {}", r, p.status, p.output());
        }
      }
      // Every survivor is a member; any other member is a rank that was
      // killed after the survivors' last collective with it.
      bool members_ok = views.size() == 1;
      if (members_ok) {
        std::string m = views.begin()->substr(views.begin()->find("members ") + 8);
        std::set<int> in;
        for (size_t pos = 0; pos < m.size();) {
          size_t end = m.find(',', pos);
          in.insert(std::stoi(m.substr(pos, end - pos)));
          pos = end == std::string::npos ? m.size() : end + 1;
        }
        for (int r : survivors) members_ok = members_ok && in.count(r);
        for (int r : in)
          members_ok = members_ok && (std::count(survivors.begin(), survivors.end(), r) ||
                                      (t.doomed.count(r) && job.proc(r).sigkilled()));
      }
      if (!bad && !members_ok) {
        ++split;
        verdict = "SURVIVOR VIEWS DIFFER:";
        for (const auto& v : views) verdict += " {" + v + "}";
        verdict += " survivors " + joined(survivors);
      } else if (bad) {
        ++other;
      } else {
        ++ok;
        verdict = "ok: " + *views.begin();
      }
    }
    std::printf("trial %d (seed %d): %s: %s\n", i, seed, t.desc.c_str(), verdict.c_str());
    std::fflush(stdout);
  }
  std::printf("trials %d: ok %d, hangs %d, differing survivor views %d, other failures %d; live ranks dropped %d\n",
              trials, ok, hangs, split, other, dropped_live);
  EXPECT_EQ(ok, trials);
}

}  // namespace
}  // namespace sinew::dist::ft
