// GEMM entry points of the kernels layer (PyTorch's mm / addmm / bmm).
//
// Operands are TensorViews; layouts come from their strides, so every one of
// the four transpose layouts and general strided operands are accepted (a
// transposed operand is a view with swapped strides, as in PyTorch).
// Accumulation is in f32 for f32/f16/bf16 inputs and f64 for f64. The
// output has the inputs' dtype (f32 also for bf16/f16 inputs), or the dtype
// of the epilogue's cast. alpha = 0 reads neither a nor b, as in BLAS.
// Validation errors are InvalidArgument naming the argument (gemm_problem.h);
// candidate.h lists the implementations behind these calls.
#pragma once

#include <cstdint>
#include <string>

#include "sinew/tensor/tensor_view.h"

namespace sinew::kernels {

struct Epilogue;  // epilogue.h: what runs on each output tile before it is stored

// Where the epilogue runs: inside the kernel's tile store, or as a separate
// pass over the output after the GEMM. kAuto lets the candidate decide.
enum class EpilogueMode : uint8_t { kAuto, kFused, kUnfused };

struct GemmOptions {
  double alpha = 1.0;
  // mm/bmm: out = alpha * a @ b + beta * out (beta = 0 never reads out, so
  // NaN garbage in out does not leak). addmm: the weight of `bias`.
  double beta = 0.0;
  const Epilogue* epilogue = nullptr;  // nullptr: none
  int threads = 0;                     // 0: ThreadPool::default_threads(), fewer for small problems
  // "" lets the autotuner choose; "tile", "blas" or "reference" pins a family.
  std::string family;
  // Pins one candidate by its id (candidate.h); overrides `family`.
  std::string candidate;
  EpilogueMode epilogue_mode = EpilogueMode::kAuto;
};

// out[M,N] = alpha * a[M,K] @ b[K,N] + beta * out.
void mm(const TensorView& a, const TensorView& b, const TensorView& out, const GemmOptions& options = {});

// out[M,N] = beta * bias + alpha * a @ b, bias of shape [N] (row vector,
// broadcast down the rows), [M, 1] (column vector) or [M, N].
void addmm(const TensorView& bias, const TensorView& a, const TensorView& b, const TensorView& out,
           const GemmOptions& options = {});

// out[B,M,N] = alpha * a[B,M,K] @ b[B,K,N] + beta * out.
void bmm(const TensorView& a, const TensorView& b, const TensorView& out, const GemmOptions& options = {});

}  // namespace sinew::kernels
