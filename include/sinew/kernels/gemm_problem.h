// A validated GEMM as every candidate kernel sees it: sizes, dtypes, one
// strided reference per operand, alpha/beta and the epilogue. mm, addmm and
// bmm build one with make_*_problem (which throws InvalidArgument with the
// argument, its value and what was expected) and hand it to a Candidate.
#pragma once

#include <cstdint>
#include <string>

#include "sinew/kernels/gemm.h"
#include "sinew/tensor/tensor_view.h"

namespace sinew::kernels {

// Element (b, i, j) of a batch of matrices lives at
// data + (b * bs + i * rs + j * cs) elements of dtype. Strides may be 0
// (a broadcast operand; never for outputs).
struct MatrixRef {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t bs = 0, rs = 0, cs = 0;

  char* byte_ptr(int64_t b, int64_t i, int64_t j) const {
    return static_cast<char*>(data) +
           static_cast<ptrdiff_t>((b * bs + i * rs + j * cs) * static_cast<int64_t>(dtype_size(dtype)));
  }
  // The matrix of batch b, as a view [rows, cols].
  TensorView view(int64_t b, int64_t rows, int64_t cols) const;
};

enum class GemmOp : uint8_t { kMm, kAddmm, kBmm };
const char* gemm_op_name(GemmOp op);  // "mm", "addmm", "bmm"

struct GemmProblem {
  GemmOp op = GemmOp::kMm;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  DType in_dtype = DType::kF32;   // of a and b
  DType out_dtype = DType::kF32;
  MatrixRef a, b, out;            // [batch, m, k], [batch, k, n], [batch, m, n]
  // What beta multiplies: out itself (mm, bmm) or the bias broadcast to
  // [m, n] (addmm). Not read when beta == 0.
  MatrixRef prior;
  double alpha = 1.0, beta = 0.0;
  const Epilogue* epilogue = nullptr;  // nullptr when there is none (or it is empty)
  int threads = 1;                      // resolved, >= 1

  // f64 for f64 inputs, else f32.
  DType acc_dtype() const { return in_dtype == DType::kF64 ? DType::kF64 : DType::kF32; }
  // alpha == 0 never reads a and b (as in BLAS); neither does k == 0.
  bool reads_ab() const { return alpha != 0.0 && k > 0; }
  bool reads_prior() const { return beta != 0.0; }
  // Operand layouts, "NN" ... "TT": N when a row is contiguous (column
  // stride 1), T when a column is, S for neither (a general strided view).
  std::string layout() const;
  // "mm bfloat16->float32 [b=1 m=128 n=64 k=256] NT alpha=1 beta=0 epilogue=bias_row t2".
  std::string to_string() const;
};

// Validates and describes mm / addmm / bmm (see gemm.h). options.threads = 0
// resolves to the pool's default, capped for small problems so that they
// do not pay for waking threads.
GemmProblem make_mm_problem(const TensorView& a, const TensorView& b, const TensorView& out,
                            const GemmOptions& options = {});
GemmProblem make_addmm_problem(const TensorView& bias, const TensorView& a, const TensorView& b,
                               const TensorView& out, const GemmOptions& options = {});
GemmProblem make_bmm_problem(const TensorView& a, const TensorView& b, const TensorView& out,
                             const GemmOptions& options = {});

}  // namespace sinew::kernels
