// Householder QR (blocked, compact WY; PyTorch's linalg.qr) and least squares
// (linalg.lstsq) for float32 and float64, on one matrix or a batch
// [..., m, n] in any strides. See docs/linalg.md.
#pragma once

#include "sinew/tensor/tensor_view.h"

namespace sinew::linalg {

enum class QrMode {
  kReduced,   // q [..., m, k], r [..., k, n] with k = min(m, n)
  kComplete,  // q [..., m, m], r [..., m, n]
  kR,         // r [..., k, n] only; q is not written (pass TensorView{})
};

struct QrOptions {
  QrMode mode = QrMode::kReduced;
  int threads = 0;  // 0: ThreadPool::default_threads()
};

// a = q r with q orthonormal columns and r upper triangular (its diagonal
// may have either sign, as LAPACK's). r may be a itself when it has a's shape.
void qr(const TensorView& a, const TensorView& q, const TensorView& r, const QrOptions& options = {});

struct LstsqOptions {
  int threads = 0;
};

// x [..., n, k] minimizing ‖a x − b‖ for a [..., m, n] of full rank, b
// [..., m, k]: the least-squares solution when m >= n, the minimum-norm one
// when m < n. A rank-deficient a raises InvalidArgument (use svd then).
void lstsq(const TensorView& a, const TensorView& b, const TensorView& x, const LstsqOptions& options = {});

}  // namespace sinew::linalg
