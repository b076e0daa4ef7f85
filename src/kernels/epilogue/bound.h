// An Epilogue bound to one problem: its operands as strided MatrixRefs
// broadcast to [batch, M, N] (zero strides), in fixed arrays so that kernels
// compiled for other ISAs read plain data and copying one allocates nothing.
#pragma once

#include <cstdint>
#include <string_view>

#include "sinew/kernels/epilogue.h"
#include "sinew/kernels/gemm_problem.h"

namespace sinew::kernels {

struct BoundStep {
  EpilogueStep::Kind kind;
  Activation activation;
  double scale, lo, hi;
  MatrixRef operand;  // kBias, kResidual: element (b, i, j) of the broadcast operand
};

struct BoundReduction {
  Reduction op;
  int64_t group;
  MatrixRef out;  // element (b, i, g) for group g
};

struct BoundEpilogue {
  static constexpr int kMaxSteps = 16;
  static constexpr int kMaxReductions = 4;
  int num_steps = 0;  // without the cast
  int num_reductions = 0;
  BoundStep steps[kMaxSteps];
  BoundReduction reductions[kMaxReductions];
  DType out_dtype = DType::kF32;
  double cast_scale = 1.0;  // multiplies before the final conversion (1 without a cast)

  bool trivial() const { return num_steps == 0 && num_reductions == 0 && cast_scale == 1.0; }
  // Shifts every operand to batch b (after which batch strides are unused).
  BoundEpilogue at_batch(int64_t b) const;
};

// Validates `epilogue` for a [batch, m, n] output of `out_dtype` (the
// messages name `op`, e.g. "mm: epilogue.bias") and binds it. An empty or
// null epilogue binds to a trivial one.
BoundEpilogue bind_epilogue(const Epilogue* epilogue, std::string_view op, int64_t batch, int64_t m, int64_t n,
                            bool batched, DType out_dtype);

// The identity each reduction starts from (0, -inf, ...).
double reduction_identity(Reduction op);

}  // namespace sinew::kernels
