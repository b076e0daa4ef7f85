// Symmetric eigendecomposition (PyTorch's linalg.eigh / eigvalsh) for
// float32 and float64, on one matrix or a batch [..., n, n] in any strides.
// Jacobi rotations for small single matrices, Householder
// tridiagonalization for large ones and for batches of small ones (W at a
// time, one per SIMD lane), then divide and conquer (LAPACK's stedc) for
// eigenvectors or implicit QL. See docs/linalg.md.
#pragma once

#include "sinew/tensor/tensor_view.h"

namespace sinew::linalg {

enum class EighMethod {
  kAuto,         // Jacobi for a single small matrix, tridiagonal above and for batches of small ones
  kJacobi,       // cyclic Jacobi (round-robin ordering), blocked for large n
  kTridiagonal,  // Householder tridiagonalization + divide and conquer (vectors) or implicit QL
};

struct EighOptions {
  bool upper = false;  // read the upper (else lower) triangle of a; the other is not read
  EighMethod method = EighMethod::kAuto;
  int threads = 0;  // 0: ThreadPool::default_threads()
};

// a = v diag(w) vᵀ: w [..., n] ascending, v [..., n, n] orthonormal columns.
// v may be a itself.
void eigh(const TensorView& a, const TensorView& w, const TensorView& v, const EighOptions& options = {});

// Eigenvalues only, ascending.
void eigvalsh(const TensorView& a, const TensorView& w, const EighOptions& options = {});

}  // namespace sinew::linalg
