// The scalar reference epilogue over whole rows: what the families without
// a fused epilogue run after their GEMM, what the reference family runs on
// its f64 accumulators, and what tests compare the fused tile stores with.
#pragma once

#include <cstdint>

#include "kernels/epilogue/bound.h"

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

// An element of a floating-point dtype (f32, f64, bf16, f16, the fp8
// formats) read as or written from a double with tensor/dtype.h's
// conversions (fp8 stores saturate); false, touching nothing, for other
// dtypes. Also how the tests read and write tensors.
bool load_element(const void* p, DType t, double* v);
bool store_element(void* p, DType t, double v);

// Fills every reduction output with its identity, before a fused GEMM
// folds tiles into them.
void init_reductions(const BoundEpilogue& e, int64_t batch, int64_t m, int64_t n);

namespace avx512 {
// GELU (tanh form) in place over x[0, n) with the fused tile store's
// polynomial (avx512/gelu_avx512.cc); AVX-512 CPUs only.
void gelu_tanh_row(float* x, int64_t n);
}  // namespace avx512

}  // namespace sinew::kernels
