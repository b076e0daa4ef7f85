// Finding and reading flight-recorder dumps. Dumps are recognised by content
// (a JSON object with "format": "sinew-fr"), never by name, and a bad file is
// a warning, never a failure: the rank that crashed mid-dump is usually the
// one the user most needs to see, so a cut-off dump is salvaged up to the
// last complete entry.
#include "sinew/dist/fr_analyze.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <limits>
#include <sstream>

#include "sinew/core/error.h"

namespace sinew::dist::fr {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
namespace key = schema::field;

constexpr uintmax_t kMaxDumpBytes = uintmax_t{1} << 30;

// Builds the document like nlohmann's own DOM parser, but keeps what it has
// when the text ends early or turns to garbage. Salvage then drops what may
// be incomplete: the last number (its digits may be cut) and every container
// still open below the top-level values (a half-written entry or group), so
// only whole entries survive.
class SalvagingBuilder : public nlohmann::json_sax<json> {
 public:
  bool null() override { return put(json(nullptr), false); }
  bool boolean(bool v) override { return put(json(v), false); }
  bool number_integer(number_integer_t v) override { return put(json(v), true); }
  bool number_unsigned(number_unsigned_t v) override { return put(json(v), true); }
  bool number_float(number_float_t v, const string_t&) override { return put(json(v), true); }
  bool string(string_t& v) override { return put(json(std::move(v)), false); }
  bool binary(binary_t&) override { return false; }
  bool start_object(std::size_t) override { return open(json::object()); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    last_was_number_ = false;
    return true;
  }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) override {
    error_at_ = position;
    return false;
  }

  std::optional<size_t> error_at() const { return error_at_; }

  json take_salvaged() {
    if (last_was_number_ && !stack_.empty()) remove_last_child(*stack_.back().node, last_key_);
    if (stack_.size() > 2) remove_last_child(*stack_[1].node, stack_[2].key);
    return std::move(root_);
  }

 private:
  struct Level {
    json* node;
    std::string key;  // its key in the parent object
  };

  static void remove_last_child(json& parent, const std::string& key) {
    if (parent.is_array() && !parent.empty()) parent.erase(parent.size() - 1);
    else if (parent.is_object()) parent.erase(key);
  }

  json* insert(json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& parent = *stack_.back().node;
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    json& slot = parent[key_];
    slot = std::move(v);
    return &slot;
  }
  bool put(json v, bool is_number) {
    insert(std::move(v));
    last_key_ = std::move(key_);
    last_was_number_ = is_number;
    return true;
  }
  bool open(json v) {
    json* node = insert(std::move(v));
    stack_.push_back({node, std::move(key_)});
    last_was_number_ = false;
    return true;
  }
  bool close() {
    stack_.pop_back();
    last_was_number_ = false;
    return true;
  }

  json root_;
  std::vector<Level> stack_;
  std::string key_, last_key_;
  bool last_was_number_ = false;
  std::optional<size_t> error_at_;
};

const json* field(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

// Integers as written by this recorder, or by PyTorch's JSON dumps (which
// write some counters as strings).
std::optional<int64_t> as_int(const json* j) {
  if (!j) return std::nullopt;
  if (j->is_number_unsigned()) {
    auto u = j->get<uint64_t>();
    return static_cast<int64_t>(std::min<uint64_t>(u, std::numeric_limits<int64_t>::max()));
  }
  if (j->is_number_integer()) return j->get<int64_t>();
  if (j->is_number_float()) {
    double d = j->get<double>();
    if (!std::isfinite(d) || std::fabs(d) > 9e18) return std::nullopt;
    return static_cast<int64_t>(std::llround(d));
  }
  if (j->is_string()) {
    const auto& s = j->get_ref<const std::string&>();
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && p == s.data() + s.size()) return v;
  }
  return std::nullopt;
}

std::optional<double> as_double(const json* j) {
  if (j && j->is_number()) return j->get<double>();
  return std::nullopt;
}

std::string as_string(const json* j) {
  if (!j) return {};
  if (j->is_string()) return j->get<std::string>();
  if (j->is_number()) return j->dump();
  return {};
}

bool as_bool(const json* j) { return j && j->is_boolean() && j->get<bool>(); }

std::vector<int> int_list(const json* j) {
  std::vector<int> out;
  if (j && j->is_array()) {
    for (const auto& v : *j)
      if (auto i = as_int(&v)) out.push_back(static_cast<int>(*i));
  } else if (j && j->is_string()) {  // PyTorch writes ranks as "[0, 1, 2]"
    std::string s = j->get<std::string>();
    for (char& c : s)
      if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '-')) c = ' ';
    std::istringstream in(s);
    for (int v; in >> v;) out.push_back(v);
  }
  return out;
}

Sizes sizes_of(const json* j) {
  Sizes out;
  if (!j || !j->is_array()) return out;
  for (const auto& t : *j) {
    std::vector<int64_t> shape;
    if (t.is_array())
      for (const auto& d : t)
        if (auto v = as_int(&d)) shape.push_back(*v);
    out.push_back(std::move(shape));
  }
  return out;
}

std::vector<std::string> strings_of(const json* j) {
  std::vector<std::string> out;
  if (j && j->is_array())
    for (const auto& s : *j) out.push_back(as_string(&s));
  return out;
}

std::optional<Entry> parse_entry(const json& e) {
  const json* pg = field(e, key::kPgId);
  auto seq = as_int(field(e, key::kCollectiveSeqId));
  const json* name = field(e, key::kProfilingName);
  const json* state = field(e, key::kState);
  if (!pg || !seq || !name || !name->is_string() || !state || !state->is_string()) return std::nullopt;
  Entry x;
  x.pg_id = as_string(pg);
  x.collective_seq_id = *seq;
  x.profiling_name = name->get<std::string>();
  x.op = op_of(x.profiling_name);
  x.state = state->get<std::string>();
  x.record_id = as_int(field(e, key::kRecordId)).value_or(0);
  if (const json* g = field(e, key::kProcessGroup); g && g->is_array()) {
    if (g->size() > 0) x.pg_name = as_string(&(*g)[0]);
    if (g->size() > 1) x.pg_desc = as_string(&(*g)[1]);
  }
  x.p2p_seq_id = as_int(field(e, key::kP2pSeqId)).value_or(0);
  x.op_id = as_int(field(e, key::kOpId)).value_or(0);
  x.time_created_ns = as_int(field(e, key::kTimeCreatedNs));
  x.time_started_ns = as_int(field(e, key::kTimeDiscoveredStartedNs));
  x.time_completed_ns = as_int(field(e, key::kTimeDiscoveredCompletedNs));
  // PyTorch's JSON dumps write 0 for "not yet".
  if (x.time_started_ns == 0) x.time_started_ns.reset();
  if (x.time_completed_ns == 0) x.time_completed_ns.reset();
  x.duration_ms = as_double(field(e, key::kDurationMs));
  x.input_sizes = sizes_of(field(e, key::kInputSizes));
  x.output_sizes = sizes_of(field(e, key::kOutputSizes));
  x.input_count = std::max<int64_t>(as_int(field(e, key::kInputCount)).value_or(0), static_cast<int64_t>(x.input_sizes.size()));
  x.output_count =
      std::max<int64_t>(as_int(field(e, key::kOutputCount)).value_or(0), static_cast<int64_t>(x.output_sizes.size()));
  x.input_dtypes = strings_of(field(e, key::kInputDtypes));
  x.output_dtypes = strings_of(field(e, key::kOutputDtypes));
  x.retired = as_bool(field(e, key::kRetired));
  x.timeout_ms = as_int(field(e, key::kTimeoutMs));
  x.is_p2p = as_bool(field(e, key::kIsP2p));
  x.thread_id = as_string(field(e, key::kThreadId));
  x.thread_name = as_string(field(e, key::kThreadName));
  if (const json* f = field(e, key::kFrames); f && f->is_array())
    for (const auto& fr : *f)
      x.frames.push_back({as_string(field(fr, key::kName)), as_string(field(fr, key::kFilename)),
                          as_int(field(fr, key::kLine)).value_or(0)});
  x.epoch = as_int(field(e, key::kEpoch));
  if (const json* ev = field(e, key::kEvent); ev && ev->is_string()) x.event = ev->get<std::string>();
  x.awaited_ranks = int_list(field(e, key::kAwaitedRanks));
  if (const json* err = field(e, key::kError); err && err->is_string()) x.error = err->get<std::string>();
  if (auto p = as_int(field(e, key::kPeer))) x.peer = static_cast<int>(*p);
  return x;
}

void parse_groups(const json& doc, Dump& d) {
  if (const json* cfg = field(doc, key::kPgConfig); cfg && cfg->is_object()) {
    for (const auto& [id, g] : cfg->items()) {
      if (!g.is_object()) continue;
      GroupConfig c;
      c.name = as_string(field(g, key::kName));
      c.desc = as_string(field(g, key::kDesc));
      c.backend = as_string(field(g, key::kBackend));
      c.epoch = as_int(field(g, key::kEpoch)).value_or(0);
      c.ranks = int_list(field(g, key::kRanks));
      c.rank = static_cast<int>(as_int(field(g, key::kRank)).value_or(-1));
      c.size = static_cast<int>(as_int(field(g, key::kSize)).value_or(static_cast<int64_t>(c.ranks.size())));
      d.pg_config.emplace(id, std::move(c));
    }
  }
  if (const json* st = field(doc, key::kPgStatus); st && st->is_object()) {
    for (const auto& [id, s] : st->items()) {
      GroupStatus g;
      auto get = [&s](const char* k) { return as_int(field(s, k)).value_or(0); };
      g.last_enqueued_collective = get(key::kLastEnqueuedCollective);
      g.last_started_collective = get(key::kLastStartedCollective);
      g.last_completed_collective = get(key::kLastCompletedCollective);
      g.last_enqueued_p2p = get(key::kLastEnqueuedP2p);
      g.last_started_p2p = get(key::kLastStartedP2p);
      g.last_completed_p2p = get(key::kLastCompletedP2p);
      g.dropped = get(key::kDropped);
      g.last_dropped_collective = get(key::kLastDroppedCollective);
      g.last_dropped_p2p = get(key::kLastDroppedP2p);
      d.pg_status.emplace(id, g);
    }
  }
}

std::optional<std::string> read_file(const fs::path& p, std::string& why) {
  std::error_code ec;
  auto size = fs::file_size(p, ec);
  if (ec) {
    why = ec.message();
    return std::nullopt;
  }
  if (size > kMaxDumpBytes) {
    why = fmt::format("{} bytes, larger than any dump", size);
    return std::nullopt;
  }
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    why = "cannot open";
    return std::nullopt;
  }
  std::string text(static_cast<size_t>(size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

// A version this reader does not know may mean anything: refused rather
// than misread. Absent reads as supported: a salvaged dump can lose it with
// the rest of its header.
void check_format_version(const json& doc, const std::string& file) {
  const json* v = field(doc, key::kFormatVersion);
  if (!v) return;
  const auto& supported = schema::kSupportedFormatVersions;
  auto n = as_int(v);
  if (n && std::find(supported.begin(), supported.end(), *n) != supported.end()) return;
  throw InvalidArgument::make(fmt::format("format_version of {}", file), v->dump(),
                              fmt::format("one of [{}], the dump format versions this sinew reads (a newer "
                                          "sinew reads newer dumps)",
                                          fmt::join(supported, ", ")));
}

// The last run of digits in the file's name: "sinew_fr_trace_rank_3" -> 3.
std::optional<int64_t> rank_in_name(const std::string& file) {
  std::string name = fs::path(file).filename().string();
  auto end = name.find_last_of("0123456789");
  if (end == std::string::npos) return std::nullopt;
  auto begin = name.find_last_not_of("0123456789", end);
  begin = begin == std::string::npos ? 0 : begin + 1;
  std::string digits = name.substr(begin, std::min<size_t>(end + 1 - begin, 9));
  return std::stoll(digits);
}

}  // namespace

std::string op_of(const std::string& profiling_name) {
  auto colon = profiling_name.find(':');
  std::string rest = colon == std::string::npos ? profiling_name : profiling_name.substr(colon + 1);
  return rest.substr(0, rest.find(' '));
}

std::optional<int64_t> elements(const Sizes& sizes, int64_t count) {
  auto numel = [](const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  };
  int64_t total = 0;
  for (const auto& shape : sizes) total += numel(shape);
  const auto recorded = static_cast<int64_t>(sizes.size());
  if (count <= recorded) return total;
  if (sizes.empty() || std::adjacent_find(sizes.begin(), sizes.end(), std::not_equal_to<>()) != sizes.end())
    return std::nullopt;
  return count * numel(sizes.front());
}

std::string bare_host(const std::string& host) { return host.substr(0, host.find('|')); }

std::string shapes_text(const Sizes& sizes, int64_t count) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    out += i ? ", [" : "[";
    for (size_t d = 0; d < sizes[i].size(); ++d) out += (d ? ", " : "") + std::to_string(sizes[i][d]);
    out += "]";
  }
  if (count > static_cast<int64_t>(sizes.size()))
    out += fmt::format("{}+{} more", sizes.empty() ? "" : ", ", count - static_cast<int64_t>(sizes.size()));
  return out + "]";
}

std::optional<Dump> parse_dump(const std::string& text, const std::string& file, std::string& why) {
  auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) {
    why = "empty";
    return std::nullopt;
  }
  if (static_cast<unsigned char>(text[first]) == 0x80) {
    why = "a pickle (a PyTorch dump?); only sinew's JSON dumps are read";
    return std::nullopt;
  }
  if (text[first] != '{') {
    bool binary = text.find('\0') != std::string::npos;
    why = binary ? "binary, not a JSON dump" : "not a JSON object";
    return std::nullopt;
  }
  SalvagingBuilder builder;
  bool complete = json::sax_parse(text, &builder, json::input_format_t::json, /*strict=*/true);
  json doc = builder.take_salvaged();
  std::optional<size_t> cut;
  if (!complete) cut = builder.error_at().value_or(text.size());
  const json* format = field(doc, key::kFormat);
  const bool sinew = format && format->is_string() && format->get<std::string>() == schema::kFormatName;
  // Written with sorted keys, "entries" comes before "format", "pg_config"
  // and "rank": a dump cut off in its entries keeps only "clock" and what
  // sorts before it. Its rank then comes from the file name.
  const json* clock = field(doc, key::kClock);
  const bool headless = !format && cut && field(doc, key::kEntries) && clock && field(*clock, key::kSteadyNs);
  if (!sinew && !headless) {
    why = cut ? fmt::format("not valid JSON (error at byte {}) and no \"format\": \"sinew-fr\" before it", *cut)
              : "JSON, but not a sinew flight-recorder dump (no \"format\": \"sinew-fr\")";
    return std::nullopt;
  }
  check_format_version(doc, file);
  auto rank = as_int(field(doc, key::kRank));
  const json* entries = field(doc, key::kEntries);
  const bool has_entries = entries && entries->is_array() && !entries->empty();
  if (!rank && cut && has_entries) rank = rank_in_name(file);
  if (!rank || *rank < 0) {
    why = !cut ? "a dump without a rank"
          : has_entries ? fmt::format("cut off at byte {} before its rank, and its name has no rank number", *cut)
                        : fmt::format("cut off at byte {} before its rank and entries", *cut);
    return std::nullopt;
  }
  Dump d;
  d.file = file;
  d.rank = static_cast<int>(*rank);
  d.truncated_at = cut;
  d.world_size = static_cast<int>(as_int(field(doc, key::kWorldSize)).value_or(0));
  d.job_id = as_string(field(doc, key::kJobId));
  d.host = as_string(field(doc, key::kHost));
  d.version = as_string(field(doc, key::kVersion));
  d.dump_reason = as_string(field(doc, key::kDumpReason));
  d.dump_detail = as_string(field(doc, key::kDumpDetail));
  d.pid = as_int(field(doc, key::kPid)).value_or(0);
  d.attempt = as_int(field(doc, key::kAttempt)).value_or(0);
  d.dump_time_ns = as_int(field(doc, key::kDumpTimeNs)).value_or(0);
  if (const json* clock = field(doc, key::kClock)) d.clock_offset_ns = as_int(field(*clock, key::kOffsetNs));
  parse_groups(doc, d);
  if (entries && entries->is_array()) {
    for (const auto& e : *entries) {
      if (auto x = parse_entry(e)) d.entries.push_back(std::move(*x));
      else ++d.entries_skipped;
    }
  }
  std::stable_sort(d.entries.begin(), d.entries.end(),
                   [](const Entry& a, const Entry& b) { return a.record_id < b.record_id; });
  d.raw = std::move(doc);
  return d;
}

LoadResult load_dumps(const std::vector<std::string>& paths, const std::string& name_prefix) {
  LoadResult r;
  std::vector<fs::path> files;
  for (const auto& p : paths) {
    std::error_code ec;
    auto st = fs::status(p, ec);
    if (fs::is_directory(st)) {
      std::vector<fs::path> found;
      for (fs::recursive_directory_iterator it(p, fs::directory_options::skip_permission_denied, ec), end;
           !ec && it != end; it.increment(ec)) {
        std::error_code fec;
        if (it->is_regular_file(fec)) found.push_back(it->path());
      }
      if (ec) r.warnings.push_back(fmt::format("{}: {}", p, ec.message()));
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(st)) {
      files.emplace_back(p);
    } else {
      r.warnings.push_back(fmt::format("{}: {}", p, ec ? ec.message() : "not a file or directory"));
    }
  }
  std::map<int, Dump> by_rank;
  for (const auto& f : files) {
    if (f.filename().string().rfind(name_prefix, 0) != 0) continue;
    ++r.files_seen;
    std::string why;
    auto text = read_file(f, why);
    std::optional<Dump> d;
    if (text) d = parse_dump(*text, f.string(), why);
    if (!d) {
      r.warnings.push_back(fmt::format("skipped {}: {}", f.string(), why));
      continue;
    }
    if (d->truncated_at)
      r.warnings.push_back(fmt::format("rank {}{}: {} is cut off or corrupt at byte {}; salvaged {} entries{}",
                                       d->rank, d->raw.contains(key::kRank) ? "" : " (from its file name)", f.string(),
                                       *d->truncated_at, d->entries.size(),
                                       d->raw.contains(key::kPgConfig) ? "" : " (its group configs are taken from the other dumps)"));
    if (d->entries_skipped)
      r.warnings.push_back(fmt::format("rank {}: {} entries in {} lack pg_id, collective_seq_id, "
                                       "profiling_name or state; ignored",
                                       d->rank, d->entries_skipped, f.string()));
    auto it = by_rank.find(d->rank);
    if (it == by_rank.end()) {
      by_rank.emplace(d->rank, std::move(*d));
      continue;
    }
    bool newer = d->dump_time_ns > it->second.dump_time_ns;
    const Dump& kept = newer ? *d : it->second;
    const Dump& dropped = newer ? it->second : *d;
    r.warnings.push_back(fmt::format("rank {}: two dumps, {} and {}; using the newer {}", d->rank, dropped.file,
                                     kept.file, kept.file));
    if (newer) it->second = std::move(*d);
  }
  for (auto& [rank, d] : by_rank) r.dumps.push_back(std::move(d));
  return r;
}

}  // namespace sinew::dist::fr
