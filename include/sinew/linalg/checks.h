// Argument checks shared by the linear-algebra routines: every one names the
// routine, the argument and the shape it got.
#pragma once

#include "sinew/tensor/tensor_view.h"

namespace sinew::linalg {

// A matrix ([n, n]) or a batch of them ([..., n, n]) of f32 or f64.
// Returns n. Throws InvalidArgument otherwise.
int64_t check_square(const TensorView& a, const char* routine, const char* argument = "a");

// f32 or f64, at least 2-D. Throws InvalidArgument otherwise.
void check_matrix(const TensorView& a, const char* routine, const char* argument = "a");

}  // namespace sinew::linalg
