// What runs on every GEMM output element between the accumulator and the
// store, described as data (not a closure) so that it can be compared,
// hashed into tuning-cache keys and compiled into a kernel's tile store.
//
//   Epilogue e;
//   e.bias(b).activation(Activation::kGeluTanh).cast(DType::kF8E4M3FN, 1 / s)
//    .reduce(Reduction::kAmax, 128, amax_out);
//   mm(x, w, y, {.epilogue = &e});
//
// Steps run in order on v = alpha * (a @ b) + beta * prior, in the
// accumulation type (f32; f64 for f64 GEMMs). A cast, if any, is the last
// step and decides the output dtype: out = convert(v * scale). Reductions see
// the value just before the cast and write one value per row and group of
// `group` consecutive columns to their own [M, N / group] tensor.
//
// Operand shapes ([M, N] of the GEMM; a bmm also accepts a leading batch
// dimension on any operand and on reduction outputs, else broadcasts):
//   bias:     [N] (row vector), [M, 1] (column vector) or [M, N]
//   residual: [M, N]
// Operands may be float32, float64, bfloat16 or float16, with any strides.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sinew/tensor/tensor_view.h"

namespace sinew::kernels {

enum class Activation : uint8_t { kRelu, kGeluTanh, kGeluErf, kSilu, kSigmoid, kTanh };
enum class Reduction : uint8_t { kSum, kMean, kMax, kAmax, kLogSumExp };
enum class BiasKind : uint8_t { kRow, kColumn, kMatrix };

const char* activation_name(Activation a);  // "relu", "gelu_tanh", "gelu_erf", "silu", "sigmoid", "tanh"
const char* reduction_name(Reduction r);    // "sum", "mean", "max", "amax", "logsumexp"
const char* bias_kind_name(BiasKind k);     // "row", "col", "matrix"

struct EpilogueStep {
  enum class Kind : uint8_t { kBias, kActivation, kResidual, kScale, kClamp, kCast };
  Kind kind = Kind::kScale;
  BiasKind bias = BiasKind::kRow;        // kBias
  Activation activation = Activation::kRelu;  // kActivation
  double scale = 1.0;                    // kScale, kCast (multiplies before converting)
  double lo = 0.0, hi = 0.0;             // kClamp
  DType dtype = DType::kF32;             // kCast: bfloat16, float16, float8_e4m3fn or float8_e5m2
  TensorView operand;                    // kBias, kResidual
};

struct GroupReduction {
  Reduction op = Reduction::kSum;
  int64_t group = 1;  // a power of two dividing N
  TensorView out;     // [M, N / group] (or [B, M, N / group]), float32 or float64
};

class Epilogue {
 public:
  // Bias kind from the shape: 1-D is a row vector; a last dimension of 1 is a column vector.
  Epilogue& bias(const TensorView& b);
  Epilogue& activation(Activation a);
  Epilogue& residual(const TensorView& r);
  Epilogue& scale(double s);
  Epilogue& clamp(double lo, double hi);  // NaN stays NaN
  Epilogue& cast(DType dtype, double scale = 1.0);
  Epilogue& reduce(Reduction op, int64_t group, const TensorView& out);

  const std::vector<EpilogueStep>& steps() const { return steps_; }
  const std::vector<GroupReduction>& reductions() const { return reductions_; }
  bool empty() const { return steps_.empty() && reductions_.empty(); }
  // The dtype of the cast step, if there is one.
  std::optional<DType> cast_dtype() const;

  // The structure without parameter values or operand addresses, e.g.
  // "bias_row+gelu_tanh+cast_float8_e4m3fn+amax128": epilogues with the same
  // key run the same code, so it is what tuning caches key by.
  std::string key() const;
  // Everything, for messages: "bias(row float32[768])+scale(0.5)+...".
  std::string to_string() const;
  size_t hash() const;  // of key()
  // Same steps, parameters and operands (views compared by dtype, shape,
  // strides and address).
  bool operator==(const Epilogue& other) const;

 private:
  std::vector<EpilogueStep> steps_;
  std::vector<GroupReduction> reductions_;
};

// The scalar reference: applies `epilogue` to `values` (the [M, N] or
// [B, M, N] GEMM result after alpha/beta, float32 or float64, any strides)
// and writes `out` (same shape, dtype as validated for the GEMM) and the
// reduction outputs. `values` may alias `out` when both have the
// accumulation dtype. Used by the families whose epilogue runs as a separate
// pass, and by tests; computes in the dtype of `values`.
void apply_epilogue(const Epilogue& epilogue, const TensorView& values, const TensorView& out);

// GELU (tanh form) in place over the m x n float32 rows of c (row stride
// ldc), rows split over `threads`: a separate pass computed, on AVX-512,
// with the same polynomial as the fused tile store, so that comparing it
// with a fused epilogue compares memory passes, not math libraries.
void gelu_tanh_pass(float* c, int64_t ldc, int64_t m, int64_t n, int threads);

}  // namespace sinew::kernels

template <>
struct std::hash<sinew::kernels::Epilogue> {
  size_t operator()(const sinew::kernels::Epilogue& e) const { return e.hash(); }
};
