// Element types that collectives and kernels take, with conversions for the
// narrow float formats (computed in float32).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace sinew {

enum class DType : uint8_t {
  kF32,
  kF64,
  kF16,
  kBF16,
  kI8,
  kU8,
  kI32,
  kI64,
  kBool,
  kF8E4M3FN,
  kF8E5M2,
};

inline constexpr DType kAllDTypes[] = {DType::kF32,  DType::kF64, DType::kF16, DType::kBF16,
                                       DType::kI8,   DType::kU8,  DType::kI32, DType::kI64,
                                       DType::kBool, DType::kF8E4M3FN, DType::kF8E5M2};

size_t dtype_size(DType t);
// PyTorch's names: float32, float64, float16, bfloat16, int8, uint8, int32,
// int64, bool, float8_e4m3fn, float8_e5m2.
const char* dtype_name(DType t);
// Accepts PyTorch names and short forms (f32, bf16, fp8_e4m3, ...).
DType parse_dtype(std::string_view name);
bool dtype_is_floating(DType t);
bool dtype_is_integral(DType t);  // including bool

// --- narrow float conversions (round to nearest even; saturating fp8) -------
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t f32_to_bf16(float f);
float e4m3fn_to_f32(uint8_t v);
uint8_t f32_to_e4m3fn(float f);  // saturates to ±448, NaN -> 0x7f
float e5m2_to_f32(uint8_t v);
uint8_t f32_to_e5m2(float f);    // round to nearest even, overflow -> ±inf

}  // namespace sinew
