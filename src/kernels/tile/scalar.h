// Scalar element access for kernels: reading any float dtype, and fast
// stores to the narrow formats, bit-identical to tensor/dtype.h's
// conversions (round to nearest even; e4m3fn saturates to +-448, e5m2
// overflows to inf, NaN -> 0x7f).
//
// `static` so that every ISA's sources compile their own copy.
#pragma once

#include <cstdint>
#include <cstring>

#include "sinew/kernels/gemm_problem.h"
#include "sinew/tensor/dtype.h"

namespace sinew::kernels::tile {

static inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

static inline float round_even(float x) {  // 0 <= x < 2^22
  return (x + 12582912.0f) - 12582912.0f;
}

static inline uint8_t fast_f32_to_e4m3fn(float f) {
  const uint32_t u = float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;
  if (a >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7e);  // >= 448 (and inf)
  if (a < 0x3c800000u) {                                            // below 2^-6: subnormal
    float m;
    std::memcpy(&m, &a, 4);
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(round_even(m * 512.0f)));
  }
  const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
  const uint32_t e = (r >> 23) - 120u;
  return static_cast<uint8_t>(sign | (e << 3) | ((r >> 20) & 7u));
}

static inline uint8_t fast_f32_to_e5m2(float f) {
  const uint32_t u = float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;
  if (a >= 0x47700000u) return static_cast<uint8_t>(sign | 0x7c);  // >= 61440 rounds to inf
  if (a < 0x38800000u) {                                            // below 2^-14: subnormal
    float m;
    std::memcpy(&m, &a, 4);
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(round_even(m * 65536.0f)));
  }
  const uint32_t r = a + 0xfffffu + ((a >> 21) & 1u);
  const uint32_t e = (r >> 23) - 112u;
  return static_cast<uint8_t>(sign | (e << 2) | ((r >> 21) & 3u));
}

static inline double load_scalar(const void* p, DType t) {
  switch (t) {
    case DType::kF32: return *static_cast<const float*>(p);
    case DType::kF64: return *static_cast<const double*>(p);
    case DType::kBF16: return bf16_to_f32(*static_cast<const uint16_t*>(p));
    case DType::kF16: return f16_to_f32(*static_cast<const uint16_t*>(p));
    case DType::kF8E4M3FN: return e4m3fn_to_f32(*static_cast<const uint8_t*>(p));
    case DType::kF8E5M2: return e5m2_to_f32(*static_cast<const uint8_t*>(p));
    default: return 0.0;
  }
}

static inline void store_scalar(void* p, DType t, double v) {
  switch (t) {
    case DType::kF32: *static_cast<float*>(p) = static_cast<float>(v); break;
    case DType::kF64: *static_cast<double*>(p) = v; break;
    case DType::kBF16: *static_cast<uint16_t*>(p) = f32_to_bf16(static_cast<float>(v)); break;
    case DType::kF16: *static_cast<uint16_t*>(p) = f32_to_f16(static_cast<float>(v)); break;
    case DType::kF8E4M3FN: *static_cast<uint8_t*>(p) = fast_f32_to_e4m3fn(static_cast<float>(v)); break;
    case DType::kF8E5M2: *static_cast<uint8_t*>(p) = fast_f32_to_e5m2(static_cast<float>(v)); break;
    default: break;
  }
}

// Address of element (i, j) of a matrix whose batch is already applied.
static inline char* elem_ptr(const MatrixRef& r, int64_t i, int64_t j) {
  return static_cast<char*>(r.data) +
         static_cast<ptrdiff_t>((i * r.rs + j * r.cs) * static_cast<int64_t>(dtype_size(r.dtype)));
}

}  // namespace sinew::kernels::tile
