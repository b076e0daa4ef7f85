// GEMV for single-token decode: y[M, N] = x[M, K] @ W^T with W [N, K] in the
// nn.Linear layout, M = 1 or a few rows. Memory-bound, so the weights are
// streamed once per call in their stored format and dequantized in
// registers: f32, bf16, fp8 (e4m3fn / e5m2 with a per-row or per-tensor
// scale) and NVFP4 (e2m1 pairs, e4m3 scales per 16 elements, one f32 tensor
// scale). Threads split N. Up to 8 rows of x share one pass over the
// weights; a larger M takes one pass per 8 rows.
#pragma once

#include <optional>

#include "sinew/kernels/quantize.h"
#include "sinew/tensor/tensor_view.h"

namespace sinew::kernels {

struct GemvWeight {
  // [N, K] float32, bfloat16, float8_e4m3fn or float8_e5m2, or uint8
  // [N, K/2] e2m1 pairs (NVFP4, low nibble first). Unit stride along K.
  TensorView w;
  // fp8: the dequantization scale, float32 with N elements (per row) or one
  // (per tensor); none means 1. NVFP4: float8_e4m3fn [N, ceil(K/16)] block
  // scales, unit stride along K (the row-major layout).
  std::optional<TensorView> scale;
  float global_scale = 1.0f;  // NVFP4's tensor scale

  // A weight quantized with quantize(): fp8 tensorwise or rowwise, or NVFP4
  // with row-major scales.
  static GemvWeight from(const QuantizedMatrix& q);
};

enum class GemvIsa : uint8_t {
  kAuto,      // AVX-512 when the CPU has it, else portable
  kPortable,  // plain C++
  kAvx512,    // throws InvalidArgument on a CPU without AVX-512 (F, BW, DQ, VL) and F16C
};

struct GemvOptions {
  int threads = 0;  // 0: ThreadPool::default_threads()
  GemvIsa isa = GemvIsa::kAuto;
  // NVFP4 weights, one row of x, AVX-512 with VNNI: x is rounded to 16-bit
  // fixed point per 256 elements (each value within 2^-15 of the largest
  // |x| of its 256, far finer than the weights' 4 bits or bf16
  // activations) and multiplied by integer dot products: 1.2x the f32
  // route with the weights in cache (from memory both run at its speed).
  // x with a NaN or infinity takes the f32 route, so they propagate as
  // before. false: always the f32 route.
  bool nvfp4_fixed_point_x = true;
};

// y (float32 or bfloat16 [M, N], any strides) = x (float32 or bfloat16
// [M, K], any strides) @ W^T, accumulated in f32.
void gemv(const TensorView& x, const GemvWeight& weight, const TensorView& y, const GemvOptions& options = {});

// Whether this CPU runs the AVX-512 kernels.
bool gemv_has_avx512();

}  // namespace sinew::kernels
