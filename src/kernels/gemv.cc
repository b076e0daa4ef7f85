#include "sinew/kernels/gemv.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/gemv_kernels.h"
#include "kernels/quantize_detail.h"
#include "sinew/core/error.h"
#include "sinew/core/thread_pool.h"
#include "sinew/kernels/cpu_features.h"

namespace sinew::kernels {
namespace {

using gemv_detail::GemvArgs;
using gemv_detail::GemvKernel;
using gemv_detail::kKPad;
using gemv_detail::kKStep;
using gemv_detail::kMaxRows;
using gemv_detail::WeightFormat;

// Weight bytes below which one more thread costs more than it saves.
constexpr int64_t kBytesPerThread = 256 << 10;
// Tasks per thread, so a thread slowed by a neighbour does not hold up the call.
constexpr int64_t kTasksPerThread = 4;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

WeightFormat weight_format(const TensorView& w) {
  switch (w.dtype()) {
    case DType::kF32: return WeightFormat::kF32;
    case DType::kBF16: return WeightFormat::kBF16;
    case DType::kF8E4M3FN: return WeightFormat::kE4M3;
    case DType::kF8E5M2: return WeightFormat::kE5M2;
    case DType::kU8: return WeightFormat::kNVFP4;
    default:
      throw InvalidArgument::make("weight.w", w.to_string(),
                                  "float32, bfloat16, float8_e4m3fn, float8_e5m2 or uint8 (NVFP4 e2m1 pairs) weights");
  }
}

bool is_fp8(WeightFormat f) { return f == WeightFormat::kE4M3 || f == WeightFormat::kE5M2; }

void check_matrix(const TensorView& t, const char* name, int64_t rows, int64_t cols) {
  if (t.dim() != 2 || (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16) || t.shape()[0] != rows ||
      t.shape()[1] != cols)
    throw InvalidArgument::make(name, t.to_string(), fmt::format("float32 or bfloat16 [{}, {}]", rows, cols));
}

// Per-row (or per-tensor) multiplier applied to the kernel's dot products.
struct OutputScale {
  const TensorView* row = nullptr;  // f32 with N elements
  float tensor = 1.0f;
  float at(int64_t n) const {
    if (!row) return tensor;
    float v;
    std::memcpy(&v, static_cast<const char*>(row->data()) + row->byte_offset_of(n), 4);
    return v * tensor;
  }
};

// What the weight's scales contribute: the multiplier of the kernel's dot
// products, and NVFP4's block scales, which the kernel applies itself.
struct WeightScales {
  OutputScale out;
  const uint8_t* block = nullptr;
  int64_t ld_block = 0;
};

WeightScales check_scales(const GemvWeight& weight, WeightFormat format, int64_t n, int64_t k) {
  WeightScales r;
  if (format == WeightFormat::kNVFP4) {
    const int64_t blocks = ceil_div(k, 16);
    const TensorView* s = weight.scale ? &*weight.scale : nullptr;
    if (!s || s->dtype() != DType::kF8E4M3FN || s->dim() != 2 || s->shape()[0] != n || s->shape()[1] != blocks ||
        (blocks > 1 && s->strides()[1] != 1))
      throw InvalidArgument::make("weight.scale", s ? s->to_string() : std::string("none"),
                                  fmt::format("float8_e4m3fn [{}, {}] NVFP4 block scales, unit stride along K", n,
                                              blocks));
    if (!std::isfinite(weight.global_scale))
      throw InvalidArgument::make("weight.global_scale", fmt::format("{}", weight.global_scale), "a finite f32");
    r.block = s->data_as<const uint8_t>();
    r.ld_block = s->strides()[0];
    r.out.tensor = weight.global_scale;
  } else if (is_fp8(format)) {
    if (weight.scale) {
      const TensorView& s = *weight.scale;
      if (s.dtype() != DType::kF32 || (s.numel() != n && s.numel() != 1))
        throw InvalidArgument::make("weight.scale", s.to_string(),
                                    fmt::format("float32 with {} elements (per row) or 1 (per tensor)", n));
      if (s.numel() == 1 && n != 1) r.out.tensor = *s.data_as<const float>();
      else r.out.row = &s;
    }
  } else if (weight.scale) {
    throw InvalidArgument::make("weight.scale", weight.scale->to_string(),
                                fmt::format("no scale for {} weights", dtype_name(weight.w.dtype())));
  }
  return r;
}

bool pick_avx512(const GemvOptions& o) {
  const bool avx512 = gemv_has_avx512();
  if (o.isa == GemvIsa::kAvx512 && !avx512)
    throw InvalidArgument::make("options.isa", "kAvx512",
                                "kAuto or kPortable: this CPU lacks AVX-512 F/BW/DQ/VL or F16C");
  return avx512 && o.isa != GemvIsa::kPortable;
}

// x in the layouts the kernels read (gemv_kernels.h), in per-thread
// buffers that persist across calls. The AVX-512 NVFP4 kernels read x
// reordered: transposed per 128-element chunk for a pass over one row, in
// nibble order for more; the e4m3 one for one row transposed per 64-element
// chunk.
class StagedX {
 public:
  StagedX(WeightFormat format, int64_t k, bool avx512, bool fixed_point_x)
      : k_(k),
        nvfp4_(format == WeightFormat::kNVFP4),
        transpose_(avx512 && (nvfp4_ || format == WeightFormat::kE4M3)),
        nibble_order_(avx512 && nvfp4_),
        q16_(transpose_ && nvfp4_ && fixed_point_x && cpu_features().avx512_vnni),
        ldx_(ceil_div(std::max<int64_t>(k, 1), kKPad) * kKPad),
        ldx_t_(ceil_div(std::max<int64_t>(k, 1), kKStep) * kKStep) {
    b_.x.assign(static_cast<size_t>(kMaxRows * ldx_), 0.0f);
    if (transpose_) {
      // 64-byte aligned: the one-row kernel's x loads would otherwise each
      // cross a cache line (about a tenth slower).
      b_.xt.resize(static_cast<size_t>(ldx_t_ + 16));
      xt_ = b_.xt.data() + (64 - reinterpret_cast<uintptr_t>(b_.xt.data()) % 64) % 64 / sizeof(float);
    }
    if (nibble_order_) b_.xn.resize(static_cast<size_t>(kMaxRows * ldx_));
    if (q16_) {
      b_.xq.resize(static_cast<size_t>(ldx_t_ + 32));
      xq_ = b_.xq.data() + (64 - reinterpret_cast<uintptr_t>(b_.xq.data()) % 64) % 64 / sizeof(int16_t);
      b_.xs.resize(static_cast<size_t>(ldx_t_ / kKStep));
    }
  }

  // Rows [m0, m0 + mb) of x, staged; sets the x fields of args.
  void load(const TensorView& x, int64_t m0, int mb, GemvArgs& args) {
    for (int i = 0; i < mb; ++i) detail::load_row(x, m0 + i, 0, k_, b_.x.data() + i * ldx_);
    const bool fixed_point = q16_ && mb == 1 && gemv_detail::nvfp4_quantize_x(b_.x.data(), k_, xq_, b_.xs.data());
    if (fixed_point) {
      // x_q16 holds x already (nvfp4_quantize_x); the kernel reads nothing else of it.
    } else if (transpose_ && mb == 1 && nvfp4_) {
      transpose_nvfp4();
    } else if (transpose_ && mb == 1) {
      transpose_e4m3();
    } else if (nibble_order_) {
      to_nibble_order(mb);
    }
    args.x = b_.x.data();
    args.ldx = ldx_;
    args.x_nibble_order = b_.xn.data();
    args.x_transposed = xt_;
    args.x_q16 = fixed_point ? xq_ : nullptr;
    args.x_q16_scale = b_.xs.data();
  }

 private:
  // Each 128-element chunk as a 16 x 8 matrix, transposed: element 8l + j at 16j + l.
  void transpose_nvfp4() {
    const float* src = b_.x.data();
    float* dst = xt_;
    std::fill(dst + k_ / 128 * 128, dst + ldx_t_, 0.0f);
    for (int64_t c0 = 0; c0 < k_; c0 += 128) {
      if (k_ - c0 >= 128) {
        for (int l = 0; l < 16; ++l)
          for (int j = 0; j < 8; ++j) dst[c0 + 16 * j + l] = src[c0 + 8 * l + j];
      } else {
        for (int64_t p = 0; p < k_ - c0; ++p) dst[c0 + p % 8 * 16 + p / 8] = src[c0 + p];
      }
    }
  }

  // Each full 64-element chunk as a 16 x 4 matrix, transposed: element
  // 4l + j at 16j + l. The rest of the row is read from x as it is.
  void transpose_e4m3() {
    const float* src = b_.x.data();
    for (int64_t c0 = 0; c0 + 64 <= k_; c0 += 64)
      for (int l = 0; l < 16; ++l)
        for (int j = 0; j < 4; ++j) xt_[c0 + 16 * j + l] = src[c0 + 4 * l + j];
  }

  // Within each 16-block: positions 2j, 2j+1 hold elements j, j+8.
  void to_nibble_order(int mb) {
    for (int i = 0; i < mb; ++i)
      for (int64_t b = 0; b < ldx_; b += 16)
        for (int j = 0; j < 8; ++j) {
          b_.xn[i * ldx_ + b + 2 * j] = b_.x[i * ldx_ + b + j];
          b_.xn[i * ldx_ + b + 2 * j + 1] = b_.x[i * ldx_ + b + j + 8];
        }
  }

  struct Buffers {
    std::vector<float> x, xt, xn, xs;
    std::vector<int16_t> xq;
  };
  static Buffers& thread_buffers() {
    thread_local Buffers b;
    return b;
  }

  Buffers& b_ = thread_buffers();
  const int64_t k_;
  const bool nvfp4_, transpose_, nibble_order_;
  const bool q16_;  // NVFP4 for one row in 16-bit fixed point (GemvOptions::nvfp4_fixed_point_x)
  const int64_t ldx_, ldx_t_;
  float* xt_ = nullptr;
  int16_t* xq_ = nullptr;
};

// The weight rows split into tasks of whole 4-row groups.
struct RowSplit {
  int threads = 1;
  int64_t rows_per_task = 4;
};

RowSplit split_rows(int64_t n, int64_t row_bytes, int requested_threads) {
  const int requested = requested_threads > 0 ? requested_threads : ThreadPool::default_threads();
  const int64_t useful = std::max<int64_t>(1, n * row_bytes / kBytesPerThread);
  RowSplit r;
  r.threads = static_cast<int>(std::min<int64_t>(requested, useful));
  const int64_t tasks = r.threads == 1 ? 1 : std::min<int64_t>(n, r.threads * kTasksPerThread);
  r.rows_per_task = ceil_div(ceil_div(n, tasks), 4) * 4;
  return r;
}

// The kernel over every weight row for the rows of x in args, then the output scale.
void run_rows(GemvKernel kernel, const GemvArgs& args, const OutputScale& out_scale, int64_t n, const RowSplit& split) {
  ThreadPool::global().parallel_for(ceil_div(n, split.rows_per_task), split.threads, [&](int64_t t, int) {
    const int64_t n0 = t * split.rows_per_task, n1 = std::min(n, n0 + split.rows_per_task);
    if (args.k == 0) {
      for (int i = 0; i < args.m; ++i) std::fill(args.y + i * args.ldy + n0, args.y + i * args.ldy + n1, 0.0f);
      return;
    }
    kernel(args, n0, n1);
    if (out_scale.row || out_scale.tensor != 1.0f)
      for (int64_t j = n0; j < n1; ++j) {
        const float s = out_scale.at(j);
        for (int i = 0; i < args.m; ++i) args.y[i * args.ldy + j] *= s;
      }
  });
}

}  // namespace

bool gemv_has_avx512() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                         __builtin_cpu_supports("f16c");
  return ok;
}

GemvWeight GemvWeight::from(const QuantizedMatrix& q) {
  detail::check_quantized(q, "q");
  const bool fp8 = q.data.dtype() == DType::kF8E4M3FN || q.data.dtype() == DType::kF8E5M2;
  if (fp8 && (q.recipe == ScaleRecipe::kTensorwise || q.recipe == ScaleRecipe::kRowwise))
    return {q.data, q.scale, 1.0f};
  if (q.recipe == ScaleRecipe::kNVFP4 && q.layout == ScaleLayout::kRowMajor) return {q.data, q.scale, q.global_scale};
  throw InvalidArgument::make("q", fmt::format("{} scales, {} layout", scale_recipe_name(q.recipe),
                                               q.layout == ScaleLayout::kSwizzled ? "swizzled" : "row-major"),
                              "fp8 with tensorwise or rowwise scales, or NVFP4 with row-major scales");
}

void gemv(const TensorView& x, const GemvWeight& weight, const TensorView& y, const GemvOptions& o) {
  const TensorView& w = weight.w;
  const WeightFormat format = weight_format(w);
  if (w.dim() != 2) throw InvalidArgument::make("weight.w", w.to_string(), "a 2-D [N, K] weight");
  const bool nvfp4 = format == WeightFormat::kNVFP4;
  const int64_t n = w.shape()[0], k = nvfp4 ? 2 * w.shape()[1] : w.shape()[1];
  if (w.shape()[1] > 1 && w.strides()[1] != 1)
    throw InvalidArgument::make("weight.w", w.to_string(), "unit stride along K (rows may be strided)");
  if (x.dim() != 2)
    throw InvalidArgument::make("x", x.to_string(), fmt::format("float32 or bfloat16 [M, {}]", k));
  const int64_t m = x.shape()[0];
  check_matrix(x, "x", m, k);
  check_matrix(y, "y", m, n);
  const WeightScales scales = check_scales(weight, format, n, k);
  const bool avx512 = pick_avx512(o);
  if (m == 0 || n == 0) return;

  StagedX staged(format, k, avx512, o.nvfp4_fixed_point_x);
  const bool direct = y.dtype() == DType::kF32 && (n == 1 || y.strides()[1] == 1);
  thread_local std::vector<float> t_y;
  if (!direct) t_y.resize(static_cast<size_t>(kMaxRows * n));
  const int64_t row_bytes = nvfp4 ? w.shape()[1] : k * static_cast<int64_t>(w.element_size());
  const RowSplit split = split_rows(n, row_bytes, o.threads);

  for (int64_t m0 = 0; m0 < m; m0 += kMaxRows) {
    const int mb = static_cast<int>(std::min<int64_t>(kMaxRows, m - m0));
    GemvArgs args;
    args.format = format;
    args.m = mb;
    args.k = k;
    staged.load(x, m0, mb, args);
    args.w = w.data_as<const uint8_t>();
    args.ldw = w.strides()[0] * static_cast<int64_t>(w.element_size());
    args.block_scale = scales.block;
    args.ld_scale = scales.ld_block;
    if (direct) {
      args.y = y.data_as<float>() + m0 * y.strides()[0];
      args.ldy = y.strides()[0];
    } else {
      args.y = t_y.data();
      args.ldy = n;
    }
    const GemvKernel kernel = avx512 ? gemv_detail::gemv_avx512_kernel(format, mb) : gemv_detail::gemv_portable;
    run_rows(kernel, args, scales.out, n, split);
    if (!direct)
      for (int i = 0; i < mb; ++i) detail::store_row(y, m0 + i, 0, n, t_y.data() + i * n);
  }
}

}  // namespace sinew::kernels
