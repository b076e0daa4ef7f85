// `sinew fr export --pickle`: dumps in the layout PyTorch's torchfrtrace
// (torch/distributed/flight_recorder) loads, so users keep the analyzer they
// know.
#pragma once

#include <string>
#include <vector>

#include "tools/sinew/fr_load.h"
#include "tools/sinew/fr_match.h"

namespace sinew::cli::fr {

struct ExportResult {
  std::vector<std::string> files;     // written
  std::vector<std::string> warnings;  // what torchfrtrace cannot take and was left out
};

// The pickled dict torchfrtrace reads for one rank.
std::string torch_pickle(const Dump& d, const Analysis& a, const std::string& version,
                         std::vector<std::string>& warnings);

// Writes <outdir>/<prefix><rank> for every dump (torchfrtrace takes the rank
// from the name after the common prefix).
ExportResult export_pickles(const std::vector<Dump>& dumps, const Analysis& a, const std::string& outdir,
                            const std::string& prefix);

}  // namespace sinew::cli::fr
