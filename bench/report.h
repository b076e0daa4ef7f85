// Benchmark results: rows `suite,case,impl,metric,value,unit`, printed as a
// readable table and written as CSV.
#pragma once

#include <string>
#include <vector>

namespace sinew::bench {

struct Row {
  std::string suite, case_name, impl, metric;
  double value;
  std::string unit;
};

class Report {
 public:
  void add(Row r) { rows_.push_back(std::move(r)); }
  const std::vector<Row>& rows() const { return rows_; }
  // Appends to `path` (header written when the file is new or empty).
  void write_csv(const std::string& path) const;
  // One line per case: each impl's value of `metric`, and sinew's ratio to
  // each peer (higher is better when `higher_better`).
  void print_table(const std::string& metric, bool higher_better) const;

 private:
  std::vector<Row> rows_;
};

double median(std::vector<double> v);

}  // namespace sinew::bench
