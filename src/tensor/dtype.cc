#include "sinew/tensor/dtype.h"

#include <fmt/format.h>

#include <cmath>

#include "sinew/core/error.h"

namespace sinew {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF64:
    case DType::kI64: return 8;
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
    case DType::kF8E4M3FN:
    case DType::kF8E5M2: return 1;
  }
  throw InternalError(fmt::format("dtype_size: unknown dtype {}", static_cast<int>(t)));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kF64: return "float64";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kI8: return "int8";
    case DType::kU8: return "uint8";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kBool: return "bool";
    case DType::kF8E4M3FN: return "float8_e4m3fn";
    case DType::kF8E5M2: return "float8_e5m2";
  }
  return "unknown";
}

DType parse_dtype(std::string_view name) {
  struct Alias { const char* name; DType t; };
  static const Alias kAliases[] = {
      {"float32", DType::kF32}, {"f32", DType::kF32}, {"float", DType::kF32}, {"fp32", DType::kF32},
      {"float64", DType::kF64}, {"f64", DType::kF64}, {"double", DType::kF64}, {"fp64", DType::kF64},
      {"float16", DType::kF16}, {"f16", DType::kF16}, {"half", DType::kF16}, {"fp16", DType::kF16},
      {"bfloat16", DType::kBF16}, {"bf16", DType::kBF16},
      {"int8", DType::kI8}, {"i8", DType::kI8}, {"uint8", DType::kU8}, {"u8", DType::kU8},
      {"int32", DType::kI32}, {"i32", DType::kI32}, {"int", DType::kI32},
      {"int64", DType::kI64}, {"i64", DType::kI64}, {"long", DType::kI64},
      {"bool", DType::kBool},
      {"float8_e4m3fn", DType::kF8E4M3FN}, {"fp8_e4m3", DType::kF8E4M3FN}, {"e4m3fn", DType::kF8E4M3FN},
      {"e4m3", DType::kF8E4M3FN},
      {"float8_e5m2", DType::kF8E5M2}, {"fp8_e5m2", DType::kF8E5M2}, {"e5m2", DType::kF8E5M2},
  };
  for (const auto& a : kAliases)
    if (name == a.name) return a.t;
  throw InvalidArgument::make("dtype", fmt::format("'{}'", name),
                              "one of float32, float64, float16, bfloat16, int8, uint8, int32, "
                              "int64, bool, float8_e4m3fn, float8_e5m2");
}

bool dtype_is_floating(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF64:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF8E4M3FN:
    case DType::kF8E5M2: return true;
    default: return false;
  }
}

bool dtype_is_integral(DType t) { return !dtype_is_floating(t); }

namespace {
uint32_t bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
}  // namespace

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  if (exp == 0) {
    if (man == 0) return from_bits(sign);
    float v = std::ldexp(static_cast<float>(man), -24);  // subnormal
    return sign ? -v : v;
  }
  if (exp == 31) return from_bits(sign | 0x7f800000u | (man << 13));
  return from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t f32_to_f16(float f) {
  uint32_t u = bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (absu > 0x7f800000u ? 0x200u : 0));
  if (absu >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (absu < 0x38800000u) {  // subnormal or zero in f16
    float a = from_bits(absu);
    float scaled = a * 16777216.0f;  // 2^24
    uint32_t m = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t mant = absu & 0x7fffffu;
  uint32_t exp = (absu >> 23) - 112;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

uint16_t f32_to_bf16(float f) {
  uint32_t u = bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float e4m3fn_to_f32(uint8_t v) {
  uint32_t sign = v & 0x80u;
  uint32_t exp = (v >> 3) & 0xf;
  uint32_t man = v & 0x7;
  float r;
  if (exp == 15 && man == 7) return std::nanf("");
  if (exp == 0) r = std::ldexp(static_cast<float>(man), -9);
  else r = std::ldexp(1.0f + static_cast<float>(man) / 8.0f, static_cast<int>(exp) - 7);
  return sign ? -r : r;
}

namespace {
// Generic round-to-nearest-even encoder for small float formats.
uint8_t encode_small(float f, int ebits, int mbits, int bias, float max_finite, bool sat,
                     uint8_t nan_code, uint8_t inf_code) {
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f)) return static_cast<uint8_t>(sign | nan_code);
  float a = std::fabs(f);
  if (std::isinf(a)) return static_cast<uint8_t>(sign | (sat ? inf_code : inf_code));
  int min_exp = 1 - bias;  // exponent of smallest normal
  // Quantum at the value's binade (subnormals share min_exp's quantum).
  int e = a > 0 ? std::ilogb(a) : min_exp;
  if (e < min_exp) e = min_exp;
  float quantum = std::ldexp(1.0f, e - mbits);
  float q = std::nearbyint(a / quantum) * quantum;  // nearbyint rounds half to even
  if (q > max_finite) {
    return static_cast<uint8_t>(sign | inf_code);
  }
  if (q == 0) return sign;
  int qe = std::ilogb(q);
  if (qe < min_exp) {  // subnormal
    uint32_t man = static_cast<uint32_t>(q / std::ldexp(1.0f, min_exp - mbits));
    return static_cast<uint8_t>(sign | man);
  }
  uint32_t man = static_cast<uint32_t>((q / std::ldexp(1.0f, qe) - 1.0f) * static_cast<float>(1 << mbits) + 0.5f);
  uint32_t exp = static_cast<uint32_t>(qe + bias);
  (void)ebits;
  return static_cast<uint8_t>(sign | (exp << mbits) | man);
}
}  // namespace

uint8_t f32_to_e4m3fn(float f) {
  // No infinities in e4m3fn: saturate to ±448 (0x7e), NaN is 0x7f.
  if (std::isnan(f)) return 0x7f;
  float c = std::fmin(std::fmax(f, -448.0f), 448.0f);
  return encode_small(c, 4, 3, 7, 448.0f, true, 0x7f, 0x7e);
}

float e5m2_to_f32(uint8_t v) {
  uint16_t h = static_cast<uint16_t>(v) << 8;
  return f16_to_f32(h);
}

uint8_t f32_to_e5m2(float f) {
  if (std::isnan(f)) return 0x7f;
  return encode_small(f, 5, 2, 15, 57344.0f, false, 0x7f, 0x7c);
}

}  // namespace sinew
