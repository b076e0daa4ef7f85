#include "report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include "sinew/core/error.h"

namespace sinew::bench {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void Report::write_csv(const std::string& path) const {
  bool fresh = true;
  {
    std::ifstream in(path);
    fresh = !in.good() || in.peek() == std::ifstream::traits_type::eof();
  }
  std::ofstream out(path, std::ios::app);
  if (!out) throw IoError(fmt::format("cannot open {} for writing", path));
  if (fresh) out << "suite,case,impl,metric,value,unit\n";
  for (const auto& r : rows_)
    out << fmt::format("{},{},{},{},{:.6g},{}\n", r.suite, r.case_name, r.impl, r.metric, r.value, r.unit);
}

void Report::print_table(const std::string& metric, bool higher_better) const {
  std::vector<std::string> cases;
  std::set<std::string> seen;
  std::vector<std::string> impls;
  std::set<std::string> seen_impl;
  std::map<std::pair<std::string, std::string>, double> v;
  std::string unit;
  for (const auto& r : rows_) {
    if (r.metric != metric) continue;
    if (seen.insert(r.case_name).second) cases.push_back(r.case_name);
    if (seen_impl.insert(r.impl).second) impls.push_back(r.impl);
    v[{r.case_name, r.impl}] = r.value;
    unit = r.unit;
  }
  if (cases.empty()) return;
  size_t w = 12;
  for (const auto& c : cases) w = std::max(w, c.size());
  std::string head = fmt::format("{:<{}}", fmt::format("{} ({})", metric, unit), w);
  for (const auto& i : impls) head += fmt::format(" {:>11}", i);
  for (const auto& i : impls)
    if (i != "sinew") head += fmt::format(" {:>11}", "vs " + i);
  fmt::print("{}\n", head);
  for (const auto& c : cases) {
    std::string line = fmt::format("{:<{}}", c, w);
    for (const auto& i : impls) {
      auto it = v.find({c, i});
      line += it == v.end() ? fmt::format(" {:>11}", "-") : fmt::format(" {:>11.4g}", it->second);
    }
    auto s = v.find({c, "sinew"});
    for (const auto& i : impls) {
      if (i == "sinew") continue;
      auto it = v.find({c, i});
      if (s == v.end() || it == v.end() || it->second == 0 || s->second == 0) {
        line += fmt::format(" {:>11}", "-");
        continue;
      }
      double ratio = higher_better ? s->second / it->second : it->second / s->second;
      line += fmt::format(" {:>10.2f}x", ratio);
    }
    fmt::print("{}\n", line);
  }
  std::fflush(stdout);
}

}  // namespace sinew::bench
