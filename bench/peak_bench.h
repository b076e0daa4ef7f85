// `sinew bench peak`: the machine's limits, measured in the same run as the
// benchmarks that are compared with them: f32 FMA peak (chains of zmm FMAs),
// the f32 microkernel's own rate on L1-resident panels (its ceiling),
// bf16 dot-product peak (vdpbf16ps) and STREAM triad / copy bandwidth, per
// thread count. Rows: suite peak, cases <what>/t<threads>, impl machine.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "report.h"

namespace sinew::bench {

struct PeakFigures {
  // By thread count; 0 where the CPU lacks the instructions.
  std::map<int, double> f32_gflops, tile_gflops, bf16_gflops, triad_GBps, copy_GBps;
};

PeakFigures run_peak_bench(const std::vector<int>& threads, bool quick, Report& report);

}  // namespace sinew::bench
