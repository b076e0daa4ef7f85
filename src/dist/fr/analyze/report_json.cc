// The report as one JSON object, for programs (the Python package, CI
// annotations) that want the verdict without parsing the text.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "sinew/dist/fr_analyze.h"

namespace sinew::dist::fr {
namespace {

using json = nlohmann::json;

json row_json(const Analysis& a, RowRef ref) {
  const Row& r = a.row(ref);
  json j = {{"group", a.groups[ref.group].pg_id}, {"operation", r.label()}, {"op", r.op},
            {"p2p", r.p2p},                        {"seq", r.seq},           {"kind", kind_name(r.kind)},
            {"detail", r.detail},                   {"blamed", r.blamed}};
  if (r.p2p) {
    j["src"] = r.src;
    j["dst"] = r.dst;
  }
  return j;
}

json culprit_json(const Analysis& a, const Culprit& c) {
  json j = row_json(a, c.at);
  j["cycle"] = c.cycle;
  j["via"] = json::array();
  for (const RowRef& v : c.via) j["via"].push_back(row_json(a, v));
  j["others"] = json::array();
  for (const RowRef& o : c.others) j["others"].push_back(row_json(a, o));
  return j;
}

json dumps_json(const LoadResult& loaded, const Analysis& a) {
  json ranks = json::array(), files = json::object();
  int world = 0;
  for (const Dump& d : loaded.dumps) {
    ranks.push_back(d.rank);
    files[std::to_string(d.rank)] = {{"file", d.file},
                                     {"host", bare_host(d.host)},
                                     {"dump_reason", d.dump_reason},
                                     {"dump_detail", d.dump_detail},
                                     {"truncated", d.truncated_at.has_value()}};
    world = std::max(world, d.world_size);
  }
  json absent = json::array();
  for (int r = 0; r < world; ++r)
    if (!a.dumps.count(r)) absent.push_back(r);
  return {{"ranks", ranks},
          {"world_size", world},
          {"no_dump", absent},
          {"files_seen", loaded.files_seen},
          {"by_rank", files}};
}

json groups_json(const Analysis& a, const Filter& f) {
  json out = json::array();
  for (size_t gi = 0; gi < a.groups.size(); ++gi) {
    const Group& g = a.groups[gi];
    if (!f.group(g)) continue;
    json counts = json::object(), problems = json::array();
    for (size_t ri = 0; ri < g.rows.size(); ++ri) {
      const Row& r = g.rows[ri];
      if (!f.row(r)) continue;
      auto& n = counts[kind_name(r.kind)];
      n = n.is_null() ? 1 : n.get<int>() + 1;
      if (r.problem()) problems.push_back(row_json(a, {gi, ri}));
    }
    out.push_back({{"pg_id", g.pg_id},
                   {"name", g.name},
                   {"desc", g.desc},
                   {"ranks", g.ranks},
                   {"membership_known", g.membership_known},
                   {"counts", counts},
                   {"problems", problems}});
  }
  return out;
}

}  // namespace

nlohmann::json render_json(const Report& r, const LoadResult& loaded, const Analysis& a, const Filter& f) {
  return {{"headline", r.headline},
          {"exit_code", r.exit_code()},
          {"culprit", r.culprit ? culprit_json(a, *r.culprit) : json(nullptr)},
          {"dumps", dumps_json(loaded, a)},
          {"groups", groups_json(a, f)},
          {"notes", a.notes},
          {"warnings", loaded.warnings}};
}

}  // namespace sinew::dist::fr
