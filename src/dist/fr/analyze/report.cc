// The human side of `sinew fr analyze`: the first line names the culprit (or
// says there is none) so that it is what a user sees in a CI log; the rest
// backs it up.
#include "sinew/dist/fr_analyze.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <ctime>
#include <iterator>
#include <map>
#include <set>

namespace sinew::dist::fr {
namespace {

constexpr size_t kMaxProblemsPerGroup = 20;
constexpr size_t kMaxFrames = 16;
constexpr size_t kMaxCellWidth = 40;

template <class... Args>
void put(std::string& out, fmt::format_string<Args...> f, Args&&... args) {
  fmt::format_to(std::back_inserter(out), f, std::forward<Args>(args)...);
}

std::string ranks_text(const std::vector<int>& r) { return fmt::format("[{}]", fmt::join(r, ", ")); }

const Dump* dump_of(const Analysis& a, int rank) {
  auto it = a.dumps.find(rank);
  return it == a.dumps.end() ? nullptr : it->second;
}

std::string op_text(const Entry& e) {
  if (e.is_p2p) return fmt::format("{} p2p#{} {}{}", e.pg_id, e.p2p_seq_id, e.op, e.peer ? fmt::format(" (peer group rank {})", *e.peer) : "");
  return fmt::format("{} #{} {}", e.pg_id, e.collective_seq_id, e.op);
}

// "rank 1 last completed #11 allreduce at <time>"
std::string last_completed_text(const Analysis& a, int rank, const std::string& pg_id) {
  const Dump* d = dump_of(a, rank);
  if (!d) return fmt::format("rank {} left no dump", rank);
  if (const Entry* e = last_completed(*d, pg_id))
    return fmt::format("rank {} last completed #{} {} at {}", rank, e->collective_seq_id, e->op,
                       format_time(e->time_completed_ns ? e->time_completed_ns : e->time_created_ns));
  const GroupStatus* st = d->status(pg_id);
  if (st && st->last_completed_collective > 0)
    return fmt::format("rank {} last completed #{} (per its pg_status; the entry is no longer in its ring)", rank,
                       st->last_completed_collective);
  return fmt::format("rank {} completed nothing recorded in {}", rank, pg_id);
}

std::string culprit_headline(const Analysis& a, const Culprit& c) {
  const Group& g = a.groups[c.at.group];
  const Row& r = a.row(c.at);
  std::string head = fmt::format("culprit: group {} {} \u2014 ", g.pg_id, r.label());
  switch (r.kind) {
    case Kind::kMissingRanks: {
      head += r.p2p ? r.detail.substr(0, r.detail.find(" (")) : fmt::format("rank(s) {} never joined", ranks_text(r.blamed));
      for (int m : r.blamed) head += "; " + last_completed_text(a, m, g.pg_id);
      return head;
    }
    case Kind::kIncomplete:
      return head + r.detail + "; the others have not finished";
    case Kind::kFailed:
      return head + "failed: " + r.detail;
    default:
      return head + kind_name(r.kind) + ": " + r.detail;
  }
}

void print_frames(std::string& out, const std::vector<Frame>& frames, const char* indent) {
  for (size_t i = 0; i < frames.size() && i < kMaxFrames; ++i)
    put(out, "{}#{} {} at {}:{}\n", indent, i, frames[i].name, frames[i].filename, frames[i].line);
  if (frames.size() > kMaxFrames) put(out, "{}... {} more frames\n", indent, frames.size() - kMaxFrames);
}

std::string job_ranks(const Group& g, const std::vector<int>& group_ranks) {
  std::vector<int> out;
  for (int x : group_ranks) out.push_back(x >= 0 && x < static_cast<int>(g.ranks.size()) ? g.ranks[x] : x);
  return ranks_text(out);
}

void print_culprit_details(const Analysis& a, const Culprit& c, std::string& out) {
  const Group& g = a.groups[c.at.group];
  const Row& r = a.row(c.at);
  for (int m : r.blamed) {
    const Dump* d = dump_of(a, m);
    if (!d) continue;
    if (const Entry* e = last_completed(*d, g.pg_id)) {
      put(out, "  rank {}{}: last completed #{} {} at {}, record {}\n", m,
                 d->host.empty() ? "" : " (" + bare_host(d->host) + ")", e->collective_seq_id, e->op,
                 format_time(e->time_completed_ns), e->record_id);
      print_frames(out, e->frames, "      ");
    }
    if (const Entry* b = blocked_at(*d))
      put(out, "  rank {}: oldest unfinished operation: {} ({} since {})\n", m, op_text(*b), b->state,
                 format_time(b->time_started_ns ? b->time_started_ns : b->time_created_ns));
    else
      put(out, "  rank {}: has no unfinished operation recorded\n", m);
    if (d->truncated_at) put(out, "  rank {}: its dump is cut off; newer entries may be lost\n", m);
  }
  size_t shown = 0;
  for (const auto& [rank, cell] : r.cells) {
    const Entry* e = cell.entry();
    if (!e || (e->awaited_ranks.empty() && !e->error)) continue;
    if (++shown > 8) break;
    std::string line = fmt::format("  rank {}: {} {}", rank, e->op, e->state);
    if (!e->awaited_ranks.empty())
      line += fmt::format(", awaiting group rank(s) {} = rank(s) {}", ranks_text(e->awaited_ranks),
                          job_ranks(g, e->awaited_ranks));
    if (e->error) line += fmt::format("; error: {}", *e->error);
    put(out, "{}\n", line);
  }
  if (r.kind != Kind::kMissingRanks && r.kind != Kind::kIncomplete) {
    for (int m : r.blamed) {
      const Dump* d = dump_of(a, m);
      auto it = r.cells.find(m);
      if (!d || it == r.cells.end() || !it->second.entry()) continue;
      const Entry* e = it->second.entry();
      put(out, "  rank {}: {} input {} {} output {} {} ({})\n", m, e->op,
                 shapes_text(e->input_sizes, e->input_count), fmt::join(e->input_dtypes, ","),
                 shapes_text(e->output_sizes, e->output_count), fmt::join(e->output_dtypes, ","), e->state);
      print_frames(out, e->frames, "      ");
    }
  }
  for (const RowRef& v : c.via) {
    const Row& vr = a.row(v);
    put(out, "  reached from: group {} {}: rank(s) {} never joined it and are blocked here\n",
               a.groups[v.group].pg_id, vr.label(), ranks_text(vr.blamed));
  }
  if (c.cycle) put(out, "  the blocked ranks wait on each other: a cross-group ordering deadlock\n");
  for (const RowRef& o : c.others) {
    const Row& orow = a.row(o);
    put(out, "  also: group {} {} \u2014 {}: {}\n", a.groups[o.group].pg_id, orow.label(), kind_name(orow.kind),
               orow.detail);
  }
}

void print_dumps(const LoadResult& loaded, const Analysis& a, std::string& out) {
  std::vector<int> ranks;
  int world = 0;
  std::set<std::string> jobs, versions;
  std::map<std::pair<std::string, std::string>, std::vector<int>> reasons;
  for (const Dump& d : loaded.dumps) {
    ranks.push_back(d.rank);
    world = std::max(world, d.world_size);
    if (!d.job_id.empty()) jobs.insert(d.job_id);
    if (!d.version.empty()) versions.insert(d.version);
    reasons[{d.dump_reason.empty() ? "unknown" : d.dump_reason, d.dump_detail}].push_back(d.rank);
  }
  size_t skipped = loaded.files_seen - loaded.dumps.size();
  put(out, "dumps: rank(s) {} of world {}{}{}\n", ranks_text(ranks), world,
             jobs.empty() ? "" : fmt::format(", job {}", fmt::join(jobs, "/")),
             skipped ? fmt::format(" ({} other files skipped, see stderr)", skipped) : "");
  std::vector<int> absent;
  for (int r = 0; r < world; ++r)
    if (!a.dumps.count(r)) absent.push_back(r);
  if (!absent.empty()) put(out, "  no dump from rank(s) {}\n", ranks_text(absent));
  if (versions.size() > 1) put(out, "  dump versions differ: {}\n", fmt::join(versions, ", "));
  for (const auto& [key, who] : reasons)
    put(out, "  {} on rank(s) {}{}\n", key.first, ranks_text(who), key.second.empty() ? "" : ": " + key.second);
}

void print_groups(const Analysis& a, const Filter& f, std::string& out) {
  put(out, "groups:\n");
  for (const Group& g : a.groups) {
    if (!f.group(g)) continue;
    std::map<Kind, size_t> counts;
    for (const Row& r : g.rows)
      if (f.row(r)) ++counts[r.kind];
    std::vector<std::string> parts;
    for (Kind k : kAllKinds)
      if (counts[k]) parts.push_back(fmt::format("{} {}", counts[k], kind_name(k)));
    put(out, "  {} ({}{}), ranks {}: {}\n", g.pg_id, g.name, g.desc.empty() ? "" : ", " + g.desc,
               ranks_text(g.ranks), parts.empty() ? "no operations recorded" : fmt::format("{}", fmt::join(parts, ", ")));
  }
}

void print_problems(const Analysis& a, const Filter& f, std::string& out) {
  bool header = false;
  for (const Group& g : a.groups) {
    if (!f.group(g)) continue;
    size_t n = 0;
    for (const Row& r : g.rows) {
      if (!r.problem() || !f.row(r)) continue;
      if (!header) put(out, "problems:\n");
      header = true;
      if (++n <= kMaxProblemsPerGroup)
        put(out, "  {} {}: {} \u2014 {}\n", g.pg_id, r.label(), kind_name(r.kind), r.detail);
    }
    if (n > kMaxProblemsPerGroup) put(out, "  {}: ... and {} more\n", g.pg_id, n - kMaxProblemsPerGroup);
  }
}

void print_events(const Analysis& a, const Filter& f, std::string& out) {
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<int>> events;
  for (const auto& [rank, d] : a.dumps) {
    if (!f.rank(rank)) continue;
    for (const Entry& e : d->entries) {
      if (!e.event || *e.event == "create") continue;
      auto g = std::find_if(a.groups.begin(), a.groups.end(), [&e](const Group& x) { return x.pg_id == e.pg_id; });
      if (g != a.groups.end() && !f.group(*g)) continue;
      auto& who = events[{e.pg_id, *e.event, e.error.value_or("")}];
      if (who.empty() || who.back() != rank) who.push_back(rank);
    }
  }
  if (events.empty()) return;
  put(out, "group events:\n");
  for (const auto& [key, who] : events) {
    const auto& [pg, ev, why] = key;
    put(out, "  {} {} on rank(s) {}{}\n", pg, ev, ranks_text(who), why.empty() ? "" : ": " + why);
  }
}

std::string cell_text(const Cell& c) {
  if (c.presence != Presence::kPresent) return c.presence == Presence::kMissing ? "MISSING" : presence_name(c.presence);
  const Entry& e = *c.entry();
  std::string t = fmt::format("{} {} {}", e.op,
                              e.input_sizes.empty() ? shapes_text(e.output_sizes, e.output_count)
                                                    : shapes_text(e.input_sizes, e.input_count),
                              e.state);
  if (e.error) t += " (error)";
  if (t.size() > kMaxCellWidth) t = t.substr(0, kMaxCellWidth - 3) + "...";
  return t;
}

}  // namespace

std::string format_time(std::optional<int64_t> ns) {
  if (!ns) return "an unknown time";
  std::time_t secs = static_cast<std::time_t>(*ns / 1000000000);
  int64_t micros = (*ns % 1000000000) / 1000;
  if (micros < 0) {
    micros += 1000000;
    --secs;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, micros);
}

Report make_report(const Analysis& a, const Filter& f) {
  Report r;
  r.culprit = find_culprit(a, f);
  if (r.culprit) {
    r.headline = culprit_headline(a, *r.culprit);
    return r;
  }
  size_t ops = 0, groups = 0;
  for (const Group& g : a.groups) {
    if (!f.group(g)) continue;
    ++groups;
    ops += static_cast<size_t>(std::count_if(g.rows.begin(), g.rows.end(), [&f](const Row& row) { return f.row(row); }));
  }
  r.headline = fmt::format("no culprit: {} operations in {} group(s) matched or are still in flight on every rank",
                           ops, groups);
  return r;
}

std::string render_text(const Report& r, const LoadResult& loaded, const Analysis& a, const Filter& f) {
  std::string out = r.headline + "\n";
  if (r.culprit) print_culprit_details(a, *r.culprit, out);
  print_dumps(loaded, a, out);
  print_groups(a, f, out);
  print_problems(a, f, out);
  print_events(a, f, out);
  if (!a.notes.empty()) {
    put(out, "notes:\n");
    for (const auto& n : a.notes) put(out, "  {}\n", n);
  }
  return out;
}

std::string render_table(const Analysis& a, const Filter& f) {
  std::string out;
  std::set<int> rank_set;
  for (const auto& [r, d] : a.dumps) rank_set.insert(r);
  for (const Group& g : a.groups)
    if (f.group(g)) rank_set.insert(g.ranks.begin(), g.ranks.end());
  std::vector<int> ranks;
  for (int r : rank_set)
    if (f.rank(r)) ranks.push_back(r);

  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header{"group", "operation"};
  for (int r : ranks) header.push_back(fmt::format("rank {}", r));
  header.push_back("verdict");
  rows.push_back(header);
  for (const Group& g : a.groups) {
    if (!f.group(g)) continue;
    for (const Row& r : g.rows) {
      if (!f.row(r)) continue;
      std::vector<std::string> line{g.pg_id, r.label()};
      for (int rank : ranks) {
        auto it = r.cells.find(rank);
        line.push_back(it == r.cells.end() ? "" : cell_text(it->second));
      }
      line.push_back(kind_name(r.kind));
      rows.push_back(std::move(line));
    }
  }
  std::vector<size_t> width(header.size(), 0);
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  for (size_t k = 0; k < rows.size(); ++k) {
    std::string line;
    for (size_t i = 0; i < rows[k].size(); ++i)
      line += i + 1 == rows[k].size() ? rows[k][i] : fmt::format("{:<{}}  ", rows[k][i], width[i]);
    put(out, "{}\n", line);
    if (k == 0) {
      size_t total = 0;
      for (size_t w : width) total += w + 2;
      put(out, "{}\n", std::string(total - 2, '-'));
    }
  }
  return out;
}

}  // namespace sinew::dist::fr
