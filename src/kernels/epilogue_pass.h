// The scalar reference epilogue over whole rows: what the families without
// a fused epilogue run after their GEMM, what the reference family runs on
// its f64 accumulators, and what tests compare the fused tile stores with.
#pragma once

#include <cstdint>

#include "kernels/epilogue_bound.h"

namespace sinew::kernels {

// Applies the steps to row i's n values (batch already applied to `e` and
// `out`), computes the reductions over the row, and stores the row to out
// after the cast scale, converting like tensor/dtype.h.
void finish_row(const BoundEpilogue& e, int64_t i, double* values, int64_t n, const MatrixRef& out);
void finish_row(const BoundEpilogue& e, int64_t i, float* values, int64_t n, const MatrixRef& out);

// finish_row over [batch, m, n] `values` (float32 or float64, which may be
// `out` itself), rows split over `threads`.
void epilogue_pass(const BoundEpilogue& e, int64_t batch, int64_t m, int64_t n, const MatrixRef& values,
                   const MatrixRef& out, int threads);

// Fills every reduction output with its identity, before a fused GEMM
// folds tiles into them.
void init_reductions(const BoundEpilogue& e, int64_t batch, int64_t m, int64_t n);

}  // namespace sinew::kernels
