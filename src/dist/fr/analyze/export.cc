// The layout torchfrtrace reads (torch/distributed/flight_recorder/components:
// loader.py read_dump, builder.py build_groups_memberships/build_db,
// types.py Op/EntryState, utils.py align_trace_from_beginning):
//  - top level: "version" ("major.minor", the same on every rank),
//    "pg_config" {group: {"name", "desc", "ranks": "[0, 1]" as a string}},
//    "pg_status" {str(pg_id): {...}}, "entries" [...];
//  - entries: "process_group" (name, desc) naming a pg_config key, and
//    "profiling_name" "nccl:<op>" with <op> one of its known collectives, or
//    Op() asserts on anything else, so group events and operations it has no
//    name for are left out;
//  - point-to-point entries are left out too: torchfrtrace groups adjacent
//    entries whose sequence numbers coincide into "coalesced" groups and
//    asserts when a collective lands in one, which sinew's separate p2p
//    counter makes common (`sinew fr analyze` pairs them instead).
// The group's pg_id ("default@e0") is used as its name so that a group's
// epochs stay apart; sinew's extra entry fields are kept (it ignores them).
#include "sinew/dist/fr_analyze.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string_view>

#include "sinew/core/error.h"
#include "dist/fr/analyze/pickle.h"

namespace sinew::dist::fr {
namespace {

namespace fs = std::filesystem;

// How torchfrtrace names each sinew operation, and which side it wants as a
// single tensor (it compares numel(output_sizes[0]) with size x input for
// all_gather, and the reverse for reduce_scatter, as ProcessGroupNCCL
// records the flattened tensor).
struct TorchOp {
  const char* name;
  bool flatten_output, flatten_input;
};

std::optional<TorchOp> torch_op(const std::string& op) {
  static const std::map<std::string, TorchOp> kOps = {
      {"allreduce", {"all_reduce", false, false}},
      {"broadcast", {"broadcast", false, false}},
      {"reduce", {"reduce", false, false}},
      {"allgather", {"all_gather", true, false}},
      {"allgather_into_tensor", {"all_gather", true, false}},
      {"gather", {"gather", false, false}},
      {"scatter", {"scatter", false, false}},
      {"reduce_scatter", {"reduce_scatter", false, true}},
      {"reduce_scatter_tensor", {"reduce_scatter", false, true}},
      {"all_to_all", {"all_to_all", false, false}},
      {"all_to_all_v", {"all_to_all", false, false}},
      {"barrier", {"barrier", false, false}},
  };
  auto it = kOps.find(op);
  if (it == kOps.end()) return std::nullopt;
  return it->second;
}

Sizes flattened(const Sizes& s, int64_t count) {
  if (count < 2) return s;
  if (auto n = elements(s, count)) return {{*n}};
  return s;
}

std::vector<std::string> first_dtype(const std::vector<std::string>& d, bool flatten) {
  if (!flatten || d.size() < 2) return d;
  std::set<std::string> distinct(d.begin(), d.end());
  return distinct.size() == 1 ? std::vector<std::string>{d.front()} : d;
}

void put_sizes(Pickler& p, const Sizes& s) {
  p.begin_list();
  for (const auto& shape : s) {
    p.begin_list();
    for (int64_t d : shape) p.integer(d);
    p.end_list();
  }
  p.end_list();
}

void put_strings(Pickler& p, const std::vector<std::string>& v) {
  p.begin_list();
  for (const auto& s : v) p.str(s);
  p.end_list();
}

void put_optional(Pickler& p, const std::optional<int64_t>& v) {
  if (v) p.integer(*v);
  else p.none();
}

struct TorchGroup {
  int64_t index;  // torchfrtrace's integer pg_id
  std::string desc;
  std::vector<int> ranks;
};
using TorchGroups = std::map<std::string, TorchGroup>;

// What torchfrtrace cannot take, counted for the warnings.
struct LeftOut {
  size_t events = 0, p2p = 0;
  std::map<std::string, size_t> unknown;  // by sinew op name
};

// Every group the dump mentions, with members from its own config or, when
// a cut-off dump lost it, from the others'.
TorchGroups torch_groups(const Dump& d, const Analysis& a, std::vector<std::string>& warnings) {
  TorchGroups groups;
  std::set<std::string> ids;
  for (const auto& [id, c] : d.pg_config) ids.insert(id);
  for (const Entry& e : d.entries) ids.insert(e.pg_id);
  int64_t next = 0;
  for (const auto& id : ids) {
    TorchGroup g{next, {}, {}};
    if (auto c = d.pg_config.find(id); c != d.pg_config.end()) {
      g.desc = c->second.desc;
      g.ranks = c->second.ranks;
    }
    auto known = std::find_if(a.groups.begin(), a.groups.end(), [&id](const Group& x) { return x.pg_id == id; });
    // The members every rank agrees on: torchfrtrace keys a group by them.
    if (known != a.groups.end() && known->membership_known) g.ranks = known->ranks;
    if (g.desc.empty() && known != a.groups.end()) g.desc = known->desc;
    if (g.desc.empty()) g.desc = "undefined";
    if (g.ranks.empty()) {
      warnings.push_back(fmt::format("rank {}: {}: members unknown; its entries are left out", d.rank, id));
      continue;
    }
    groups.emplace(id, g);
    ++next;
  }
  return groups;
}

void put_pg_config(Pickler& p, const TorchGroups& groups) {
  p.begin_dict();
  for (const auto& [id, g] : groups) {
    p.str(id);
    p.begin_dict();
    p.str("name");
    p.str(id);
    p.str("desc");
    p.str(g.desc);
    p.str("ranks");
    p.str(fmt::format("[{}]", fmt::join(g.ranks, ", ")));
    p.end_dict();
  }
  p.end_dict();
}

void put_pg_status(Pickler& p, const Dump& d, const TorchGroups& groups) {
  namespace field = schema::field;
  p.begin_dict();
  for (const auto& [id, g] : groups) {
    const GroupStatus* st = d.status(id);
    if (!st) continue;
    p.str(std::to_string(g.index));
    p.begin_dict();
    for (auto [k, v] : {std::pair{field::kLastEnqueuedCollective, st->last_enqueued_collective},
                        {field::kLastStartedCollective, st->last_started_collective},
                        {field::kLastCompletedCollective, st->last_completed_collective},
                        {field::kLastEnqueuedP2p, st->last_enqueued_p2p},
                        {field::kLastStartedP2p, st->last_started_p2p},
                        {field::kLastCompletedP2p, st->last_completed_p2p},
                        {field::kDropped, st->dropped},
                        {field::kLastDroppedCollective, st->last_dropped_collective},
                        {field::kLastDroppedP2p, st->last_dropped_p2p}}) {
      p.str(k);
      p.integer(v);
    }
    p.end_dict();
  }
  p.end_dict();
}

void put_frames(Pickler& p, const std::vector<Frame>& frames) {
  p.begin_list();
  for (const Frame& f : frames) {
    p.begin_dict();
    p.str("name");
    p.str(f.name);
    p.str("filename");
    p.str(f.filename);
    p.str("line");
    p.integer(f.line);
    p.end_dict();
  }
  p.end_list();
}

// One entry as torchfrtrace's Op reads it, sinew's own fields after.
void put_entry(Pickler& p, const Entry& e, const TorchGroup& g, const TorchOp& op) {
  auto key = [&p](const char* k) { p.str(k); };
  auto int_field = [&](const char* k, int64_t v) {
    key(k);
    p.integer(v);
  };
  auto str_field = [&](const char* k, const std::string& v) {
    key(k);
    p.str(v);
  };
  auto opt_field = [&](const char* k, std::optional<int64_t> v) {
    key(k);
    put_optional(p, v);
  };
  p.begin_dict();
  int_field("record_id", e.record_id);
  int_field("pg_id", g.index);
  key("process_group");
  p.begin_tuple();
  p.str(e.pg_id);
  p.str(g.desc);
  p.end_tuple();
  int_field("collective_seq_id", e.collective_seq_id);
  int_field("p2p_seq_id", e.p2p_seq_id);
  int_field("op_id", e.op_id);
  str_field("profiling_name", std::string("nccl:") + op.name);
  int_field("time_created_ns", e.time_created_ns.value_or(0));
  if (e.duration_ms) {
    key("duration_ms");
    p.real(*e.duration_ms);
  }
  key("input_sizes");
  put_sizes(p, op.flatten_input ? flattened(e.input_sizes, e.input_count) : e.input_sizes);
  key("input_dtypes");
  put_strings(p, first_dtype(e.input_dtypes, op.flatten_input));
  key("output_sizes");
  put_sizes(p, op.flatten_output ? flattened(e.output_sizes, e.output_count) : e.output_sizes);
  key("output_dtypes");
  put_strings(p, first_dtype(e.output_dtypes, op.flatten_output));
  str_field("state", e.state);
  opt_field("time_discovered_started_ns", e.time_started_ns);
  opt_field("time_discovered_completed_ns", e.time_completed_ns);
  key("retired");
  p.boolean(e.retired);
  int_field("timeout_ms", e.timeout_ms.value_or(0));
  key("is_p2p");
  p.boolean(e.is_p2p);
  str_field("thread_id", e.thread_id);
  str_field("thread_name", e.thread_name);
  key("frames");
  put_frames(p, e.frames);
  str_field("sinew_profiling_name", e.profiling_name);
  opt_field("epoch", e.epoch);
  key("awaited_ranks");
  p.begin_list();
  for (int r : e.awaited_ranks) p.integer(r);
  p.end_list();
  key("error");
  if (e.error) p.str(*e.error);
  else p.none();
  opt_field("peer", e.peer ? std::optional<int64_t>(*e.peer) : std::nullopt);
  p.end_dict();
}

LeftOut put_entries(Pickler& p, const Dump& d, const TorchGroups& groups) {
  LeftOut left;
  p.begin_list();
  for (const Entry& e : d.entries) {
    auto g = groups.find(e.pg_id);
    if (g == groups.end()) continue;
    if (e.event || e.is_p2p) {
      ++(e.event ? left.events : left.p2p);
      continue;
    }
    if (auto op = torch_op(e.op)) put_entry(p, e, g->second, *op);
    else ++left.unknown[e.op];
  }
  p.end_list();
  return left;
}

void warn_left_out(const Dump& d, const LeftOut& left, std::vector<std::string>& warnings) {
  if (left.events)
    warnings.push_back(fmt::format("rank {}: {} group events left out (torchfrtrace has no such entries)", d.rank,
                                   left.events));
  if (left.p2p)
    warnings.push_back(fmt::format("rank {}: {} point-to-point entries left out (torchfrtrace cannot pair them; "
                                   "`sinew fr analyze` does)",
                                   d.rank, left.p2p));
  for (const auto& [op, n] : left.unknown)
    warnings.push_back(fmt::format("rank {}: {} '{}' entries left out (no torchfrtrace name)", d.rank, n, op));
}

}  // namespace

std::string torch_pickle(const Dump& d, const Analysis& a, const std::string& version,
                         std::vector<std::string>& warnings) {
  const TorchGroups groups = torch_groups(d, a, warnings);
  Pickler p;
  p.begin_dict();
  p.str("version");
  p.str(version);
  p.str("comm_lib_version");
  p.str("sinew");
  p.str("pg_config");
  put_pg_config(p, groups);
  p.str("pg_status");
  put_pg_status(p, d, groups);
  p.str("entries");
  const LeftOut left = put_entries(p, d, groups);
  // What torchfrtrace ignores but a reader of the pickle may want.
  p.str("sinew");
  p.value({{"rank", d.rank},
           {"world_size", d.world_size},
           {"job_id", d.job_id},
           {"host", d.host},
           {"pid", d.pid},
           {"attempt", d.attempt},
           {"dump_reason", d.dump_reason},
           {"dump_detail", d.dump_detail},
           {"dump_time_ns", d.dump_time_ns},
           {"source", d.file}});
  p.end_dict();
  warn_left_out(d, left, warnings);
  return p.finish();
}

ExportResult export_pickles(const std::vector<Dump>& dumps, const Analysis& a, const std::string& outdir,
                            const std::string& prefix) {
  ExportResult r;
  // torchfrtrace checks that every rank has the same version.
  auto major_minor = [](const std::string& v) {
    auto dot = v.find('.');
    auto digits = [](std::string_view s) {
      return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    return dot != std::string::npos && digits(std::string_view(v).substr(0, dot)) &&
           digits(std::string_view(v).substr(dot + 1));
  };
  std::map<std::string, size_t> versions;
  for (const Dump& d : dumps)
    if (major_minor(d.version)) ++versions[d.version];
  std::string version = schema::kTorchVersion;
  size_t best = 0;
  for (const auto& [v, n] : versions) {
    if (n <= best) continue;
    version = v;
    best = n;
  }

  std::error_code ec;
  fs::create_directories(outdir, ec);
  if (ec) throw IoError(fmt::format("cannot create {}: {}", outdir, ec.message()));
  std::set<std::string> ours;
  for (const Dump& d : dumps) {
    std::string name = fmt::format("{}{}", prefix, d.rank);
    fs::path path = fs::path(outdir) / name;
    fs::path tmp = fs::path(outdir) / (".tmp." + name);
    std::string bytes = torch_pickle(d, a, version, r.warnings);
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      if (!out) throw IoError(fmt::format("cannot write {}", tmp.string()));
    }
    fs::rename(tmp, path, ec);
    if (ec) throw IoError(fmt::format("cannot rename {} to {}: {}", tmp.string(), path.string(), ec.message()));
    r.files.push_back(path.string());
    ours.insert(name);
  }
  for (const auto& entry : fs::directory_iterator(outdir, ec)) {
    if (!ours.count(entry.path().filename().string())) {
      r.warnings.push_back(fmt::format("{} holds other files (such as {}): torchfrtrace infers the prefix from "
                                       "every file there; pass it --prefix {}",
                                       outdir, entry.path().filename().string(), prefix));
      break;
    }
  }
  return r;
}

}  // namespace sinew::dist::fr
