// scaled_mm: torch._scaled_mm's GEMM of fp8 / fp4 operands with their
// dequantization scales, out = (a * scale_a) @ (b * scale_b) (+ bias).
//
// As PyTorch requires, a is [M, K] row-major and b is [K, N] column-major
// (b.t() is [N, K] row-major: an nn.Linear weight quantized along K, see
// quantize.h). Elements are float8_e4m3fn / float8_e5m2 (not both e5m2), or
// e2m1 pairs in uint8 (PyTorch's float4_e2m1fn_x2): a uint8 [M, K/2] and b
// uint8 [K/2, N], packed along K. The recipe follows from the scales, tried
// in PyTorch's order (sizes as PyTorch checks them, on the packed shapes):
//  - tensorwise: float32 scales of one element each;
//  - rowwise: float32 scale_a [M, 1] and scale_b [1, N], contiguous; out bf16;
//  - blockwise (DeepSeek): float32 1x128 scale_a [M, ceil(K/128)] strides
//    (1, M) and scale_b [ceil(K/128), N] strides (N, 1); 128x128 scale_a
//    [ceil(M/128), ceil(K/128)] strides (ceil(K/128), 1) and scale_b
//    [ceil(K/128), ceil(N/128)] strides (1, ceil(K/128)); pairs 1x128 x
//    128x128, 128x128 x 1x128 and 1x128 x 1x128;
//  - MX (MXFP8 with fp8 elements, MXFP4 with e2m1): uint8 e8m0 scales, one
//    per 32 elements along K, contiguous with round_up(M, 128) *
//    round_up(K/32, 4) and round_up(N, 128) * round_up(K/32, 4) elements in
//    the swizzled layout, or M * K/32 and N * K/32 ([M, K/32] and [N, K/32]
//    row-major) in the row-major one; K % 32 == 0;
//  - NVFP4: float8_e4m3fn scales, one per 16 elements, laid out as MX's;
//    with the optional f32 tensor scales of two-level NVFP4.
// K % 16 == 0 and N % 16 == 0 as cuBLASLt requires. Bias is a bfloat16 [N]
// vector and needs a bfloat16 out (PyTorch's rule). Errors are
// InvalidArgument with PyTorch's wording of what was expected.
//
// Computed by dequantizing K panels of both operands to f32 and accumulating
// them with kernels::mm (f32 accumulation throughout).
#pragma once

#include <optional>

#include "sinew/kernels/quantize.h"
#include "sinew/tensor/tensor_view.h"

namespace sinew::kernels {

struct ScaledMmOptions {
  std::optional<TensorView> bias;  // bfloat16 [N], added to every row
  // Two-level NVFP4's per-tensor scales (both or neither); the product
  // multiplies the result.
  std::optional<float> global_scale_a, global_scale_b;
  ScaleLayout scale_layout = ScaleLayout::kRowMajor;  // of MX and NVFP4 scales
  int threads = 0;                                    // 0: ThreadPool::default_threads()
};

// out (float32 or bfloat16 [M, N], any strides) = scaled a @ scaled b + bias.
void scaled_mm(const TensorView& a, const TensorView& b, const TensorView& scale_a, const TensorView& scale_b,
               const TensorView& out, const ScaledMmOptions& options = {});

// The recipes scaled_mm would use for these operands (throws the same
// errors as scaled_mm for a scaling configuration it rejects).
struct ScaledMmRecipe {
  ScaleRecipe a, b;
};
ScaledMmRecipe scaled_mm_recipe(const TensorView& a, const TensorView& b, const TensorView& scale_a,
                                const TensorView& scale_b, ScaleLayout scale_layout = ScaleLayout::kRowMajor);

}  // namespace sinew::kernels
