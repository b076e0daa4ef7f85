#include "sinew/kernels/quantize.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <vector>

#include "kernels/quantize_detail.h"
#include "sinew/core/error.h"
#include "sinew/core/thread_pool.h"
#include "sinew/kernels/formats.h"
#include "sinew/tensor/dtype.h"

namespace sinew::kernels {
namespace detail {
namespace {

constexpr float kFp8ScaleEps = 1e-12f;  // torchao's floor on amax for fp8 scales
constexpr float kE4M3Tiny = 0.015625f;  // finfo(float8_e4m3fn).tiny: NVFP4's smallest block scale
constexpr int64_t kRowChunk = 128;      // rows per task (a 128x128 tile row)

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

float elem_max(Elem e) {
  switch (e) {
    case Elem::kE4M3: return kE4M3Max;
    case Elem::kE5M2: return kE5M2Max;
    case Elem::kE2M1: return kE2M1Max;
  }
  return 0;
}

int elem_emax(Elem e) {
  switch (e) {
    case Elem::kE4M3: return kE4M3Emax;
    case Elem::kE5M2: return kE5M2Emax;
    case Elem::kE2M1: return kE2M1Emax;
  }
  return 0;
}

uint8_t encode_elem(Elem e, float v) {
  switch (e) {
    case Elem::kE4M3: return encode_e4m3fn(v, Overflow::kSaturate);
    case Elem::kE5M2: return encode_e5m2(v, Overflow::kSaturate);
    case Elem::kE2M1: return encode_e2m1(v);
  }
  return 0;
}

// Largest |x| with NaN propagated (as torch.amax does).
struct Amax {
  float v = 0;
  bool nan = false;
  void add(float x) {
    const float a = std::fabs(x);
    if (std::isnan(a)) nan = true;
    else if (a > v) v = a;
  }
  void merge(const Amax& o) {
    nan = nan || o.nan;
    v = std::max(v, o.v);
  }
  float get() const { return nan ? std::numeric_limits<float>::quiet_NaN() : v; }
};

// Where a recipe keeps the scale of (row, column) and how to read and write it.
class ScaleAccess {
 public:
  explicit ScaleAccess(const QuantizedMatrix& q)
      : q_(q), base_(static_cast<uint8_t*>(q.scale.data())), block_(scale_block(q.recipe)) {
    blocks_ = block_.cols ? ceil_div(q.cols(), block_.cols) : 1;
    if (q.scale.dim() >= 1) s0_ = q.scale.strides()[0];
    if (q.scale.dim() >= 2) s1_ = q.scale.strides()[1];
  }

  // Element offset of the scale of (row r, column c).
  int64_t offset(int64_t r, int64_t c) const {
    switch (q_.recipe) {
      case ScaleRecipe::kTensorwise: return 0;
      case ScaleRecipe::kRowwise: return r * s0_;
      case ScaleRecipe::kBlock1x128: return r * s0_ + (c / 128) * s1_;
      case ScaleRecipe::kBlock128x128: return (r / 128) * s0_ + (c / 128) * s1_;
      case ScaleRecipe::kMX:
      case ScaleRecipe::kNVFP4: {
        const int64_t b = c / block_.cols;
        return q_.layout == ScaleLayout::kSwizzled ? swizzled_offset(r, b, blocks_) : r * s0_ + b * s1_;
      }
    }
    return 0;
  }

  // The dequantization multiplier of (r, c), NVFP4's global scale included.
  float get(int64_t r, int64_t c) const {
    const int64_t o = offset(r, c);
    switch (q_.recipe) {
      case ScaleRecipe::kMX: return decode_e8m0(base_[o]);
      case ScaleRecipe::kNVFP4: return decode_e4m3fn(base_[o]) * q_.global_scale;
      default: return reinterpret_cast<const float*>(base_)[o];
    }
  }
  void put_f32(int64_t r, int64_t c, float s) const { reinterpret_cast<float*>(base_)[offset(r, c)] = s; }
  void put_code(int64_t r, int64_t c, uint8_t code) const { base_[offset(r, c)] = code; }

 private:
  const QuantizedMatrix& q_;
  uint8_t* base_;
  ScaleBlock block_;
  int64_t blocks_ = 1;
  int64_t s0_ = 0, s1_ = 0;
};

// fp8 scale pair from an amax: (quantize multiplier, dequantize scale).
struct Fp8Scale {
  float inv, scale;
};
Fp8Scale fp8_scale(float amax, float fmax) {
  const float inv = fmax / std::max(amax, kFp8ScaleEps);  // NaN stays NaN
  return {inv, 1.0f / inv};
}

uint8_t* data_row(const QuantizedMatrix& q, int64_t r) {
  return static_cast<uint8_t*>(q.data.data()) + r * q.data.strides()[0];
}

// Writes elements [c0, c1) of row r from already scaled values.
void encode_span(const QuantizedMatrix& q, Elem e, int64_t r, int64_t c0, int64_t c1, const float* scaled) {
  uint8_t* row = data_row(q, r);
  if (e != Elem::kE2M1) {
    for (int64_t c = c0; c < c1; ++c) row[c] = encode_elem(e, scaled[c - c0]);
    return;
  }
  // Spans start on even columns (blocks are even), so pairs never straddle.
  for (int64_t c = c0; c < c1; c += 2) {
    const uint8_t lo = encode_e2m1(scaled[c - c0]);
    const uint8_t hi = c + 1 < c1 ? encode_e2m1(scaled[c + 1 - c0]) : 0;
    row[c / 2] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

float pow2(int e) { return std::ldexp(1.0f, e); }

void quantize_chunk(const TensorView& x, const QuantizedMatrix& q, Elem e, const ScaleAccess& sa, int64_t r0,
                    int64_t r1, float tensor_inv) {
  const int64_t cols = q.cols();
  std::vector<float> row(static_cast<size_t>(cols)), scaled(static_cast<size_t>(cols));
  const float fmax = elem_max(e);
  switch (q.recipe) {
    case ScaleRecipe::kTensorwise:
      for (int64_t r = r0; r < r1; ++r) {
        load_row(x, r, 0, cols, row.data());
        for (int64_t c = 0; c < cols; ++c) scaled[c] = row[c] * tensor_inv;
        encode_span(q, e, r, 0, cols, scaled.data());
      }
      return;
    case ScaleRecipe::kRowwise:
    case ScaleRecipe::kBlock1x128:
    case ScaleRecipe::kMX:
    case ScaleRecipe::kNVFP4: {
      const int64_t bc = q.recipe == ScaleRecipe::kRowwise ? std::max<int64_t>(cols, 1) : scale_block(q.recipe).cols;
      for (int64_t r = r0; r < r1; ++r) {
        load_row(x, r, 0, cols, row.data());
        for (int64_t c0 = 0; c0 < cols; c0 += bc) {
          const int64_t c1 = std::min(cols, c0 + bc);
          Amax am;
          for (int64_t c = c0; c < c1; ++c) am.add(row[c]);
          const float amax = am.get();
          if (q.recipe == ScaleRecipe::kMX) {
            uint8_t code = kE8M0NaN;
            int shift = 0;
            if (!std::isnan(amax)) {
              // floor(log2(amax)) from the exponent field (f32 subnormals
              // count as 2^-127, torchao's FLOOR mode).
              const int e_amax = static_cast<int>((detail::f32_bits(amax) >> 23) & 0xff) - 127;
              const int unbiased = std::clamp(e_amax - elem_emax(e), -kE8M0Bias, kE8M0Bias);
              code = static_cast<uint8_t>(unbiased + kE8M0Bias);
              shift = -unbiased;
            }
            sa.put_code(r, c0, code);
            const float mul = code == kE8M0NaN ? std::numeric_limits<float>::quiet_NaN() : pow2(shift);
            for (int64_t c = c0; c < c1; ++c) scaled[c - c0] = row[c] * mul;
          } else if (q.recipe == ScaleRecipe::kNVFP4) {
            const float block_scale = amax / kE2M1Max / q.global_scale;
            const uint8_t code = encode_e4m3fn(std::clamp(block_scale, kE4M3Tiny, kE4M3Max));
            sa.put_code(r, c0, std::isnan(block_scale) ? uint8_t{0x7f} : code);
            const float total = q.global_scale * decode_e4m3fn(code);
            for (int64_t c = c0; c < c1; ++c)
              scaled[c - c0] = std::isnan(block_scale) ? 0.0f : row[c] / total;
          } else {
            const Fp8Scale s = fp8_scale(amax, fmax);
            sa.put_f32(r, c0, s.scale);
            for (int64_t c = c0; c < c1; ++c) scaled[c - c0] = row[c] * s.inv;
          }
          encode_span(q, e, r, c0, c1, scaled.data());
        }
      }
      return;
    }
    case ScaleRecipe::kBlock128x128: {
      const int64_t blocks = ceil_div(cols, 128);
      std::vector<Amax> am(static_cast<size_t>(blocks));
      for (int64_t r = r0; r < r1; ++r) {
        load_row(x, r, 0, cols, row.data());
        for (int64_t c = 0; c < cols; ++c) am[c / 128].add(row[c]);
      }
      std::vector<float> inv(static_cast<size_t>(blocks));
      for (int64_t b = 0; b < blocks; ++b) {
        const Fp8Scale s = fp8_scale(am[b].get(), fmax);
        inv[b] = s.inv;
        sa.put_f32(r0, b * 128, s.scale);
      }
      for (int64_t r = r0; r < r1; ++r) {
        load_row(x, r, 0, cols, row.data());
        for (int64_t c = 0; c < cols; ++c) scaled[c] = row[c] * inv[c / 128];
        encode_span(q, e, r, 0, cols, scaled.data());
      }
      return;
    }
  }
}

}  // namespace

Elem element_format(const QuantizedMatrix& q, const std::string& what) {
  switch (q.data.dtype()) {
    case DType::kF8E4M3FN: return Elem::kE4M3;
    case DType::kF8E5M2: return Elem::kE5M2;
    case DType::kU8:
      if (q.recipe == ScaleRecipe::kMX || q.recipe == ScaleRecipe::kNVFP4) return Elem::kE2M1;
      break;
    default: break;
  }
  throw InvalidArgument::make(what + ".data", q.data.to_string(),
                              fmt::format("float8_e4m3fn or float8_e5m2 elements{} for {} scales",
                                          q.recipe == ScaleRecipe::kMX ? ", or uint8 e2m1 pairs (MXFP4)" : "",
                                          scale_recipe_name(q.recipe)));
}

const char* elem_name(Elem e) {
  switch (e) {
    case Elem::kE4M3: return "float8_e4m3fn";
    case Elem::kE5M2: return "float8_e5m2";
    case Elem::kE2M1: return "float4_e2m1fn_x2 (uint8)";
  }
  return "?";
}

void check_quantized(const QuantizedMatrix& q, const std::string& what) {
  if (q.recipe == ScaleRecipe::kNVFP4 && q.data.dtype() != DType::kU8)
    throw InvalidArgument::make(what + ".data", q.data.to_string(), "uint8 e2m1 pairs [rows, cols / 2] for NVFP4");
  element_format(q, what);  // throws for a dtype the recipe does not take
  if (q.data.dim() != 2)
    throw InvalidArgument::make(what + ".data", q.data.to_string(), "a 2-D [rows, cols] view");
  if (q.data.shape()[1] > 1 && q.data.strides()[1] != 1)
    throw InvalidArgument::make(what + ".data", q.data.to_string(), "unit stride along the columns");
  if (q.recipe == ScaleRecipe::kNVFP4 && !std::isfinite(q.global_scale))
    throw InvalidArgument::make(what + ".global_scale", fmt::format("{}", q.global_scale), "a finite f32");
  const ScaleSpec spec = scale_spec(q.recipe, q.layout, q.rows(), q.cols());
  const std::string expected = fmt::format("{} {} ({} scales, {} layout, of a [{}, {}] matrix)", dtype_name(spec.dtype),
                                           spec.shape, scale_recipe_name(q.recipe),
                                           q.layout == ScaleLayout::kSwizzled ? "swizzled" : "row-major",
                                           q.rows(), q.cols());
  if (q.scale.dtype() != spec.dtype) throw InvalidArgument::make(what + ".scale", q.scale.to_string(), expected);
  if (q.recipe == ScaleRecipe::kTensorwise) {
    if (q.scale.numel() != 1) throw InvalidArgument::make(what + ".scale", q.scale.to_string(), expected);
    return;
  }
  if (q.layout == ScaleLayout::kSwizzled && (q.recipe == ScaleRecipe::kMX || q.recipe == ScaleRecipe::kNVFP4)) {
    if (q.scale.numel() != spec.numel() || !q.scale.is_contiguous())
      throw InvalidArgument::make(what + ".scale", q.scale.to_string(), "contiguous, " + expected);
    return;
  }
  const auto shape = q.scale.shape();
  if (!std::equal(shape.begin(), shape.end(), spec.shape.begin(), spec.shape.end()))
    throw InvalidArgument::make(what + ".scale", q.scale.to_string(), expected);
}

void load_row(const TensorView& x, int64_t r, int64_t c0, int64_t c1, float* out) {
  const auto st = x.strides();
  if (x.dtype() == DType::kF32) {
    const float* p = x.data_as<float>() + r * st[0];
    for (int64_t c = c0; c < c1; ++c) out[c - c0] = p[c * st[1]];
  } else {
    const uint16_t* p = x.data_as<uint16_t>() + r * st[0];
    for (int64_t c = c0; c < c1; ++c) out[c - c0] = bf16_to_f32(p[c * st[1]]);
  }
}

void store_row(const TensorView& y, int64_t r, int64_t c0, int64_t c1, const float* v) {
  const auto st = y.strides();
  if (y.dtype() == DType::kF32) {
    float* p = y.data_as<float>() + r * st[0];
    for (int64_t c = c0; c < c1; ++c) p[c * st[1]] = v[c - c0];
  } else {
    uint16_t* p = y.data_as<uint16_t>() + r * st[0];
    for (int64_t c = c0; c < c1; ++c) p[c * st[1]] = f32_to_bf16(v[c - c0]);
  }
}

void dequantize_row(const QuantizedMatrix& q, int64_t r, int64_t c0, int64_t c1, float* out) {
  const ScaleAccess sa(q);
  const uint8_t* row = data_row(q, r);
  const ScaleBlock blk = scale_block(q.recipe);
  const int64_t bc = blk.cols ? blk.cols : std::max<int64_t>(q.cols(), 1);
  const DType dt = q.data.dtype();
  for (int64_t b0 = c0; b0 < c1;) {
    const int64_t b1 = std::min(c1, (b0 / bc + 1) * bc);
    const float s = sa.get(r, b0);
    if (dt == DType::kU8) {
      for (int64_t c = b0; c < b1; ++c) out[c - c0] = e2m1_at(row, c) * s;
    } else if (dt == DType::kF8E4M3FN) {
      for (int64_t c = b0; c < b1; ++c) out[c - c0] = decode_e4m3fn(row[c]) * s;
    } else {
      for (int64_t c = b0; c < b1; ++c) out[c - c0] = decode_e5m2(row[c]) * s;
    }
    b0 = b1;
  }
}

}  // namespace detail

using detail::ceil_div;
using detail::round_up;

const char* scale_recipe_name(ScaleRecipe recipe) {
  switch (recipe) {
    case ScaleRecipe::kTensorwise: return "tensorwise";
    case ScaleRecipe::kRowwise: return "rowwise";
    case ScaleRecipe::kBlock1x128: return "blockwise 1x128";
    case ScaleRecipe::kBlock128x128: return "blockwise 128x128";
    case ScaleRecipe::kMX: return "MX (1x32, e8m0)";
    case ScaleRecipe::kNVFP4: return "NVFP4 (1x16, e4m3)";
  }
  return "?";
}

int64_t ScaleSpec::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

ScaleBlock scale_block(ScaleRecipe recipe) {
  switch (recipe) {
    case ScaleRecipe::kTensorwise: return {0, 0};
    case ScaleRecipe::kRowwise: return {1, 0};
    case ScaleRecipe::kBlock1x128: return {1, 128};
    case ScaleRecipe::kBlock128x128: return {128, 128};
    case ScaleRecipe::kMX: return {1, 32};
    case ScaleRecipe::kNVFP4: return {1, 16};
  }
  return {};
}

ScaleSpec scale_spec(ScaleRecipe recipe, ScaleLayout layout, int64_t rows, int64_t cols) {
  switch (recipe) {
    case ScaleRecipe::kTensorwise: return {DType::kF32, {1}, {1}};
    case ScaleRecipe::kRowwise: return {DType::kF32, {rows, 1}, {1, 1}};
    case ScaleRecipe::kBlock1x128: return {DType::kF32, {rows, ceil_div(cols, 128)}, {1, std::max<int64_t>(rows, 1)}};
    case ScaleRecipe::kBlock128x128: {
      const int64_t b = ceil_div(cols, 128);
      return {DType::kF32, {ceil_div(rows, 128), b}, {b, 1}};
    }
    case ScaleRecipe::kMX:
    case ScaleRecipe::kNVFP4: {
      const DType dt = recipe == ScaleRecipe::kMX ? DType::kU8 : DType::kF8E4M3FN;
      const int64_t blocks = ceil_div(cols, recipe == ScaleRecipe::kMX ? 32 : 16);
      if (layout == ScaleLayout::kSwizzled) return {dt, {round_up(rows, 128) * round_up(blocks, 4)}, {1}};
      return {dt, {rows, blocks}, {blocks, 1}};
    }
  }
  return {};
}

float nvfp4_global_scale(const TensorView& x) {
  if (x.dim() != 2 || (x.dtype() != DType::kF32 && x.dtype() != DType::kBF16))
    throw InvalidArgument::make("x", x.to_string(), "a float32 or bfloat16 [rows, cols] matrix");
  detail::Amax am;
  std::vector<float> row(static_cast<size_t>(x.shape()[1]));
  for (int64_t r = 0; r < x.shape()[0]; ++r) {
    detail::load_row(x, r, 0, x.shape()[1], row.data());
    for (float v : row) am.add(v);
  }
  const float amax = am.get();
  return amax == 0 ? 1.0f : amax / (kE4M3Max * kE2M1Max);
}

void quantize(const TensorView& x, const QuantizedMatrix& q, int threads) {
  detail::check_quantized(q, "q");
  const detail::Elem e = detail::element_format(q, "q");
  const int64_t rows = q.rows(), cols = q.cols();
  if (x.dim() != 2 || (x.dtype() != DType::kF32 && x.dtype() != DType::kBF16) || x.shape()[0] != rows ||
      x.shape()[1] != cols)
    throw InvalidArgument::make("x", x.to_string(),
                                fmt::format("float32 or bfloat16 [{}, {}] to match q.data", rows, cols));
  if (e == detail::Elem::kE2M1 && cols % 2 != 0)
    throw InvalidArgument::make("x", x.to_string(), "an even number of columns for e2m1 pairs");
  if (q.recipe == ScaleRecipe::kNVFP4 && !(q.global_scale > 0))
    throw InvalidArgument::make("q.global_scale", fmt::format("{}", q.global_scale), "a positive finite f32");
  if (q.layout == ScaleLayout::kSwizzled && (q.recipe == ScaleRecipe::kMX || q.recipe == ScaleRecipe::kNVFP4))
    std::fill_n(static_cast<uint8_t*>(q.scale.data()), q.scale.numel(), uint8_t{0});  // the padding

  const detail::ScaleAccess sa(q);
  const int64_t chunks = ceil_div(rows, detail::kRowChunk);
  auto& pool = ThreadPool::global();
  float tensor_inv = 0;
  if (q.recipe == ScaleRecipe::kTensorwise) {
    std::mutex mu;
    detail::Amax total;
    pool.parallel_for(chunks, threads, [&](int64_t t, int) {
      detail::Amax am;
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = t * detail::kRowChunk; r < std::min(rows, (t + 1) * detail::kRowChunk); ++r) {
        detail::load_row(x, r, 0, cols, row.data());
        for (float v : row) am.add(v);
      }
      std::lock_guard<std::mutex> g(mu);
      total.merge(am);
    });
    const detail::Fp8Scale s = detail::fp8_scale(total.get(), detail::elem_max(e));
    tensor_inv = s.inv;
    *q.scale.data_as<float>() = s.scale;
  }
  pool.parallel_for(chunks, threads, [&](int64_t t, int) {
    detail::quantize_chunk(x, q, e, sa, t * detail::kRowChunk, std::min(rows, (t + 1) * detail::kRowChunk),
                           tensor_inv);
  });
}

void dequantize(const QuantizedMatrix& q, const TensorView& out, int threads) {
  detail::check_quantized(q, "q");
  const int64_t rows = q.rows(), cols = q.cols();
  if (out.dim() != 2 || (out.dtype() != DType::kF32 && out.dtype() != DType::kBF16) || out.shape()[0] != rows ||
      out.shape()[1] != cols)
    throw InvalidArgument::make("out", out.to_string(),
                                fmt::format("float32 or bfloat16 [{}, {}] to match q.data", rows, cols));
  ThreadPool::global().parallel_for(ceil_div(rows, detail::kRowChunk), threads, [&](int64_t t, int) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = t * detail::kRowChunk; r < std::min(rows, (t + 1) * detail::kRowChunk); ++r) {
      detail::dequantize_row(q, r, 0, cols, row.data());
      detail::store_row(out, r, 0, cols, row.data());
    }
  });
}

}  // namespace sinew::kernels
