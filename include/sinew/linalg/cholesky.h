// Cholesky factorization, triangular solves and Cholesky solves (PyTorch's
// linalg.cholesky, linalg.solve_triangular, cholesky_solve) for float32 and
// float64, on one matrix [n, n] or a batch [..., n, n] in any strides (row-
// or column-major). Batches are threaded across matrices; a single large
// matrix is blocked and its updates run on kernels::mm. See docs/linalg.md.
#pragma once

#include "sinew/tensor/tensor_view.h"

namespace sinew::linalg {

struct CholeskyOptions {
  // false: A = L Lᵀ, reading the lower triangle of A and writing L (zeros
  // above the diagonal). true: A = Uᵀ U, reading the upper triangle and
  // writing U (zeros below).
  bool upper = false;
  int threads = 0;  // 0: ThreadPool::default_threads()
};

// out [..., n, n] = the Cholesky factor of the symmetric positive-definite a.
// out may be a itself. A matrix that is not positive definite raises
// InvalidArgument naming the batch index, the failing pivot and its value.
void cholesky(const TensorView& a, const TensorView& out, const CholeskyOptions& options = {});

struct TriangularSolveOptions {
  bool upper = false;          // a is upper (else lower) triangular; the other triangle is not read
  bool left = true;            // solve a x = b (else x a = b)
  bool unit_diagonal = false;  // assume ones on the diagonal of a (not read)
  int threads = 0;
};

// x = a⁻¹ b (left) or b a⁻¹ (right); a [..., n, n], b and x [..., n, k]
// (left) or [..., k, n] (right). x may be b itself. A zero or non-finite
// diagonal entry raises InvalidArgument naming it.
void solve_triangular(const TensorView& a, const TensorView& b, const TensorView& x,
                      const TriangularSolveOptions& options = {});

// x = A⁻¹ b for A = L Lᵀ (or Uᵀ U with options.upper), given the factor that
// cholesky() wrote; b and x [..., n, k]; x may be b itself.
void cholesky_solve(const TensorView& factor, const TensorView& b, const TensorView& x,
                    const CholeskyOptions& options = {});

}  // namespace sinew::linalg
