// Singular value decomposition by one-sided Jacobi with QR preconditioning
// (PyTorch's linalg.svd / svdvals) for float32 and float64, on one matrix or
// a batch [..., m, n] in any strides. Small singular values keep high
// relative accuracy (Demmel-Veselić, Drmač). See docs/linalg.md.
#pragma once

#include "sinew/tensor/tensor_view.h"

namespace sinew::linalg {

struct SvdOptions {
  // true: u [..., m, m], vh [..., n, n]; false: u [..., m, k], vh [..., k, n]
  // with k = min(m, n).
  bool full_matrices = true;
  int threads = 0;  // 0: ThreadPool::default_threads()
};

// a = u diag(s) vh with s [..., k] descending and non-negative.
void svd(const TensorView& a, const TensorView& u, const TensorView& s, const TensorView& vh,
         const SvdOptions& options = {});

// Singular values only, descending.
void svdvals(const TensorView& a, const TensorView& s, const SvdOptions& options = {});

}  // namespace sinew::linalg
