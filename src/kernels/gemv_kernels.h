// The GEMV kernels behind gemv.cc: one portable, one AVX-512 per weight
// format. A kernel computes the unscaled dot products of up to 8 rows of x
// with weight rows [n0, n1): NVFP4 block scales are applied, the fp8 row or
// tensor scale and the NVFP4 tensor scale are left to the caller.
#pragma once

#include <cstdint>

namespace sinew::kernels::gemv_detail {

enum class WeightFormat : uint8_t { kF32, kBF16, kE4M3, kE5M2, kNVFP4 };

inline constexpr int kMaxRows = 8;  // rows of x per pass over the weights
inline constexpr int kKPad = 16;    // x rows are padded with zeros to a multiple of this
inline constexpr int kKStep = 256;  // ... and NVFP4's transposed x row to a multiple of this

struct GemvArgs {
  WeightFormat format = WeightFormat::kF32;
  int m = 1;      // rows of x, 1..kMaxRows
  int64_t k = 0;  // elements per weight row
  // x as f32, m rows of ldx >= round_up(k, kKPad) floats, zero past k.
  const float* x = nullptr;
  int64_t ldx = 0;
  // NVFP4 on AVX-512 only, m > 1: x with each 16-element block reordered
  // to (0, 8, 1, 9, ..., 7, 15), the order that kernel decodes nibbles in.
  const float* x_nibble_order = nullptr;
  // On AVX-512 only, m = 1, 64-byte aligned. NVFP4: x with each
  // 128-element chunk transposed as a 16 x 8 matrix (element 8l + j at
  // 16j + l: vector j holds the j-th weight of each 4-byte lane), zero from
  // k to a multiple of kKStep. e4m3: each full 64-element chunk transposed
  // as a 16 x 4 matrix (element 4l + j at 16j + l), the same for 1-byte
  // weights.
  const float* x_transposed = nullptr;
  // NVFP4 on AVX-512 with VNNI, m = 1, when GemvOptions::nvfp4_fixed_point_x
  // (else nullptr): x rounded to int16 per kKStep-element chunk c, value
  // x_q16 * x_q16_scale[c], zero from k to a multiple of kKStep, 64-byte
  // aligned. Within each 128-element half of a chunk, element 8d + 4t + s
  // is at 32s + 2d + t (the pairs of nvfp4_q16_block's dword lanes).
  const int16_t* x_q16 = nullptr;
  const float* x_q16_scale = nullptr;
  const uint8_t* w = nullptr;  // weight row n at w + n * ldw bytes
  int64_t ldw = 0;
  const uint8_t* block_scale = nullptr;  // NVFP4: e4m3 codes of row n at block_scale + n * ld_scale
  int64_t ld_scale = 0;
  float* y = nullptr;  // y[i * ldy + n]
  int64_t ldy = 0;
};

using GemvKernel = void (*)(const GemvArgs& args, int64_t n0, int64_t n1);

void gemv_portable(const GemvArgs& args, int64_t n0, int64_t n1);
// The AVX-512 kernel (call only when the CPU has AVX-512 F/BW/DQ/VL and F16C).
GemvKernel gemv_avx512_kernel(WeightFormat format, int m);
// x (k floats) in GemvArgs::x_q16's form: xq holds ceil(k / kKStep) *
// kKStep int16 (64-byte aligned), xs one scale per chunk, 2^(e - 15) for
// the chunk's largest |x| in [2^(e-1), 2^e) (each value off by at most
// 2^(e - 16), or 2^(e - 15) for one that saturates at 32767). False, with
// xq and xs unspecified, when x holds a NaN or an infinity, or a chunk's
// largest |x| is below 2^-112 (its scale would not be a normal float):
// those take the f32 route. AVX-512 (F, BW, DQ) only.
bool nvfp4_quantize_x(const float* x, int64_t k, int16_t* xq, float* xs);

}  // namespace sinew::kernels::gemv_detail
