#include "sinew/linalg/checks.h"

#include <fmt/format.h>

#include "sinew/core/error.h"

namespace sinew::linalg {

void check_matrix(const TensorView& a, const char* routine, const char* argument) {
  if (a.dim() < 2)
    throw InvalidArgument::make(fmt::format("{}: {}", routine, argument), a.to_string(),
                                "a matrix [m, n] or a batch [..., m, n]");
  if (a.dtype() != DType::kF32 && a.dtype() != DType::kF64)
    throw InvalidArgument::make(fmt::format("{}: {}.dtype", routine, argument), dtype_name(a.dtype()),
                                "float32 or float64");
}

int64_t check_square(const TensorView& a, const char* routine, const char* argument) {
  check_matrix(a, routine, argument);
  auto s = a.shape();
  if (s[s.size() - 1] != s[s.size() - 2])
    throw InvalidArgument::make(fmt::format("{}: {}", routine, argument), a.to_string(),
                                "a square matrix (or batch of them)");
  return s[s.size() - 1];
}

}  // namespace sinew::linalg
