// Row-level pieces of quantize.cc that scaled_mm and gemv reuse.
#pragma once

#include <cstdint>
#include <string>

#include "sinew/kernels/quantize.h"

namespace sinew::kernels::detail {

enum class Elem : uint8_t { kE4M3, kE5M2, kE2M1 };

// The element format of q.data (throws InvalidArgument for other dtypes).
Elem element_format(const QuantizedMatrix& q, const std::string& what);
const char* elem_name(Elem e);

// Checks q's data and scale views against its recipe and layout; `what`
// names the matrix in messages.
void check_quantized(const QuantizedMatrix& q, const std::string& what);

// Flat index of (row, block) in the swizzled scale layout of a matrix with
// `blocks` scale columns.
inline int64_t swizzled_offset(int64_t row, int64_t block, int64_t blocks) {
  const int64_t col_tiles = (blocks + 3) / 4;
  return ((row / 128) * col_tiles + block / 4) * 512 + (row % 32) * 16 + ((row % 128) / 32) * 4 + block % 4;
}

// Reads columns [c0, c1) of row r of a float32/bfloat16 matrix as f32.
void load_row(const TensorView& x, int64_t r, int64_t c0, int64_t c1, float* out);
// Writes f32 values into columns [c0, c1) of row r of a float32/bfloat16 matrix.
void store_row(const TensorView& y, int64_t r, int64_t c0, int64_t c1, const float* v);

// Dequantizes columns [c0, c1) of row r of q into out (f32, scales applied).
void dequantize_row(const QuantizedMatrix& q, int64_t r, int64_t c0, int64_t c1, float* out);

}  // namespace sinew::kernels::detail
