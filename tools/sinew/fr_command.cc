// `sinew fr`: reads flight-recorder dumps (docs/flight_recorder.md).
//   analyze   names the culprit of a hang or desync (exit 0: all matched,
//             1: a problem found, 2: usage error or no dumps)
//   timeline  a Chrome / Perfetto trace of every rank
//   export    the pickle layout PyTorch's torchfrtrace reads
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <memory>

#include "sinew/core/error.h"
#include "sinew/dist/fr_analyze.h"
#include "tools/sinew/cli_parse.h"
#include "tools/sinew/commands.h"

namespace sinew::cli {
namespace {

namespace fr = dist::fr;

constexpr const char* kFooter = R"(
Dumps are found by content, not name: every file under DIR (recursively)
that is a JSON object with "format": "sinew-fr". Unreadable, empty, binary,
cut-off and foreign files are reported on stderr and skipped (a cut-off dump
is salvaged up to its last complete entry); of two dumps from one rank the
newer is used.)";

struct Opts {
  std::vector<std::string> paths, ranks, groups;
  std::string prefix, output, out_prefix = "sinew_fr_trace_rank_";
  bool table = false, pickle = false;
};

void add_common(CLI::App* cmd, const std::shared_ptr<Opts>& o) {
  cmd->add_option("paths", o->paths, "dump directories (searched recursively) or dump files");
  cmd->add_option("--rank", o->ranks, "only these ranks (repeat or comma-separate)")
      ->delimiter(',')
      ->allow_extra_args(false);
  cmd->add_option("--group", o->groups, "only these groups: pg_id, name or description (repeatable)")
      ->delimiter(',')
      ->allow_extra_args(false);
  cmd->add_option("--prefix", o->prefix, "only files whose name starts with P");
  cmd->footer(kFooter);
  // Usage errors become sinew::InvalidArgument (exit 2), not CLI11's codes.
  cmd->allow_extras();
}

fr::Filter make_filter(const CLI::App* cmd, const Opts& o) {
  if (!cmd->remaining().empty())
    throw InvalidArgument::make("argument", fmt::format("{}", fmt::join(cmd->remaining(), " ")),
                                fmt::format("an option of `sinew fr {}` (see --help)", cmd->get_name()));
  if (o.paths.empty()) throw InvalidArgument::make("DIR", "(none)", "one or more dump directories or files");
  fr::Filter f;
  for (const auto& s : o.ranks)
    f.ranks.push_back(
        static_cast<int>(parse_int("--rank", s, 0, std::numeric_limits<int>::max(), "a rank number >= 0")));
  f.groups = o.groups;
  return f;
}

fr::LoadResult load(const Opts& o) {
  auto loaded = fr::load_dumps(o.paths, o.prefix);
  for (const auto& w : loaded.warnings) fmt::print(stderr, "sinew fr: {}\n", w);
  if (loaded.dumps.empty())
    throw IoError(fmt::format("no sinew flight-recorder dumps in {} ({} files looked at{})", fmt::join(o.paths, ", "),
                              loaded.files_seen, o.prefix.empty() ? "" : ", prefix " + o.prefix));
  return loaded;
}

int analyze(const CLI::App* cmd, const Opts& o) {
  auto filter = make_filter(cmd, o);
  auto loaded = load(o);
  auto analysis = fr::analyze(loaded.dumps);
  fr::check_filter(analysis, filter);
  auto report = fr::make_report(analysis, filter);
  fmt::print("{}", o.table ? fr::render_table(analysis, filter) : fr::render_text(report, loaded, analysis, filter));
  return report.exit_code();
}

int timeline(const CLI::App* cmd, const Opts& o) {
  auto filter = make_filter(cmd, o);
  if (o.output.empty()) throw InvalidArgument::make("-o", "(none)", "the trace file to write (- for stdout)");
  auto loaded = load(o);
  auto analysis = fr::analyze(loaded.dumps);
  fr::check_filter(analysis, filter);
  auto trace = fr::make_timeline(analysis, filter);
  std::string text = trace.dump();
  if (o.output == "-") {
    fmt::print("{}\n", text);
    return 0;
  }
  std::ofstream out(o.output, std::ios::trunc);
  out << text << '\n';
  if (!out.flush()) throw IoError(fmt::format("cannot write {}", o.output));
  fmt::print("wrote {}: {} trace events from {} rank(s); open it in ui.perfetto.dev or chrome://tracing\n",
             o.output, trace["traceEvents"].size(), loaded.dumps.size());
  return 0;
}

int export_dumps(const CLI::App* cmd, const Opts& o) {
  make_filter(cmd, o);
  if (!o.pickle) throw InvalidArgument::make("--pickle", "(not given)", "--pickle, the one export format");
  if (o.output.empty()) throw InvalidArgument::make("-o", "(none)", "the folder to write the pickles into");
  auto loaded = load(o);
  auto analysis = fr::analyze(loaded.dumps);
  auto result = fr::export_pickles(loaded.dumps, analysis, o.output, o.out_prefix);
  for (const auto& w : result.warnings) fmt::print(stderr, "sinew fr: {}\n", w);
  for (const auto& f : result.files) fmt::print("wrote {}\n", f);
  fmt::print("read them with: torchfrtrace {} --prefix {}\n", o.output, o.out_prefix);
  return 0;
}

}  // namespace

void add_fr_command(CLI::App& app, int& rc) {
  auto* fr = app.add_subcommand("fr", "Flight recorder dumps: name the culprit, draw a timeline, export for torchfrtrace");
  fr->require_subcommand(1);
  auto o = std::make_shared<Opts>();

  auto* an = fr->add_subcommand("analyze", "Match every rank's operations and name the culprit of a hang or desync");
  add_common(an, o);
  an->add_flag("-j,--just-print-entries", o->table, "print the side-by-side per-rank table instead of the report");
  an->callback([o, an, &rc] { rc = analyze(an, *o); });

  auto* tl = fr->add_subcommand("timeline", "Write a Chrome / Perfetto trace: a process per rank, a track per group");
  add_common(tl, o);
  tl->add_option("-o,--output", o->output, "trace file to write (- for stdout)");
  tl->callback([o, tl, &rc] { rc = timeline(tl, *o); });

  auto* ex = fr->add_subcommand("export", "Write the dumps as the pickles PyTorch's torchfrtrace reads");
  add_common(ex, o);
  ex->add_flag("--pickle", o->pickle, "torchfrtrace's pickle layout (the one format)");
  ex->add_option("-o,--output", o->output, "folder to write <out-prefix><rank> files into");
  ex->add_option("--out-prefix", o->out_prefix, "file name prefix before the rank (default sinew_fr_trace_rank_)");
  ex->callback([o, ex, &rc] { rc = export_dumps(ex, *o); });
}

}  // namespace sinew::cli
