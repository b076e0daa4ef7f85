// Chrome trace-event JSON ("ph": X complete events, M metadata, s/f flows,
// i instants). Flow arrows run into the rank that started an operation last,
// so in a straggler's track every arrow points at the same slice.
#include "sinew/dist/fr_analyze.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <set>
#include <unordered_map>

namespace sinew::dist::fr {
namespace {

using json = nlohmann::json;

struct Placed {
  int rank;
  int tid;
  double ts;  // µs
};

}  // namespace

json make_timeline(const Analysis& a, const Filter& f) {
  std::unordered_map<std::string, int> tid_of;
  for (size_t i = 0; i < a.groups.size(); ++i) tid_of[a.groups[i].pg_id] = static_cast<int>(i) + 1;
  auto selected_group = [&](const std::string& pg_id) {
    auto it = tid_of.find(pg_id);
    return it != tid_of.end() && f.group(a.groups[static_cast<size_t>(it->second - 1)]);
  };

  // Each rank's times on the store host's clock; zero at the earliest start.
  int64_t t0 = std::numeric_limits<int64_t>::max();
  for (const auto& [rank, d] : a.dumps) {
    if (!f.rank(rank)) continue;
    for (const Entry& e : d->entries) {
      auto t = e.time_started_ns && e.is_operation() ? e.time_started_ns : e.time_created_ns;
      if (t && selected_group(e.pg_id)) t0 = std::min(t0, *t - d->clock_offset_ns.value_or(0));
    }
  }
  if (t0 == std::numeric_limits<int64_t>::max()) t0 = 0;

  json events = json::array();
  std::unordered_map<const Entry*, Placed> placed;
  for (const auto& [rank, d] : a.dumps) {
    if (!f.rank(rank)) continue;
    const int64_t offset = d->clock_offset_ns.value_or(0);
    auto us = [&](int64_t ns) { return static_cast<double>(ns - offset - t0) / 1000.0; };
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"tid", 0},
                      {"args", {{"name", fmt::format("rank {} ({})", rank, bare_host(d->host))}}}});
    events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank}, {"tid", 0},
                      {"args", {{"sort_index", rank}}}});
    std::set<int> tids;
    for (const Entry& e : d->entries) {
      if (!selected_group(e.pg_id)) continue;
      const int tid = tid_of[e.pg_id];
      if (tids.insert(tid).second)
        events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", tid},
                          {"args", {{"name", e.pg_id}}}});
      if (e.event) {
        if (!e.time_created_ns) continue;
        json args = {{"epoch", e.epoch ? json(*e.epoch) : json()}};
        if (e.error) args["error"] = *e.error;
        events.push_back({{"ph", "i"}, {"s", "t"}, {"name", *e.event}, {"cat", "group event"}, {"pid", rank},
                          {"tid", tid}, {"ts", us(*e.time_created_ns)}, {"args", args}});
        continue;
      }
      auto begin = e.time_started_ns ? e.time_started_ns : e.time_created_ns;
      if (!begin) continue;
      const bool unfinished = !e.time_completed_ns;
      const int64_t end = e.time_completed_ns.value_or(std::max(d->dump_time_ns, *begin));
      json args = {{"state", e.state},           {"record_id", e.record_id},
                   {"input_sizes", e.input_sizes}, {"output_sizes", e.output_sizes},
                   {"input_dtypes", e.input_dtypes}, {"output_dtypes", e.output_dtypes}};
      if (e.is_p2p) args["p2p_seq_id"] = e.p2p_seq_id;
      else args["collective_seq_id"] = e.collective_seq_id;
      if (e.peer) args["peer"] = *e.peer;
      if (e.error) args["error"] = *e.error;
      if (!e.awaited_ranks.empty()) args["awaited_ranks"] = e.awaited_ranks;
      if (unfinished) args["unfinished_at_dump"] = true;
      std::string name = e.is_p2p ? fmt::format("{} p2p#{}", e.op, e.p2p_seq_id)
                                  : fmt::format("{} #{}", e.op, e.collective_seq_id);
      const double ts = us(*begin);
      events.push_back({{"ph", "X"}, {"name", name}, {"cat", e.is_p2p ? "p2p" : "collective"}, {"pid", rank},
                        {"tid", tid}, {"ts", ts}, {"dur", std::max(0.0, us(end) - ts)}, {"args", args}});
      placed[&e] = {rank, tid, ts};
    }
  }

  int64_t flow_id = 0;
  for (const Group& g : a.groups) {
    if (!f.group(g)) continue;
    for (const Row& r : g.rows) {
      std::vector<Placed> parts;
      for (const auto& [rank, c] : r.cells)
        if (const Entry* e = c.entry(); e && placed.count(e)) parts.push_back(placed[e]);
      if (parts.size() < 2) continue;
      auto last = std::max_element(parts.begin(), parts.end(),
                                   [](const Placed& x, const Placed& y) { return x.ts < y.ts; });
      std::string name = fmt::format("{} {}", g.pg_id, r.label());
      for (const Placed& p : parts) {
        if (&p == &*last) continue;
        ++flow_id;
        events.push_back({{"ph", "s"}, {"id", flow_id}, {"name", name}, {"cat", "match"}, {"pid", p.rank},
                          {"tid", p.tid}, {"ts", p.ts}});
        events.push_back({{"ph", "f"}, {"bp", "e"}, {"id", flow_id}, {"name", name}, {"cat", "match"},
                          {"pid", last->rank}, {"tid", last->tid}, {"ts", last->ts}});
      }
    }
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"generator", "sinew fr timeline"}, {"t0_ns", t0}}}};
}

}  // namespace sinew::dist::fr
