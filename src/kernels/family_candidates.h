// The fixed families: `reference` (f64-accumulating loops, the truth for
// tests) and `blas` (OpenBLAS through CBLAS; the epilogue is a separate pass).
#pragma once

#include <memory>

#include "sinew/kernels/candidate.h"

namespace sinew::kernels {

std::unique_ptr<Candidate> make_reference_candidate();
std::unique_ptr<Candidate> make_blas_candidate();

}  // namespace sinew::kernels
