// Distributed GEMM tuning: a ProcessGroup as the autotuner's TuneGroup, so
// that ranks split the candidates, time their share and allgather the
// timings, and every rank picks the same kernel.
//
//   kernels::TuneOptions o;
//   o.group = dist::gemm_tune_group(*pg);
//   kernels::GemmTuner::global().tune(shape, o);
//
// Header-only on purpose: neither sinew::dist nor sinew::kernels depends on
// the other; a program that links both includes this.
#pragma once

#include <vector>

#include "sinew/dist/process_group.h"
#include "sinew/kernels/autotune.h"

namespace sinew::dist {

// `pg` must outlive the tuning calls that use the returned group.
inline kernels::TuneGroup gemm_tune_group(ProcessGroup& pg) {
  kernels::TuneGroup g;
  g.rank = pg.rank();
  g.world = pg.size();
  ProcessGroup* p = &pg;
  g.allgather = [p](const std::vector<double>& mine) {
    std::vector<double> in = mine;
    std::vector<double> all(in.size() * static_cast<size_t>(p->size()));
    const auto n = static_cast<int64_t>(in.size());
    p->allgather_into_tensor(TensorView::flat(all.data(), DType::kF64, n * p->size()),
                             TensorView::flat(in.data(), DType::kF64, n))
        ->wait();
    return all;
  };
  return g;
}

}  // namespace sinew::dist
