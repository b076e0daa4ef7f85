// Quantization to the low-precision formats of scaled_mm and the GEMV:
// fp8 with tensorwise, rowwise, 1x128 and 128x128 block scales (f32), MX
// (32-element blocks along the row, e8m0 scales; e4m3/e5m2 elements: MXFP8,
// e2m1: MXFP4) and NVFP4 (e2m1, 16-element blocks, e4m3 block scales, one f32
// tensor scale), with the matching dequantization.
//
// A quantized matrix is [rows, cols] with its blocks along cols, which is K
// for both GEMM operands: quantize a [M, K] activation as is and a weight as
// its [N, K] (nn.Linear) layout; scaled_mm's b [K, N] column-major is that
// [N, K] row-major data viewed transposed (see scaled_mm.h).
//
// Scales are amax-based and are the dequantization multipliers (PyTorch's
// scale_a / scale_b): x ~= element * scale.
//  - fp8 recipes (torchao's Float8 recipe): scale = max(amax, 1e-12) / fmax,
//    element = saturate(x * fmax / amax).
//  - MX (OCP MX spec, torchao's FLOOR mode): the scale is 2^(floor(log2
//    amax) - emax_elem), elements saturate; NaN in a block gives scale 0xFF.
//  - NVFP4 (torchao's two-level recipe): block scale e4m3 =
//    clamp(amax / 6 / global_scale, 2^-6, 448); elements = x / (global *
//    block scale), saturating at ±6.
#pragma once

#include <cstdint>
#include <vector>

#include "sinew/tensor/tensor_view.h"

namespace sinew::kernels {

enum class ScaleRecipe : uint8_t {
  kTensorwise,    // one f32 scale
  kRowwise,       // f32 per row
  kBlock1x128,    // f32 per row and 128 columns
  kBlock128x128,  // f32 per 128x128 tile
  kMX,            // e8m0 (uint8) per row and 32 columns; fp8 or e2m1 elements
  kNVFP4,         // float8_e4m3fn per row and 16 columns, e2m1 elements, f32 global scale
};
const char* scale_recipe_name(ScaleRecipe recipe);

// Layout of kMX and kNVFP4 scales.
enum class ScaleLayout : uint8_t {
  kRowMajor,  // [rows, blocks]
  // cuBLAS's block-scaling layout that torch._scaled_mm requires on CUDA
  // (torchao's to_blocked, SWIZZLE_32_4_4): the [rows, blocks] matrix padded
  // with zeros to 128x4 tiles, tiles row-major, each tile stored as
  // (row % 32, row / 32, block % 4). Flat, round_up(rows, 128) *
  // round_up(blocks, 4) entries.
  kSwizzled,
};

// A quantized [rows, cols] matrix.
struct QuantizedMatrix {
  // float8_e4m3fn or float8_e5m2 [rows, cols], or uint8 [rows, cols / 2]
  // holding e2m1 pairs (kMX for MXFP4, kNVFP4). Unit stride along cols.
  TensorView data;
  // The dequantization scales in the shape scale_spec() gives (any strides,
  // except a swizzled layout, which is contiguous).
  TensorView scale;
  ScaleRecipe recipe = ScaleRecipe::kTensorwise;
  ScaleLayout layout = ScaleLayout::kRowMajor;  // kMX and kNVFP4 only
  // kNVFP4's per-tensor scale (x ~= e2m1 * block scale * global_scale); 1
  // for single-level NVFP4. An input of quantize().
  float global_scale = 1.0f;

  bool packed_fp4() const { return data.dtype() == DType::kU8; }
  int64_t rows() const { return data.dim() == 2 ? data.shape()[0] : 0; }
  int64_t cols() const { return data.dim() == 2 ? data.shape()[1] * (packed_fp4() ? 2 : 1) : 0; }
};

// The scale view a recipe needs for a [rows, cols] matrix, with the strides
// torch._scaled_mm expects of it:
//   tensorwise f32 [1]; rowwise f32 [rows, 1];
//   1x128 f32 [rows, ceil(cols/128)], strides (1, rows) ("outer-dim-major");
//   128x128 f32 [ceil(rows/128), ceil(cols/128)], row-major;
//   kMX uint8 (e8m0) / kNVFP4 float8_e4m3fn: [rows, ceil(cols/32 or 16)]
//   row-major, or the flat swizzled layout.
struct ScaleSpec {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  int64_t numel() const;
};
ScaleSpec scale_spec(ScaleRecipe recipe, ScaleLayout layout, int64_t rows, int64_t cols);

// Block size of a recipe along rows and along cols (0: the whole extent).
struct ScaleBlock {
  int64_t rows = 0, cols = 0;
};
ScaleBlock scale_block(ScaleRecipe recipe);

// Two-level NVFP4's per-tensor scale: amax(x) / (448 * 6), or 1 when x is all
// zero. NaN when x holds NaN.
float nvfp4_global_scale(const TensorView& x);

// Quantizes x (float32 or bfloat16 [rows, cols], any strides) into q.data and
// q.scale; the element format is q.data's dtype. Threads over rows
// (threads <= 0: ThreadPool::default_threads()).
void quantize(const TensorView& x, const QuantizedMatrix& q, int threads = 0);

// out (float32 or bfloat16 [rows, cols], any strides) = q dequantized.
void dequantize(const QuantizedMatrix& q, const TensorView& out, int threads = 0);

}  // namespace sinew::kernels
