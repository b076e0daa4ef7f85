// Matching and classification for `sinew fr analyze`. A member without an
// entry is only "missing" when its own record proves it never joined: its
// ring reaches past that sequence number and its pg_status says it never
// enqueued it. Sequence numbers its ring dropped (pg_status
// last_dropped_collective) are not held against it.
#include "sinew/dist/fr_analyze.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <set>
#include <tuple>

#include "sinew/core/error.h"

namespace sinew::dist::fr {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// Names as sinew records them; PyTorch's spellings map onto them so dumps
// converted from PyTorch's format classify the same.
std::string canonical(const std::string& op) {
  std::string s;
  for (char c : op) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  s.erase(0, s.find_first_not_of('_'));
  static const std::map<std::string, std::string> kAlias = {
      {"all_reduce", "allreduce"},
      {"all_reduce_barrier", "barrier"},
      {"all_gather", "allgather"},
      {"all_gather_base", "allgather_into_tensor"},
      {"all_gather_into_tensor", "allgather_into_tensor"},
      {"reduce_scatter_base", "reduce_scatter_tensor"},
      {"all_to_all_single", "all_to_all"},
      {"all_to_all_v_single", "all_to_all_v"},
      {"broadcast_oop", "broadcast"},
      {"reduce_oop", "reduce"},
  };
  auto it = kAlias.find(s);
  return it == kAlias.end() ? s : it->second;
}

std::optional<int64_t> in_elements(const Entry& e) {
  if (e.input_sizes.empty()) return std::nullopt;
  return elements(e.input_sizes, e.input_count);
}

std::optional<int64_t> out_elements(const Entry& e) {
  if (e.output_sizes.empty()) return std::nullopt;
  return elements(e.output_sizes, e.output_count);
}

std::string in_text(const Entry& e) { return shapes_text(e.input_sizes, e.input_count); }
std::string out_text(const Entry& e) { return shapes_text(e.output_sizes, e.output_count); }

std::string ranks_text(const std::vector<int>& r) { return fmt::format("[{}]", fmt::join(r, ", ")); }

std::set<std::string> dtypes(const Entry& e) {
  std::set<std::string> s(e.input_dtypes.begin(), e.input_dtypes.end());
  s.insert(e.output_dtypes.begin(), e.output_dtypes.end());
  return s;
}

// Groups ranks by the value they report, the most common value first (ties:
// the value of the lowest rank).
template <class V>
std::vector<std::pair<V, std::vector<int>>> votes(const std::vector<std::pair<int, V>>& xs) {
  std::map<V, std::vector<int>> by;
  for (const auto& [r, v] : xs) by[v].push_back(r);
  std::vector<std::pair<V, std::vector<int>>> out(by.begin(), by.end());
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    if (a.second.size() != b.second.size()) return a.second.size() > b.second.size();
    return a.second.front() < b.second.front();
  });
  return out;
}

template <class V>
std::vector<int> minority(const std::vector<std::pair<V, std::vector<int>>>& v) {
  std::vector<int> out;
  for (size_t i = 1; i < v.size(); ++i) out.insert(out.end(), v[i].second.begin(), v[i].second.end());
  std::sort(out.begin(), out.end());
  return out;
}

struct Finding {
  Kind kind;
  std::vector<int> blamed;
  std::string detail;
};

using Present = std::vector<std::pair<int, const Entry*>>;

// What must agree for each collective: within one rank's entry (output n
// times the input for allgather, ...) and across ranks (the side every rank
// sends the same amount of).
struct SizeRule {
  enum Within { kNoWithin, kSame, kOutIsNIn, kInIsNOut } within;
  enum Cross { kNoCross, kIn, kOut, kInOrOut, kBoth, kSums } cross;
};

SizeRule size_rule(const std::string& op) {
  if (op == "allreduce" || op == "reduce" || op == "all_to_all") return {SizeRule::kSame, SizeRule::kIn};
  if (op == "broadcast") return {SizeRule::kSame, SizeRule::kInOrOut};
  if (op == "allgather" || op == "allgather_into_tensor" || op == "gather")
    return {SizeRule::kOutIsNIn, SizeRule::kIn};
  if (op == "reduce_scatter" || op == "reduce_scatter_tensor" || op == "scatter")
    return {SizeRule::kInIsNOut, SizeRule::kOut};
  if (op == "all_to_all_v") return {SizeRule::kNoWithin, SizeRule::kSums};
  if (op == "barrier") return {SizeRule::kNoWithin, SizeRule::kNoCross};
  return {SizeRule::kNoWithin, SizeRule::kBoth};
}

std::optional<Finding> check_sizes(const Present& present, const std::string& op, int64_t n, bool everyone) {
  SizeRule rule = size_rule(op);
  Finding f{Kind::kSizeMismatch, {}, {}};
  for (const auto& [r, e] : present) {
    auto in = in_elements(*e), out = out_elements(*e);
    if (!in || !out) continue;
    std::string why;
    if (rule.within == SizeRule::kSame && *in != *out)
      why = fmt::format("output {} differs from input {}", out_text(*e), in_text(*e));
    else if (rule.within == SizeRule::kOutIsNIn && *out != n * *in)
      why = fmt::format("output {} is not {} x input {}", out_text(*e), n, in_text(*e));
    else if (rule.within == SizeRule::kInIsNOut && *in != n * *out)
      why = fmt::format("input {} is not {} x output {}", in_text(*e), n, out_text(*e));
    if (why.empty()) continue;
    if (f.blamed.empty()) f.detail = fmt::format("rank {} {}", r, why);
    f.blamed.push_back(r);
  }
  if (!f.blamed.empty()) return f;

  auto compare = [&](bool input) -> std::optional<Finding> {
    std::vector<std::pair<int, int64_t>> xs;
    std::map<int, const Entry*> by_rank;
    for (const auto& [r, e] : present) {
      auto v = input ? in_elements(*e) : out_elements(*e);
      if (!v) continue;
      xs.emplace_back(r, *v);
      by_rank[r] = e;
    }
    auto v = votes(xs);
    if (v.size() < 2) return std::nullopt;
    auto odd = minority(v);
    auto sz = [&](int r) { return input ? in_text(*by_rank[r]) : out_text(*by_rank[r]); };
    return Finding{Kind::kSizeMismatch, odd,
                   fmt::format("rank(s) {} {} {} vs {} on rank(s) {}", ranks_text(odd), input ? "input" : "output",
                               sz(odd.front()), sz(v.front().second.front()), ranks_text(v.front().second))};
  };
  switch (rule.cross) {
    case SizeRule::kIn:
      return compare(true);
    case SizeRule::kOut:
      return compare(false);
    case SizeRule::kInOrOut: {
      bool any_in = std::any_of(present.begin(), present.end(), [](auto& p) { return !p.second->input_sizes.empty(); });
      return compare(any_in);
    }
    case SizeRule::kBoth:
      if (auto x = compare(true)) return x;
      return compare(false);
    case SizeRule::kSums: {
      if (!everyone) return std::nullopt;
      int64_t in = 0, out = 0;
      for (const auto& [r, e] : present) {
        auto i = in_elements(*e), o = out_elements(*e);
        if (!i || !o) return std::nullopt;
        in += *i;
        out += *o;
      }
      if (in == out) return std::nullopt;
      return Finding{Kind::kSizeMismatch, {},
                     fmt::format("the ranks send {} elements in all but receive {}", in, out)};
    }
    case SizeRule::kNoCross:
      break;
  }
  return std::nullopt;
}

std::optional<Finding> check_dtypes(const Present& present) {
  Finding f{Kind::kDtypeMismatch, {}, {}};
  std::vector<std::pair<int, std::vector<std::string>>> xs;
  for (const auto& [r, e] : present) {
    auto s = dtypes(*e);
    if (s.size() > 1) {
      if (f.blamed.empty())
        f.detail = fmt::format("rank {} input {} but output {}", r, fmt::join(e->input_dtypes, ","),
                               fmt::join(e->output_dtypes, ","));
      f.blamed.push_back(r);
    }
    if (!s.empty()) xs.emplace_back(r, std::vector<std::string>(s.begin(), s.end()));
  }
  if (!f.blamed.empty()) return f;
  auto v = votes(xs);
  if (v.size() < 2) return std::nullopt;
  auto odd = minority(v);
  std::string odd_types;
  for (size_t i = 1; i < v.size(); ++i)
    odd_types += (i > 1 ? "/" : "") + fmt::format("{}", fmt::join(v[i].first, ","));
  return Finding{Kind::kDtypeMismatch, odd,
                 fmt::format("rank(s) {} {} vs {} on rank(s) {}", ranks_text(odd), odd_types,
                             fmt::join(v.front().first, ","), ranks_text(v.front().second))};
}

std::string states_text(const Present& present) {
  std::vector<std::pair<int, std::string>> xs;
  for (const auto& [r, e] : present) xs.emplace_back(r, e->state);
  std::vector<std::string> parts;
  for (const auto& [state, ranks] : votes(xs)) parts.push_back(fmt::format("{} on {}", state, ranks_text(ranks)));
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::optional<Finding> check_errors(const Present& present, const std::vector<int>& members) {
  std::vector<int> failed, awaited;
  std::string first;
  for (const auto& [r, e] : present) {
    if (!e->error) continue;
    if (failed.empty()) first = fmt::format("rank {}: {}", r, *e->error);
    failed.push_back(r);
    for (int g : e->awaited_ranks)
      if (g >= 0 && g < static_cast<int>(members.size())) awaited.push_back(members[g]);
  }
  if (failed.empty()) return std::nullopt;
  std::sort(awaited.begin(), awaited.end());
  awaited.erase(std::unique(awaited.begin(), awaited.end()), awaited.end());
  if (failed.size() > 1) first += fmt::format(" (and ranks {} failed too)", ranks_text({failed.begin() + 1, failed.end()}));
  return Finding{Kind::kFailed, awaited, first};
}

// Most severe finding wins; the others are appended to its detail.
void settle(Row& row, std::vector<Finding> found) {
  if (found.empty()) return;
  std::stable_sort(found.begin(), found.end(), [](const Finding& a, const Finding& b) { return a.kind > b.kind; });
  row.kind = found.front().kind;
  row.blamed = found.front().blamed;
  row.detail = found.front().detail;
  for (size_t i = 1; i < found.size(); ++i)
    row.detail += fmt::format("; also {}: {}", kind_name(found[i].kind), found[i].detail);
}

void gather_cells(const Row& row, Present& present, std::vector<int>& missing, std::vector<int>& nodump) {
  for (const auto& [r, c] : row.cells) {
    if (c.presence == Presence::kPresent) present.emplace_back(r, c.entry());
    else if (c.presence == Presence::kMissing) missing.push_back(r);
    else if (c.presence == Presence::kNoDump) nodump.push_back(r);
  }
}

void set_first_created(Row& row) {
  for (const auto& [r, c] : row.cells)
    for (const Entry* e : c.entries)
      if (e->time_created_ns && (!row.first_created_ns || *e->time_created_ns < *row.first_created_ns))
        row.first_created_ns = e->time_created_ns;
}

void classify_collective(Row& row, const Group& g) {
  Present present;
  std::vector<int> missing, nodump;
  gather_cells(row, present, missing, nodump);
  set_first_created(row);
  std::vector<std::pair<int, std::string>> ops;
  for (const auto& [r, e] : present) ops.emplace_back(r, canonical(e->op));
  auto ov = votes(ops);
  row.op = ov.empty() ? "?" : row.cells.at(ov.front().second.front()).entry()->op;
  std::vector<Finding> found;
  if (ov.size() > 1) {
    auto odd = minority(ov);
    found.push_back({Kind::kTypeMismatch, odd,
                     fmt::format("rank(s) {} ran {} while rank(s) {} ran {}", ranks_text(odd),
                                 row.cells.at(odd.front()).entry()->op, ranks_text(ov.front().second), row.op)});
  } else if (!ov.empty()) {
    if (auto f = check_sizes(present, ov.front().first, static_cast<int64_t>(g.ranks.size()),
                             missing.empty() && nodump.empty()))
      found.push_back(*f);
    if (auto f = check_dtypes(present)) found.push_back(*f);
  }
  if (!missing.empty()) {
    std::string d = fmt::format("rank(s) {} never joined ({})", ranks_text(missing), states_text(present));
    if (!nodump.empty()) d += fmt::format("; no dump from rank(s) {}", ranks_text(nodump));
    found.push_back({Kind::kMissingRanks, missing, d});
  }
  if (auto f = check_errors(present, g.ranks)) found.push_back(*f);
  std::set<std::string> states;
  for (const auto& [r, e] : present) states.insert(e->state);
  if (states.size() > 1) found.push_back({Kind::kStateMismatch, {}, states_text(present)});
  if (found.empty()) {
    if (!nodump.empty()) {
      row.kind = Kind::kIncomplete;
      row.blamed = nodump;
      row.detail = fmt::format("no dump from rank(s) {} ({})", ranks_text(nodump), states_text(present));
    } else if (!states.empty() && *states.begin() != "completed") {
      row.kind = Kind::kPending;
      row.detail = states_text(present);
    }
    return;
  }
  settle(row, std::move(found));
}

// What a send sends (its input) or a receive receives (its output),
// whichever side the recorder filled.
std::optional<int64_t> volume(const Entry& e, bool sending) {
  auto first = sending ? in_elements(e) : out_elements(e);
  return first ? first : (sending ? out_elements(e) : in_elements(e));
}

void classify_p2p(Row& row) {
  set_first_created(row);
  row.op = "send/recv";
  const Cell& s = row.cells.at(row.src);
  const Cell& d = row.cells.at(row.dst);
  if (s.presence == Presence::kPresent && d.presence == Presence::kPresent) {
    const Entry& se = *s.entry();
    const Entry& re = *d.entry();
    std::vector<Finding> found;
    auto sent = volume(se, true), received = volume(re, false);
    if (sent && received && *sent != *received)
      found.push_back({Kind::kSizeMismatch, {row.src, row.dst},
                       fmt::format("rank {} sends {} elements, rank {} receives {}", row.src, *sent, row.dst,
                                   *received)});
    auto sd = dtypes(se), rd = dtypes(re);
    if (!sd.empty() && !rd.empty() && sd != rd)
      found.push_back({Kind::kDtypeMismatch, {row.src, row.dst},
                       fmt::format("rank {} sends {}, rank {} receives {}", row.src, fmt::join(sd, ","), row.dst,
                                   fmt::join(rd, ","))});
    Present both{{row.src, &se}, {row.dst, &re}};
    if (auto f = check_errors(both, {})) found.push_back(*f);
    if (found.empty() && !(se.completed() && re.completed())) {
      row.kind = Kind::kPending;
      row.detail = states_text(both);
    }
    settle(row, std::move(found));
    return;
  }
  bool send_side = s.presence == Presence::kPresent;
  const Cell& have = send_side ? s : d;
  const Cell& lack = send_side ? d : s;
  int lacking = send_side ? row.dst : row.src;
  const char* wanted = send_side ? "recv" : "send";
  if (lack.presence == Presence::kNoDump) {
    if (have.entry()->completed()) return;
    row.kind = Kind::kIncomplete;
    row.blamed = {lacking};
    row.detail = fmt::format("no dump from rank {} ({} {})", lacking, have.entry()->state, send_side ? "send" : "recv");
  } else if (lack.presence == Presence::kMissing && !have.entry()->completed()) {
    row.kind = Kind::kMissingRanks;
    row.blamed = {lacking};
    row.detail = fmt::format("rank {} never posted the matching {} ({} {})", lacking, wanted,
                             have.entry()->state, send_side ? "send" : "recv");
  } else {
    row.kind = Kind::kUnpaired;
    row.detail = fmt::format("no matching {} on rank {} ({})", wanted, lacking, presence_name(lack.presence));
  }
}

// How a member lacking an entry for `seq` came to lack it.
Presence absence(const Dump* d, const std::string& pg_id, int64_t seq, std::optional<int64_t> min_seq) {
  if (!d) return Presence::kNoDump;
  const GroupStatus* st = d->status(pg_id);
  if (st) {
    if (seq <= st->last_dropped_collective) return Presence::kDropped;
    if (st->dropped > 0 && min_seq && seq < *min_seq) return Presence::kDropped;
    if (seq <= st->last_enqueued_collective) return Presence::kUnrecorded;
    return Presence::kMissing;
  }
  // Without a status, only what lies past the ring's start and within an
  // intact dump proves absence.
  if (d->truncated_at || (min_seq && seq < *min_seq)) return Presence::kUnrecorded;
  return Presence::kMissing;
}

std::vector<Row> collective_rows(const Group& g, const Analysis& a) {
  std::map<int64_t, Row> rows;
  std::map<int, std::optional<int64_t>> min_seq;
  for (int r : g.ranks) {
    auto it = a.dumps.find(r);
    if (it == a.dumps.end()) continue;
    for (const Entry& e : it->second->entries) {
      if (e.pg_id != g.pg_id || !e.is_operation() || e.is_p2p) continue;
      Row& row = rows[e.collective_seq_id];
      row.seq = e.collective_seq_id;
      Cell& c = row.cells[r];
      c.presence = Presence::kPresent;
      c.entries.push_back(&e);
      auto& m = min_seq[r];
      if (!m || e.collective_seq_id < *m) m = e.collective_seq_id;
    }
  }
  std::vector<Row> out;
  for (auto& [seq, row] : rows) {
    for (int r : g.ranks) {
      if (row.cells.count(r)) continue;
      auto it = a.dumps.find(r);
      row.cells[r].presence = absence(it == a.dumps.end() ? nullptr : it->second, g.pg_id, seq, min_seq[r]);
    }
    classify_collective(row, g);
    out.push_back(std::move(row));
  }
  return out;
}

std::vector<Row> p2p_rows(const Group& g, const Analysis& a) {
  using Key = std::pair<int, int>;  // (src, dst) job ranks
  std::map<Key, std::vector<const Entry*>> sends, recvs;
  std::map<int64_t, Row> unpairable;
  const int n = static_cast<int>(g.ranks.size());
  auto dump_of = [&a](int r) -> const Dump* {
    auto it = a.dumps.find(r);
    return it == a.dumps.end() ? nullptr : it->second;
  };
  for (int r : g.ranks) {
    const Dump* d = dump_of(r);
    if (!d) continue;
    for (const Entry& e : d->entries) {
      if (e.pg_id != g.pg_id || !e.is_operation() || !e.is_p2p) continue;
      std::string op = canonical(e.op);
      if ((op == "send" || op == "recv") && e.peer && *e.peer >= 0 && *e.peer < n && g.ranks[*e.peer] != r) {
        int peer = g.ranks[*e.peer];
        if (op == "send") sends[{r, peer}].push_back(&e);
        else recvs[{peer, r}].push_back(&e);
        continue;
      }
      Row& row = unpairable[e.p2p_seq_id];
      row.p2p = true;
      row.seq = e.p2p_seq_id;
      row.cells[r].presence = Presence::kPresent;
      row.cells[r].entries.push_back(&e);
    }
  }
  auto wrapped = [&](int r) {
    const Dump* d = dump_of(r);
    const GroupStatus* st = d ? d->status(g.pg_id) : nullptr;
    return st && st->last_dropped_p2p > 0;
  };
  std::set<Key> keys;
  for (const auto& [k, v] : sends) keys.insert(k);
  for (const auto& [k, v] : recvs) keys.insert(k);
  std::vector<Row> out;
  for (const Key& k : keys) {
    const auto& s = sends[k];
    const auto& rv = recvs[k];
    if (wrapped(k.first) || wrapped(k.second)) {
      // The oldest operations are gone from one side: counting from the
      // start would pair the wrong ones.
      auto lone = [&](const Entry* e, int rank, int64_t i) {
        Row row;
        row.p2p = true;
        row.seq = i + 1;
        row.src = k.first;
        row.dst = k.second;
        row.op = "send/recv";
        row.cells[rank] = {Presence::kPresent, {e}};
        row.kind = Kind::kUnpaired;
        row.detail = "a ring wrapped; not paired";
        set_first_created(row);
        out.push_back(std::move(row));
      };
      for (size_t i = 0; i < s.size(); ++i) lone(s[i], k.first, static_cast<int64_t>(i));
      for (size_t i = 0; i < rv.size(); ++i) lone(rv[i], k.second, static_cast<int64_t>(i));
      continue;
    }
    for (size_t i = 0; i < std::max(s.size(), rv.size()); ++i) {
      Row row;
      row.p2p = true;
      row.seq = static_cast<int64_t>(i) + 1;
      row.src = k.first;
      row.dst = k.second;
      auto cell = [&](const std::vector<const Entry*>& v, int rank) {
        if (i < v.size()) return Cell{Presence::kPresent, {v[i]}};
        return Cell{dump_of(rank) ? Presence::kMissing : Presence::kNoDump, {}};
      };
      row.cells[k.first] = cell(s, k.first);
      row.cells[k.second] = cell(rv, k.second);
      classify_p2p(row);
      out.push_back(std::move(row));
    }
  }
  for (auto& [seq, row] : unpairable) {
    row.op = row.cells.begin()->second.entry()->op;
    row.kind = Kind::kUnpaired;
    row.detail = "no peer recorded; matched by p2p_seq_id only";
    set_first_created(row);
    out.push_back(std::move(row));
  }
  return out;
}

// Every group any dump mentions, with the membership most dumps agree on.
std::vector<Group> discover_groups(const std::vector<Dump>& dumps, std::vector<std::string>& notes) {
  std::map<std::string, std::map<std::vector<int>, std::vector<int>>> members;  // pg -> ranks -> reporters
  std::map<std::string, std::map<int, int>> seats;  // pg -> group rank -> job rank, where ranks are unlisted
  std::map<std::string, int> sizes;
  std::map<std::string, Group> groups;
  for (const Dump& d : dumps) {
    for (const auto& [id, c] : d.pg_config) {
      Group& g = groups[id];
      g.pg_id = id;
      if (g.name.empty()) g.name = c.name;
      if (g.desc.empty()) g.desc = c.desc;
      if (!c.ranks.empty()) members[id][c.ranks].push_back(d.rank);
      if (c.rank >= 0) seats[id][c.rank] = d.rank;
      sizes[id] = std::max(sizes[id], c.size);
    }
    for (const Entry& e : d.entries) {
      Group& g = groups[e.pg_id];
      g.pg_id = e.pg_id;
      if (g.name.empty()) g.name = e.pg_name;
      if (g.desc.empty()) g.desc = e.pg_desc;
    }
  }
  std::vector<Group> out;
  for (auto& [id, g] : groups) {
    auto& m = members[id];
    // A group whose config lists no ranks: its members sit where the dumps
    // say, and a group where every dump sits at its job rank is taken to
    // be numbered like the job (the default group).
    const int size = sizes[id];
    if (m.empty() && size > 0) {
      const auto& seat = seats[id];
      bool identity = std::all_of(seat.begin(), seat.end(), [](const auto& s) { return s.first == s.second; });
      if (identity || static_cast<int>(seat.size()) == size) {
        std::vector<int> ranks(static_cast<size_t>(size));
        for (int i = 0; i < size; ++i) ranks[static_cast<size_t>(i)] = seat.count(i) ? seat.at(i) : i;
        m[ranks].push_back(-1);
      }
    }
    if (m.empty()) {
      g.membership_known = false;
      std::set<int> seen;
      for (const Dump& d : dumps)
        for (const Entry& e : d.entries)
          if (e.pg_id == id) seen.insert(d.rank);
      g.ranks.assign(seen.begin(), seen.end());
      notes.push_back(fmt::format("{}: no dump lists its members; assuming the ranks that recorded it, {} "
                                  "(missing ranks cannot be told)",
                                  id, ranks_text(g.ranks)));
    } else {
      auto best = std::max_element(m.begin(), m.end(),
                                   [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
      g.ranks = best->first;
      for (const auto& [ranks, who] : m)
        if (ranks != best->first)
          notes.push_back(fmt::format("{}: rank(s) {} list members {}, the others {}; using {}", id,
                                      ranks_text(who), ranks_text(ranks), ranks_text(best->first),
                                      ranks_text(best->first)));
    }
    out.push_back(std::move(g));
  }
  return out;
}

int tier(const Row& r) {
  switch (r.kind) {
    case Kind::kTypeMismatch:
    case Kind::kSizeMismatch:
    case Kind::kDtypeMismatch:
    case Kind::kMissingRanks:
      return 0;
    case Kind::kFailed:
    case Kind::kStateMismatch:
      return 1;
    case Kind::kIncomplete:
      for (const auto& [rank, c] : r.cells)
        if (c.presence == Presence::kPresent && !c.entry()->completed()) return 2;
      return -1;
    default:
      return -1;
  }
}

}  // namespace

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kMatched: return "matched";
    case Kind::kUnpaired: return "unpaired";
    case Kind::kPending: return "in flight";
    case Kind::kIncomplete: return "incomplete";
    case Kind::kStateMismatch: return "state mismatch";
    case Kind::kFailed: return "failed";
    case Kind::kMissingRanks: return "missing ranks";
    case Kind::kDtypeMismatch: return "dtype mismatch";
    case Kind::kSizeMismatch: return "size mismatch";
    case Kind::kTypeMismatch: return "type mismatch";
  }
  return "?";
}

const char* presence_name(Presence p) {
  switch (p) {
    case Presence::kPresent: return "present";
    case Presence::kMissing: return "missing";
    case Presence::kDropped: return "dropped";
    case Presence::kUnrecorded: return "not recorded";
    case Presence::kNoDump: return "no dump";
  }
  return "?";
}

std::string Row::label() const {
  if (!p2p) return fmt::format("collective #{} {}", seq, op);
  if (src < 0) return fmt::format("p2p #{} {}", seq, op);
  return fmt::format("p2p send {}->{} #{}", src, dst, seq);
}

Analysis analyze(const std::vector<Dump>& dumps) {
  Analysis a;
  for (const Dump& d : dumps) {
    a.dumps[d.rank] = &d;
    for (const auto& [id, st] : d.pg_status)
      if (st.dropped > 0)
        a.notes.push_back(fmt::format("rank {}: ring wrapped; {} lost {} entries (collectives through #{}{})",
                                      d.rank, id, st.dropped, st.last_dropped_collective,
                                      st.last_dropped_p2p ? fmt::format(", p2p through #{}", st.last_dropped_p2p)
                                                          : ""));
  }
  a.groups = discover_groups(dumps, a.notes);
  for (size_t gi = 0; gi < a.groups.size(); ++gi) {
    Group& g = a.groups[gi];
    g.rows = collective_rows(g, a);
    auto p2p = p2p_rows(g, a);
    g.rows.insert(g.rows.end(), std::make_move_iterator(p2p.begin()), std::make_move_iterator(p2p.end()));
    for (size_t ri = 0; ri < g.rows.size(); ++ri)
      for (const auto& [rank, c] : g.rows[ri].cells)
        for (const Entry* e : c.entries) a.row_of[e] = RowRef{gi, ri};
  }
  return a;
}

bool Filter::rank(int r) const { return ranks.empty() || std::find(ranks.begin(), ranks.end(), r) != ranks.end(); }

bool Filter::group(const Group& g) const {
  if (groups.empty()) return true;
  return std::any_of(groups.begin(), groups.end(),
                     [&g](const std::string& s) { return s == g.pg_id || s == g.name || s == g.desc; });
}

bool Filter::row(const Row& r) const {
  if (ranks.empty()) return true;
  return std::any_of(r.cells.begin(), r.cells.end(), [this](const auto& c) { return rank(c.first); });
}

std::optional<Culprit> find_culprit(const Analysis& a, const Filter& f) {
  struct Candidate {
    RowRef ref;
    int tier;
    int64_t seq, created;
    auto key() const { return std::tuple(tier, seq, created); }
  };
  std::vector<Candidate> firsts;
  for (size_t gi = 0; gi < a.groups.size(); ++gi) {
    const Group& g = a.groups[gi];
    if (!f.group(g)) continue;
    std::optional<Candidate> best;
    for (size_t ri = 0; ri < g.rows.size(); ++ri) {
      const Row& r = g.rows[ri];
      int t = tier(r);
      if (t < 0 || !f.row(r)) continue;
      Candidate c{{gi, ri}, t, r.p2p ? kNever : r.seq, r.first_created_ns.value_or(kNever)};
      if (!best || c.key() < best->key()) best = c;
    }
    if (best) firsts.push_back(*best);
  }
  if (firsts.empty()) return std::nullopt;
  std::stable_sort(firsts.begin(), firsts.end(), [](const Candidate& x, const Candidate& y) {
    return std::tuple(x.tier, x.created) < std::tuple(y.tier, y.created);
  });
  Culprit c;
  c.at = firsts.front().ref;
  // A rank missing here may be stuck in another group's operation that in
  // turn lacks someone: the root is where the waiting stops.
  for (;;) {
    const Row& row = a.row(c.at);
    if (row.kind != Kind::kMissingRanks) break;
    std::optional<RowRef> next;
    for (int m : row.blamed) {
      auto d = a.dumps.find(m);
      if (d == a.dumps.end()) continue;
      const Entry* e = blocked_at(*d->second);
      auto it = e ? a.row_of.find(e) : a.row_of.end();
      if (it == a.row_of.end() || it->second == c.at) continue;
      const Row& nr = a.row(it->second);
      if (tier(nr) != 0 || !f.group(a.groups[it->second.group]) || !f.row(nr)) continue;
      next = it->second;
      break;
    }
    if (!next) break;
    if (std::find(c.via.begin(), c.via.end(), *next) != c.via.end()) {
      c.cycle = true;
      break;
    }
    c.via.push_back(c.at);
    c.at = *next;
  }
  for (const Candidate& x : firsts)
    if (!(x.ref == c.at) && std::find(c.via.begin(), c.via.end(), x.ref) == c.via.end()) c.others.push_back(x.ref);
  return c;
}

const Entry* last_completed(const Dump& d, const std::string& pg_id) {
  const Entry* best = nullptr;
  for (const Entry& e : d.entries)
    if (e.pg_id == pg_id && e.is_operation() && !e.is_p2p && e.completed() &&
        (!best || e.collective_seq_id >= best->collective_seq_id))
      best = &e;
  return best;
}

const Entry* blocked_at(const Dump& d) {
  for (const Entry& e : d.entries)
    if (e.is_operation() && !e.completed() && !e.error) return &e;
  return nullptr;
}

void check_filter(const Analysis& a, const Filter& f) {
  if (f.groups.empty() || std::any_of(a.groups.begin(), a.groups.end(), [&f](const Group& g) { return f.group(g); }))
    return;
  std::vector<std::string> known;
  for (const auto& g : a.groups) known.push_back(g.pg_id);
  throw InvalidArgument::make("--group", fmt::format("{}", fmt::join(f.groups, ",")),
                              fmt::format("a pg_id, name or description of one of {}", fmt::join(known, ", ")));
}

}  // namespace sinew::dist::fr
