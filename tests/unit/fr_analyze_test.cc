// The Flight Recorder analyzer (sinew::fr_analyze): synthetic dumps written
// to a temp folder, read and analyzed in-process, and the report, table,
// trace and JSON checked; a few cases run the built `sinew fr` end to end
// (exit codes, usage errors, the pickles Python reads back).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "sinew/core/error.h"
#include "sinew/dist/fr_analyze.h"

namespace {

namespace fr = sinew::dist::fr;

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kSinew = SINEW_BIN_DIR "/sinew";
constexpr int64_t kT0 = 1732912345000000000;  // 2024-11-29T20:32:25Z
const std::string kDash = "\u2014";

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "sinew_fr_test.XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path operator/(const std::string& s) const { return path_ / s; }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct Run {
  int rc = -1;
  std::string out, err;
};

// Runs `sinew args...` with its output in files beside (not inside) the dumps.
Run sinew(const std::vector<std::string>& args, const TempDir& tmp) {
  std::string cmd = quoted(kSinew);
  for (const auto& a : args) cmd += " " + quoted(a);
  cmd += " >" + quoted((tmp / "stdout").string()) + " 2>" + quoted((tmp / "stderr").string());
  int st = std::system(cmd.c_str());
  Run r;
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp(tmp / "stdout");
  r.err = slurp(tmp / "stderr");
  fs::remove(tmp / "stdout");
  fs::remove(tmp / "stderr");
  return r;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// What `sinew fr analyze` does with its options, in-process: out is the
// report (or with `table` the per-rank table), err the loader's warnings, rc
// the exit code.
struct Args {
  std::vector<int> ranks;
  std::vector<std::string> groups;
  bool table = false;
  std::string prefix;
};

Run analyze_dir(const fs::path& dir, const Args& args = {}) {
  auto loaded = fr::load_dumps({dir.string()}, args.prefix);
  Run r;
  for (const auto& w : loaded.warnings) r.err += w + "\n";
  const fr::Filter f{args.ranks, args.groups};
  auto a = fr::analyze(loaded.dumps);
  fr::check_filter(a, f);
  auto report = fr::make_report(a, f);
  r.out = args.table ? fr::render_table(a, f) : fr::render_text(report, loaded, a, f);
  r.rc = report.exit_code();
  return r;
}

// --- dump builders (docs/flight_recorder.md) --------------------------------

using Shapes = std::vector<std::vector<int64_t>>;
json S(const Shapes& v) { return json(v); }

struct Op {
  std::string pg = "default@e0";
  int64_t seq = 0;
  std::string op = "allreduce";
  std::string state = "completed";
  json in = json::array({json::array({1024})});
  json out = json::array({json::array({1024})});
  std::string dtype = "Float";
  bool p2p = false;
  int peer = -1;
  json extra = json::object();
};

json entry(int64_t record_id, const Op& o) {
  const int64_t t = kT0 + (o.p2p ? 500 + o.seq : o.seq) * 1000000;
  auto dtypes = [&o](const json& sizes) {
    json d = json::array();
    for (size_t i = 0; i < sizes.size(); ++i) d.push_back(o.dtype);
    return d;
  };
  json e = {{"record_id", record_id},
            {"pg_id", o.pg},
            {"process_group", {o.pg.substr(0, o.pg.find('@')), o.pg == "default@e0" ? "default_pg" : "sub"}},
            {"collective_seq_id", o.p2p ? 0 : o.seq},
            {"p2p_seq_id", o.p2p ? o.seq : 0},
            {"op_id", o.seq},
            {"profiling_name", "sinew:" + o.op},
            {"time_created_ns", t},
            {"time_discovered_started_ns", t + 1000},
            {"time_discovered_completed_ns", o.state == "completed" ? json(t + 5000) : json(nullptr)},
            {"duration_ms", nullptr},
            {"input_sizes", o.in},
            {"input_dtypes", dtypes(o.in)},
            {"output_sizes", o.out},
            {"output_dtypes", dtypes(o.out)},
            {"state", o.state},
            {"retired", o.state == "completed"},
            {"timeout_ms", 600000},
            {"is_p2p", o.p2p},
            {"thread_id", "17"},
            {"thread_name", "main"},
            {"frames", json::array()},
            {"epoch", 0},
            {"event", nullptr},
            {"awaited_ranks", json::array()},
            {"error", nullptr},
            {"peer", o.peer >= 0 ? json(o.peer) : json(nullptr)},
            {"a_key_from_the_future", {1, 2}}};
  e.update(o.extra);
  return e;
}

struct Group {
  std::string pg_id;
  std::vector<int> ranks;
};

struct RankDump {
  RankDump(int r, int w) : rank(r), world(w) {}
  int rank;
  int world;
  std::vector<Group> groups{{"default@e0", {}}};
  std::vector<Op> ops;
  std::map<std::string, json> status;  // overrides, by pg_id
  int64_t dump_time_ns = kT0 + 2000000000;
  json offset_ns = nullptr;
  std::string reason = "timeout";

  json doc() const {
    json cfg = json::object(), st = json::object(), entries = json::array();
    for (const Group& g : groups) {
      std::vector<int> ranks = g.ranks;
      if (ranks.empty())
        for (int r = 0; r < world; ++r) ranks.push_back(r);
      int me = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
      cfg[g.pg_id] = {{"name", g.pg_id.substr(0, g.pg_id.find('@'))},
                      {"desc", g.pg_id == "default@e0" ? "default_pg" : "sub"},
                      {"backend", "sinew"},
                      {"epoch", 0},
                      {"ranks", ranks},
                      {"rank", me},
                      {"size", ranks.size()}};
      int64_t enq = 0, done = 0;
      for (const Op& o : ops)
        if (o.pg == g.pg_id && !o.p2p) {
          enq = std::max(enq, o.seq);
          if (o.state == "completed") done = std::max(done, o.seq);
        }
      st[g.pg_id] = {{"last_enqueued_collective", enq}, {"last_started_collective", enq},
                     {"last_completed_collective", done}, {"last_enqueued_p2p", 0},
                     {"last_started_p2p", 0},         {"last_completed_p2p", 0},
                     {"dropped", 0},                   {"last_dropped_collective", 0},
                     {"last_dropped_p2p", 0}};
      if (auto it = status.find(g.pg_id); it != status.end()) st[g.pg_id].update(it->second);
    }
    int64_t rid = 100;
    for (const Op& o : ops) entries.push_back(entry(rid++, o));
    return {{"format", "sinew-fr"},
            {"format_version", 1},
            {"version", "2.10"},
            {"job_id", "job42"},
            {"host", "vm"},
            {"pid", 1000 + rank},
            {"rank", rank},
            {"world_size", world},
            {"attempt", 0},
            {"dump_reason", reason},
            {"dump_detail", fmt_detail()},
            {"dump_time_ns", dump_time_ns},
            {"clock", {{"steady_ns", 5}, {"system_ns", kT0}, {"offset_ns", offset_ns}}},
            {"pg_config", cfg},
            {"pg_status", st},
            {"entries", entries}};
  }
  std::string fmt_detail() const { return reason == "timeout" ? "allreduce seq 12 timed out" : ""; }
};

void write_dump(const fs::path& p, const RankDump& d) { write(p, d.doc().dump()); }

// Four ranks; seqs 1..11 complete everywhere, seq 12 started on all but
// `skipper`, which never called it.
std::vector<RankDump> hang_job(int skipper = 1, int world = 4) {
  std::vector<RankDump> out;
  for (int r = 0; r < world; ++r) {
    RankDump d{r, world};
    for (int64_t s = 1; s <= 11; ++s) d.ops.push_back(Op{.seq = s});
    if (r != skipper) d.ops.push_back(Op{.seq = 12, .state = "started", .extra = {{"awaited_ranks", {skipper}}}});
    out.push_back(d);
  }
  return out;
}

void write_job(const fs::path& dir, const std::vector<RankDump>& job) {
  for (const auto& d : job) write_dump(dir / ("sinew_fr_trace_rank_" + std::to_string(d.rank)), d);
}

// Writes `job` to <tmp>/d and analyzes it.
Run analyze_job(const TempDir& tmp, const std::vector<RankDump>& job, const Args& args = {}) {
  write_job(tmp / "d", job);
  return analyze_dir(tmp / "d", args);
}

// --- analyze -----------------------------------------------------------------

TEST(FrAnalyze, HangNamesTheSkippedCollectiveTheMissingRankAndWhatItLastCompleted) {
  TempDir tmp;
  auto job = hang_job(1);
  job[1].ops[10].extra = {{"frames", {{{"name", "train_step"}, {"filename", "train.cc"}, {"line", 42}}}}};
  write_job(tmp / "dumps", job);
  auto r = sinew({"fr", "analyze", (tmp / "dumps").string()}, tmp);
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_EQ(first_line(r.out), "culprit: group default@e0 collective #12 allreduce " + kDash +
                                   " rank(s) [1] never joined; rank 1 last completed #11 allreduce at "
                                   "2024-11-29T20:32:25.011005Z");
  EXPECT_THAT(r.out, HasSubstr("#0 train_step at train.cc:42"));
  EXPECT_THAT(r.out, HasSubstr("rank 0: allreduce started, awaiting group rank(s) [1] = rank(s) [1]"));
  EXPECT_THAT(r.out, HasSubstr("default@e0 (default, default_pg), ranks [0, 1, 2, 3]: 11 matched, 1 missing ranks"));
  EXPECT_THAT(r.out, HasSubstr("timeout on rank(s) [0, 1, 2, 3]: allreduce seq 12 timed out"));
  EXPECT_EQ(r.err, "");
}

TEST(FrAnalyze, CleanJobMatchesAndExitsZero) {
  TempDir tmp;
  std::vector<RankDump> job;
  for (int r = 0; r < 4; ++r) {
    RankDump d{r, 4};
    d.ops.push_back(Op{.seq = 1});
    // allgather: output = world x input; list form with only 4 of 8 shapes
    // recorded is extrapolated, not a mismatch.
    d.ops.push_back(Op{.seq = 2, .op = "allgather_into_tensor", .in = S({{256}}), .out = S({{1024}})});
    d.ops.push_back(Op{.seq = 3, .op = "reduce_scatter_tensor", .in = S({{1024}}), .out = S({{256}})});
    d.ops.push_back(Op{.seq = 4, .op = "allgather", .in = S({{2}}), .out = S({{2}, {2}, {2}, {2}})});
    d.ops.push_back(Op{.seq = 5, .op = "barrier", .in = json::array(), .out = json::array()});
    d.ops.push_back(Op{.seq = 6, .op = "broadcast", .in = S({{8, 8}}), .out = S({{8, 8}})});
    // A ring of sends: r -> r+1.
    d.ops.push_back(Op{.seq = 1, .op = "send", .in = S({{16}}), .out = json::array(), .p2p = true, .peer = (r + 1) % 4});
    d.ops.push_back(Op{.seq = 2, .op = "recv", .in = json::array(), .out = S({{16}}), .p2p = true, .peer = (r + 3) % 4});
    job.push_back(d);
  }
  auto r = analyze_job(tmp, job);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(first_line(r.out), HasSubstr("no culprit"));
  EXPECT_THAT(r.out, HasSubstr("ranks [0, 1, 2, 3]: 10 matched"));
  EXPECT_THAT(r.out, Not(HasSubstr("problems:")));
}

TEST(FrAnalyze, AllgatherAcrossEightRanksWithFourShapesRecordedMatches) {
  TempDir tmp;
  std::vector<RankDump> job;
  for (int r = 0; r < 8; ++r) {
    RankDump d{r, 8};
    d.ops.push_back(Op{.seq = 1, .op = "allgather", .in = S({{3}}), .out = S({{3}, {3}, {3}, {3}}),
                       .extra = {{"input_count", 1}, {"output_count", 8}}});
    job.push_back(d);
  }
  auto r = analyze_job(tmp, job);
  EXPECT_EQ(r.rc, 0) << r.out;
}

struct MismatchCase {
  const char* name;
  Op base;  // seq 3 on every rank but the odd one
  int odd_rank;
  Op odd;
  std::string headline;
};

TEST(FrAnalyze, SizeDtypeAndTypeMismatchesAreClassifiedAndTheOddRankNamed) {
  const Op allreduce{.seq = 3};
  const Op allgather{.seq = 3, .op = "allgather_into_tensor", .in = S({{256}}), .out = S({{1024}})};
  const std::vector<MismatchCase> cases = {
      {"size", allreduce, 2, Op{.seq = 3, .in = S({{512}}), .out = S({{512}})},
       "collective #3 allreduce " + kDash + " size mismatch: rank(s) [2] input [[512]] vs [[1024]] on rank(s) [0, 1, 3]"},
      {"dtype", allreduce, 3, Op{.seq = 3, .dtype = "Half"},
       "collective #3 allreduce " + kDash + " dtype mismatch: rank(s) [3] Half vs Float on rank(s) [0, 1, 2]"},
      {"type", allreduce, 1, Op{.seq = 3, .op = "broadcast"},
       "collective #3 allreduce " + kDash +
           " type mismatch: rank(s) [1] ran broadcast while rank(s) [0, 2, 3] ran allreduce"},
      {"allgather output", allgather, 0,
       Op{.seq = 3, .op = "allgather_into_tensor", .in = S({{256}}), .out = S({{512}})},
       "collective #3 allgather_into_tensor " + kDash +
           " size mismatch: rank 0 output [[512]] is not 4 x input [[256]]"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir tmp;
    std::vector<RankDump> job;
    for (int r = 0; r < 4; ++r) {
      RankDump d{r, 4};
      for (int64_t s = 1; s <= 5; ++s) d.ops.push_back(s != 3 ? Op{.seq = s} : r == c.odd_rank ? c.odd : c.base);
      job.push_back(d);
    }
    auto r = analyze_job(tmp, job);
    EXPECT_EQ(r.rc, 1) << r.out;
    EXPECT_EQ(first_line(r.out), "culprit: group default@e0 " + c.headline) << r.out;
  }
}

TEST(FrAnalyze, TruncatedGarbageEmptyBinaryAndForeignFilesAreSkippedNotFatal) {
  TempDir tmp;
  auto dir = tmp / "dumps";
  auto job = hang_job(1);
  write_dump(dir / "sinew_fr_trace_rank_0", job[0]);
  write_dump(dir / "sinew_fr_trace_rank_1", job[1]);
  write_dump(dir / "sinew_fr_trace_rank_2", job[2]);
  // Rank 3's dump cut off in its entries: nlohmann writes sorted keys, so
  // its header ("format", "rank", "pg_config") is lost too.
  std::string text = job[3].doc().dump();
  write(dir / "sinew_fr_trace_rank_3", text.substr(0, text.find("\"record_id\":105")));
  write(dir / "garbage.txt", "this is not a dump {{{");
  write(dir / "empty", "");
  write(dir / "binary.bin", std::string("\x7f" "ELF\0\0\xff\xfe", 8));
  write(dir / "pytorch_pickle_rank_0", std::string("\x80\x02}q\x00.", 6));
  write(dir / "other.json", R"({"format": "something-else", "rank": 0})");
  write(dir / "cut_early_5", R"({"format": "sinew-fr", "ra)");
  auto r = analyze_dir(dir);
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_THAT(first_line(r.out), HasSubstr("collective #12 allreduce " + kDash + " rank(s) [1] never joined"));
  EXPECT_THAT(r.err, HasSubstr("garbage.txt: not a JSON object"));
  EXPECT_THAT(r.err, HasSubstr("empty: empty"));
  EXPECT_THAT(r.err, HasSubstr("binary.bin: binary"));
  EXPECT_THAT(r.err, HasSubstr("pytorch_pickle_rank_0: a pickle"));
  EXPECT_THAT(r.err, HasSubstr("other.json: JSON, but not a sinew flight-recorder dump"));
  EXPECT_THAT(r.err, HasSubstr("cut_early_5: cut off at byte 27 before its rank and entries"));
  EXPECT_THAT(r.err, HasSubstr("rank 3 (from its file name)"));
  EXPECT_THAT(r.err, HasSubstr("salvaged 5 entries"));
  EXPECT_THAT(r.out, HasSubstr("dumps: rank(s) [0, 1, 2, 3] of world 4, job job42 (6 other files skipped"));
  // Rank 3 lost seqs 6..12 with its tail: not recorded, not "missing".
  EXPECT_THAT(r.out, Not(HasSubstr("rank(s) [3] never joined")));
}

TEST(FrAnalyze, WrappedRingStillNamesTheCulpritAndDoesNotCallDroppedSeqsMissing) {
  TempDir tmp;
  std::vector<RankDump> job;
  // Rank 0 kept 1001..1012, ranks 1 and 3 991..1012, rank 2 990..1011 and
  // never joined 1012.
  const std::map<int, std::pair<int64_t, int64_t>> kept = {{0, {1001, 1012}}, {1, {991, 1012}},
                                                           {2, {990, 1011}}, {3, {991, 1012}}};
  for (const auto& [rank, range] : kept) {
    RankDump d{rank, 4};
    for (int64_t s = range.first; s <= range.second; ++s)
      d.ops.push_back(Op{.seq = s, .state = s == 1012 ? "started" : "completed"});
    d.status["default@e0"] = {{"dropped", range.first - 1}, {"last_dropped_collective", range.first - 1}};
    job.push_back(d);
  }
  auto r = analyze_job(tmp, job);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_THAT(first_line(r.out), HasSubstr("collective #1012 allreduce " + kDash +
                                           " rank(s) [2] never joined; rank 2 last completed #1011 allreduce"));
  EXPECT_THAT(r.out, HasSubstr("ranks [0, 1, 2, 3]: 22 matched, 1 missing ranks"));
  EXPECT_THAT(r.out, HasSubstr("rank 0: ring wrapped; default@e0 lost 1000 entries (collectives through #1000)"));
  auto table = analyze_dir(tmp / "d", {.table = true});
  EXPECT_THAT(table.out, HasSubstr("dropped"));
  size_t missing = 0;
  for (size_t at = table.out.find("MISSING"); at != std::string::npos; at = table.out.find("MISSING", at + 1)) ++missing;
  EXPECT_EQ(missing, 1u) << table.out;
}

TEST(FrAnalyze, OddFileNamesAndDuplicateRanksUseTheNewestDump) {
  TempDir tmp;
  auto dir = tmp / "d";
  auto job = hang_job(2);
  write_dump(dir / "weird name (copy).dump", job[0]);
  write_dump(dir / "x", job[1]);
  write_dump(dir / ".hidden", job[2]);
  write_dump(dir / "nested" / "deeper" / "rank-three.JSON", job[3]);
  RankDump stale{1, 4};
  stale.ops.push_back(Op{.seq = 1, .state = "started"});
  stale.dump_time_ns = kT0;
  write_dump(dir / "old_rank1_copy", stale);
  auto r = analyze_dir(dir);
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_THAT(first_line(r.out), HasSubstr("rank(s) [2] never joined; rank 2 last completed #11"));
  EXPECT_THAT(r.err, HasSubstr("rank 1: two dumps"));
  EXPECT_THAT(r.err, HasSubstr("using the newer " + (dir / "x").string()));
  EXPECT_THAT(r.out, HasSubstr("11 matched, 1 missing ranks"));

  auto only = analyze_dir(dir, {.prefix = "weird"});
  EXPECT_THAT(only.out, HasSubstr("dumps: rank(s) [0] of world 4"));
}

// default@e0 over 4 ranks, tp@e0 over ranks 1 and 3. Rank 3 is busy
// elsewhere: it joined neither tp #5 nor default #12; rank 1 waits in tp #5,
// so it never reaches default #12. With `deadlock`, rank 3 is instead in
// default #12, waiting for rank 1.
std::vector<RankDump> two_group_job(bool deadlock = false) {
  std::vector<RankDump> job;
  for (int r = 0; r < 4; ++r) {
    RankDump d{r, 4};
    if (r == 1 || r == 3) d.groups.push_back({"tp@e0", {1, 3}});
    for (int64_t s = 1; s <= 11; ++s) d.ops.push_back(Op{.seq = s});
    if (r == 1 || r == 3)
      for (int64_t s = 1; s <= 4; ++s) d.ops.push_back(Op{.pg = "tp@e0", .seq = s, .in = S({{8}}), .out = S({{8}})});
    // Rank 1 entered tp #5 after the others entered default #12.
    if (r == 1)
      d.ops.push_back(Op{.pg = "tp@e0", .seq = 5, .state = "started", .in = S({{8}}), .out = S({{8}}),
                         .extra = {{"time_created_ns", kT0 + 20000000}}});
    if (r == 0 || r == 2 || (r == 3 && deadlock)) d.ops.push_back(Op{.seq = 12, .state = "started"});
    job.push_back(d);
  }
  return job;
}

TEST(FrAnalyze, FollowsABlockedRankToTheGroupWhereTheWaitingStops) {
  TempDir tmp;
  auto r = analyze_job(tmp, two_group_job());
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_THAT(first_line(r.out), HasSubstr("culprit: group tp@e0 collective #5 allreduce " + kDash +
                                           " rank(s) [3] never joined; rank 3 last completed #4 allreduce"));
  EXPECT_THAT(r.out, HasSubstr("reached from: group default@e0 collective #12 allreduce: rank(s) [1, 3] never "
                               "joined it and are blocked here"));
  EXPECT_THAT(r.out, HasSubstr("rank 3: has no unfinished operation recorded"));
  EXPECT_THAT(r.out, Not(HasSubstr("deadlock")));
}

TEST(FrAnalyze, RanksWaitingOnEachOtherAcrossGroupsAreCalledADeadlock) {
  TempDir tmp;
  auto r = analyze_job(tmp, two_group_job(/*deadlock=*/true));
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_THAT(first_line(r.out), HasSubstr("rank(s) [3] never joined"));
  EXPECT_THAT(first_line(r.out), HasSubstr("group tp@e0 collective #5"));
  EXPECT_THAT(r.out, HasSubstr("rank 3: oldest unfinished operation: default@e0 #12 allreduce (started"));
  EXPECT_THAT(r.out, HasSubstr("a cross-group ordering deadlock"));
}

TEST(FrAnalyze, RankAndGroupFiltersAndTheTable) {
  TempDir tmp;
  write_job(tmp / "d", two_group_job());
  const fs::path dir = tmp / "d";

  auto def = analyze_dir(dir, {.groups = {"default"}});
  EXPECT_EQ(def.rc, 1);
  EXPECT_THAT(first_line(def.out), HasSubstr("group default@e0 collective #12"));
  EXPECT_THAT(def.out, Not(HasSubstr("tp@e0 (")));

  auto tp = analyze_dir(dir, {.ranks = {3}, .groups = {"tp@e0"}});
  EXPECT_THAT(first_line(tp.out), HasSubstr("group tp@e0 collective #5"));

  auto rank0 = analyze_dir(dir, {.ranks = {0}, .groups = {"tp"}});
  EXPECT_EQ(rank0.rc, 0) << rank0.out;  // rank 0 is no member of tp

  auto all = analyze_dir(dir, {.table = true});
  EXPECT_EQ(all.rc, 1);
  auto header = first_line(all.out);
  for (int r = 0; r < 4; ++r) EXPECT_THAT(header, HasSubstr("rank " + std::to_string(r)));
  EXPECT_THAT(all.out, HasSubstr("tp@e0       collective #5 allreduce"));
  EXPECT_THAT(all.out, HasSubstr("MISSING"));

  auto some = analyze_dir(dir, {.ranks = {1, 3}, .groups = {"tp"}, .table = true});
  header = first_line(some.out);
  EXPECT_THAT(header, HasSubstr("rank 1"));
  EXPECT_THAT(header, HasSubstr("rank 3"));
  EXPECT_THAT(header, Not(HasSubstr("rank 0")));
  EXPECT_THAT(some.out, Not(HasSubstr("default@e0")));
}

TEST(FrAnalyze, PointToPointPairsAndAnUnansweredSend) {
  TempDir tmp;
  std::vector<RankDump> job;
  for (int r = 0; r < 2; ++r) {
    RankDump d{r, 2};
    d.ops.push_back(Op{.seq = 1});
    if (r == 0) {
      d.ops.push_back(Op{.seq = 1, .op = "send", .in = S({{4}}), .out = json::array(), .p2p = true, .peer = 1});
      d.ops.push_back(Op{.seq = 2, .op = "send", .state = "started", .in = S({{4}}), .out = json::array(), .p2p = true,
                         .peer = 1});
    } else {
      d.ops.push_back(Op{.seq = 1, .op = "recv", .in = json::array(), .out = S({{4}}), .p2p = true, .peer = 0});
    }
    job.push_back(d);
  }
  auto r = analyze_job(tmp, job);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_THAT(first_line(r.out), HasSubstr("group default@e0 p2p send 0->1 #2 " + kDash +
                                           " rank 1 never posted the matching recv"));
  EXPECT_THAT(r.out, HasSubstr("2 matched, 1 missing ranks"));
}

TEST(FrAnalyze, APeerWithoutADumpAndTheErrorsOthersRecorded) {
  TempDir tmp;
  std::vector<RankDump> job;
  for (int r : {0, 1, 3}) {
    RankDump d{r, 4};
    for (int64_t s = 1; s <= 6; ++s) d.ops.push_back(Op{.seq = s});
    d.ops.push_back(Op{.seq = 7,
                       .extra = {{"error", "PeerLostError: rank 2 closed its connection"}, {"awaited_ranks", {2}}}});
    d.reason = "peer_lost";
    job.push_back(d);
  }
  auto r = analyze_job(tmp, job);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_THAT(first_line(r.out), HasSubstr("collective #7 allreduce " + kDash +
                                           " failed: rank 0: PeerLostError: rank 2 closed its connection (and "
                                           "ranks [1, 3] failed too)"));
  EXPECT_THAT(r.out, HasSubstr("no dump from rank(s) [2]"));
  EXPECT_THAT(r.out, HasSubstr("peer_lost on rank(s) [0, 1, 3]"));
  EXPECT_THAT(r.out, HasSubstr("awaiting group rank(s) [2] = rank(s) [2]"));
}

TEST(FrAnalyze, NoDumpsAndBadUsageExitTwo) {
  TempDir tmp;
  write(tmp / "d" / "junk", "nothing here");
  auto none = sinew({"fr", "analyze", (tmp / "d").string()}, tmp);
  EXPECT_EQ(none.rc, 2);
  EXPECT_THAT(none.err, HasSubstr("no sinew flight-recorder dumps"));
  auto missing = sinew({"fr", "analyze", (tmp / "nope").string()}, tmp);
  EXPECT_EQ(missing.rc, 2);
  auto bad_rank = sinew({"fr", "analyze", "--rank", "one", (tmp / "d").string()}, tmp);
  EXPECT_EQ(bad_rank.rc, 2);
  EXPECT_THAT(bad_rank.err, HasSubstr("--rank"));
  auto unknown = sinew({"fr", "analyze", "--frobnicate", (tmp / "d").string()}, tmp);
  EXPECT_EQ(unknown.rc, 2);
  auto no_dir = sinew({"fr", "analyze"}, tmp);
  EXPECT_EQ(no_dir.rc, 2);
  write_job(tmp / "job", hang_job());
  auto typo = sinew({"fr", "analyze", "--group", "defualt", (tmp / "job").string()}, tmp);
  EXPECT_EQ(typo.rc, 2);
  EXPECT_THAT(typo.err, HasSubstr("one of default@e0"));
}

// --- timeline ----------------------------------------------------------------

TEST(FrTimeline, OneProcessPerRankCompleteEventsAndPairedFlows) {
  TempDir tmp;
  auto job = hang_job(1);
  job[2].offset_ns = 7000;  // rank 2's clock runs 7 µs ahead of the store's
  write_job(tmp / "d", job);
  auto loaded = fr::load_dumps({(tmp / "d").string()});
  const json t = fr::make_timeline(fr::analyze(loaded.dumps), {});
  std::set<int> pids;
  std::map<int, std::string> names;
  std::map<int64_t, std::pair<int, int>> flows;  // id -> (s count, f count)
  size_t x = 0;
  std::map<std::pair<int, std::string>, double> ts;  // (pid, name) -> ts
  for (const auto& e : t.at("traceEvents")) {
    const std::string ph = e.at("ph");
    if (ph == "M" && e.at("name") == "process_name") names[e.at("pid")] = e.at("args").at("name");
    if (ph == "M" && e.at("name") == "thread_name") {
      EXPECT_EQ(e.at("args").at("name"), "default@e0");
    }
    if (ph == "X") {
      ++x;
      pids.insert(e.at("pid").get<int>());
      EXPECT_GE(e.at("dur").get<double>(), 0.0);
      ts[{e.at("pid"), e.at("name")}] = e.at("ts");
    }
    if (ph == "s") ++flows[e.at("id")].first;
    if (ph == "f") {
      ++flows[e.at("id")].second;
      EXPECT_EQ(e.at("bp"), "e");
    }
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(names[0], "rank 0 (vm)");
  EXPECT_EQ(names[3], "rank 3 (vm)");
  EXPECT_EQ(x, 11u * 4 + 3);
  // 11 collectives on 4 ranks (3 arrows each) and #12 on 3 ranks (2 arrows).
  EXPECT_EQ(flows.size(), 11u * 3 + 2);
  for (const auto& [id, n] : flows) EXPECT_EQ(n, std::make_pair(1, 1)) << "flow " << id;
  const double on0 = ts[{0, "allreduce #5"}], on2 = ts[{2, "allreduce #5"}];
  EXPECT_DOUBLE_EQ(on0 - on2, 7.0);
  EXPECT_THAT(t.dump(), HasSubstr("\"unfinished_at_dump\":true"));
}

// --- the library's own contract ------------------------------------------------

TEST(FrLoad, AnUnknownFormatVersionIsRefusedNamingTheFileTheVersionAndTheSupportedOnes) {
  TempDir tmp;
  auto job = hang_job(1);
  write_job(tmp / "d", job);
  json future = job[2].doc();
  future["format_version"] = 99;
  const fs::path file = tmp / "d" / "sinew_fr_trace_rank_2";
  write(file, future.dump());
  try {
    fr::load_dumps({(tmp / "d").string()});
    FAIL() << "a dump of format_version 99 was read";
  } catch (const sinew::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr(file.string()));
    EXPECT_THAT(e.what(), HasSubstr("got 99"));
    EXPECT_THAT(e.what(), HasSubstr("one of [1]"));
  }
  std::string why;
  EXPECT_THROW(fr::parse_dump(future.dump(), "x", why), sinew::InvalidArgument);
  future["format_version"] = 1;
  EXPECT_TRUE(fr::parse_dump(future.dump(), "x", why).has_value()) << why;
}

TEST(FrReport, TheReportAsJsonNamesTheCulpritAndCountsEachGroup) {
  TempDir tmp;
  write_job(tmp / "d", hang_job(1));
  auto loaded = fr::load_dumps({(tmp / "d").string()});
  auto a = fr::analyze(loaded.dumps);
  auto report = fr::make_report(a, {});
  ASSERT_TRUE(report.culprit.has_value());
  EXPECT_EQ(report.exit_code(), 1);
  const json j = fr::render_json(report, loaded, a, {});
  EXPECT_EQ(j.at("headline"), report.headline);
  EXPECT_EQ(first_line(fr::render_text(report, loaded, a, {})), report.headline);
  EXPECT_EQ(j.at("exit_code"), 1);
  const json& c = j.at("culprit");
  EXPECT_EQ(c.at("group"), "default@e0");
  EXPECT_EQ(c.at("seq"), 12);
  EXPECT_EQ(c.at("kind"), "missing ranks");
  EXPECT_EQ(c.at("blamed"), json::array({1}));
  EXPECT_EQ(j.at("dumps").at("ranks"), json::array({0, 1, 2, 3}));
  ASSERT_EQ(j.at("groups").size(), 1u);
  EXPECT_EQ(j.at("groups")[0].at("counts").at("matched"), 11);
  EXPECT_EQ(j.at("groups")[0].at("problems").size(), 1u);
}

// --- export --pickle ---------------------------------------------------------

TEST(FrExport, PicklesReadBackByPythonWithTheKeysTorchfrtraceReads) {
  if (std::system("python3 -c 'import pickle' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not available";
  TempDir tmp;
  auto job = hang_job(1);
  job[0].ops.push_back(Op{.seq = 1, .op = "send", .in = S({{4}}), .out = json::array(), .p2p = true, .peer = 1});
  job[0].ops.push_back(Op{.seq = 13, .op = "allgather", .in = S({{2}}), .out = S({{2}, {2}, {2}, {2}})});
  job[0].ops.push_back(Op{.seq = 0, .op = "sinew:abort", .extra = {{"event", "abort"}, {"collective_seq_id", 0}}});
  write_job(tmp / "d", job);
  auto r = sinew({"fr", "export", "--pickle", (tmp / "d").string(), "-o", (tmp / "out").string()}, tmp);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("rank 0: 1 group events left out"));
  EXPECT_THAT(r.err, HasSubstr("rank 0: 1 point-to-point entries left out"));
  // What torchfrtrace's loader, builder and Op need from every file.
  const std::string check = R"PY(
import ast, os, pickle, sys
d = sys.argv[1]
files = sorted(os.listdir(d))
assert files == ['sinew_fr_trace_rank_%d' % r for r in range(4)], files
known = {'broadcast', 'reduce', 'all_gather', 'all_reduce', 'reduce_scatter', 'gather', 'scatter',
         'all_to_all', 'barrier', 'coalesced'}
for f in files:
    dump = pickle.load(open(os.path.join(d, f), 'rb'))
    assert dump['version'] == '2.10'
    for key in ('entries', 'pg_config', 'pg_status'):
        assert key in dump, key
    for name, cfg in dump['pg_config'].items():
        assert isinstance(ast.literal_eval(cfg['ranks']), list) and 'desc' in cfg
    for e in dump['entries']:
        for key in ('record_id', 'pg_id', 'process_group', 'collective_seq_id', 'p2p_seq_id', 'op_id',
                    'profiling_name', 'time_created_ns', 'input_sizes', 'input_dtypes', 'output_sizes',
                    'output_dtypes', 'state', 'time_discovered_started_ns', 'time_discovered_completed_ns',
                    'retired', 'timeout_ms', 'is_p2p', 'frames'):
            assert key in e, key
        assert isinstance(e['process_group'], tuple) and e['process_group'][0] in dump['pg_config']
        lib, op = e['profiling_name'].split(':')
        assert lib == 'nccl'
        kind = op.split(' ')[0]
        assert kind in known, op
        if kind == 'all_gather':
            assert e['output_sizes'] == [[8]], e['output_sizes']
    print(f, len(dump['entries']), dump['entries'][-1]['state'], dump['entries'][-1]['time_created_ns'])
)PY";
  write(tmp / "check.py", check);
  std::string cmd = "python3 " + quoted((tmp / "check.py").string()) + " " + quoted((tmp / "out").string()) + " >" +
                    quoted((tmp / "py.out").string()) + " 2>&1";
  int st = std::system(cmd.c_str());
  std::string py = slurp(tmp / "py.out");
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << py;
  EXPECT_THAT(py, HasSubstr("sinew_fr_trace_rank_0 13 completed 1732912345013000000"));
  EXPECT_THAT(py, HasSubstr("sinew_fr_trace_rank_1 11 completed"));
  EXPECT_THAT(py, HasSubstr("sinew_fr_trace_rank_2 12 started"));
}

}  // namespace
