#include "sinew/kernels/scaled_mm.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/quantize_detail.h"
#include "sinew/core/error.h"
#include "sinew/core/thread_pool.h"
#include "sinew/kernels/gemm.h"
#include "sinew/tensor/dtype.h"

namespace sinew::kernels {
namespace {

// K columns dequantized per mm call: a multiple of every block size.
constexpr int64_t kPanel = 512;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

bool is_fp8(const TensorView& t) { return t.dtype() == DType::kF8E4M3FN || t.dtype() == DType::kF8E5M2; }
bool is_fp4(const TensorView& t) { return t.dtype() == DType::kU8; }

// PyTorch's names, with uint8 storage spelled out.
std::string data_type_name(const TensorView& t) {
  return is_fp4(t) ? "float4_e2m1fn_x2 (uint8)" : dtype_name(t.dtype());
}
std::string scale_type_name(const TensorView& t) {
  return t.dtype() == DType::kU8 ? "float8_e8m0fnu (uint8)" : dtype_name(t.dtype());
}

// t.t() of a 2-D view (other views as they are, like PyTorch's .t()).
TensorView transposed(const TensorView& t) {
  if (t.dim() != 2) return t;
  return TensorView(t.data(), t.dtype(), {t.shape()[1], t.shape()[0]}, {t.strides()[1], t.strides()[0]});
}

// PyTorch's check_size_stride: a stride only matters for a size above 1.
bool size_stride(const TensorView& s, int dim, int64_t size, int64_t stride) {
  return s.shape()[dim] == size && (size <= 1 || s.strides()[dim] == stride);
}

int64_t mx_scale_numel(int64_t rows, int64_t k, int64_t block, ScaleLayout layout) {
  return layout == ScaleLayout::kSwizzled ? round_up(rows, 128) * round_up(ceil_div(k, block), 4)
                                          : rows * ceil_div(k, block);
}

// Whether operand t ([rows, K], as a, or b.t()) with scale s has recipe r.
bool matches(ScaleRecipe r, const TensorView& t, const TensorView& s, ScaleLayout layout) {
  const int64_t rows = t.shape()[0], k = t.shape()[1];
  switch (r) {
    case ScaleRecipe::kTensorwise: return is_fp8(t) && s.dtype() == DType::kF32 && s.numel() == 1;
    case ScaleRecipe::kRowwise:
      return is_fp8(t) && s.dtype() == DType::kF32 && s.dim() == 2 && s.shape()[0] == rows && s.shape()[1] == 1 &&
             s.is_contiguous();
    case ScaleRecipe::kBlock1x128:
      return is_fp8(t) && s.dtype() == DType::kF32 && s.dim() == 2 && size_stride(s, 0, rows, 1) &&
             size_stride(s, 1, ceil_div(k, 128), rows);
    case ScaleRecipe::kBlock128x128:
      return is_fp8(t) && s.dtype() == DType::kF32 && s.dim() == 2 &&
             size_stride(s, 0, ceil_div(rows, 128), ceil_div(k, 128)) && size_stride(s, 1, ceil_div(k, 128), 1);
    case ScaleRecipe::kMX:
      return s.dtype() == DType::kU8 && s.is_contiguous() &&
             ((is_fp8(t) && s.numel() == mx_scale_numel(rows, k, 32, layout)) ||
              (is_fp4(t) && s.numel() == mx_scale_numel(rows, 2 * k, 32, layout)));
    case ScaleRecipe::kNVFP4:
      return is_fp4(t) && s.dtype() == DType::kF8E4M3FN && s.is_contiguous() &&
             s.numel() == mx_scale_numel(rows, 2 * k, 16, layout);
  }
  return false;
}

std::string sizes(const TensorView& t) { return fmt::format("{}", t.shape()); }
std::string strides(const TensorView& t) { return fmt::format("{}", t.strides()); }

[[noreturn]] void invalid_scaling(const TensorView& a, const TensorView& b, const TensorView& sa,
                                  const TensorView& sb, ScaleLayout layout) {
  const int64_t m = a.shape()[0], ka = a.shape()[1], kb = b.shape()[0], n = b.shape()[1];
  const bool swz = layout == ScaleLayout::kSwizzled;
  const std::string mx_how = swz ? "swizzled (scale_layout kSwizzled)" : "row-major (scale_layout kRowMajor)";
  std::string expected = fmt::format(
      "one of these scaling configurations:\n"
      "- For TensorWise scaling, a and b should be float8, scales should be float and singletons.\n"
      "- For RowWise scaling, a and b should be float8, scales should be float, scale_a should be ({}, 1) and "
      "scale_b should be (1, {}), and both should be contiguous.\n"
      "- For BlockWise 1x128 scaling, a and b should be float8, scales should be float, scale_a should be ({}, {}) "
      "and scale_b should be ({}, {}), and both should be outer-dim-major.\n"
      "- For BlockWise 128x128 scaling, a and b should be float8, scales should be float, scale_a should be "
      "({}, {}) and scale_b should be ({}, {}), and both should be near-inner-dim-major.\n"
      "- For Blockwise 1x32 scaling, a and b should be float8 or float4 (packed 2x), scales should be "
      "float8_e8m0fnu (uint8), scale_a should have {} (float8) / {} (float4) elements and scale_b should have {} "
      "(float8) / {} (float4) elements, {}, and both should be contiguous.\n"
      "- For Blockwise 1x16 scaling, a and b should be float4 (packed 2x), scales should be float8_e4m3fn, "
      "scale_a should have {} elements and scale_b should have {} elements, {}, and both should be contiguous",
      m, n, m, ceil_div(ka, 128), ceil_div(kb, 128), n, ceil_div(m, 128), ceil_div(ka, 128), ceil_div(kb, 128),
      ceil_div(n, 128), mx_scale_numel(m, ka, 32, layout), mx_scale_numel(m, 2 * ka, 32, layout),
      mx_scale_numel(n, kb, 32, layout), mx_scale_numel(n, 2 * kb, 32, layout), mx_how,
      mx_scale_numel(m, 2 * ka, 16, layout), mx_scale_numel(n, 2 * kb, 16, layout), mx_how);
  std::string got = fmt::format(
      "a.dtype()={}, scale_a.dtype()={}, scale_a.size()={}, scale_a.stride()={}, b.dtype()={}, "
      "scale_b.dtype()={}, scale_b.size()={} and scale_b.stride()={}",
      data_type_name(a), scale_type_name(sa), sizes(sa), strides(sa), data_type_name(b), scale_type_name(sb),
      sizes(sb), strides(sb));
  throw InvalidArgument::make("scale_a, scale_b", "an invalid scaling configuration: " + got, expected);
}

void check_operands(const TensorView& a, const TensorView& b) {
  if (a.dim() != 2) throw InvalidArgument::make("mat1", a.to_string(), "a matrix (mat1 must be a matrix)");
  if (b.dim() != 2) throw InvalidArgument::make("mat2", b.to_string(), "a matrix (mat2 must be a matrix)");
  if (a.shape()[1] != b.shape()[0])
    throw InvalidArgument::make(
        "mat1, mat2",
        fmt::format("shapes {}x{} and {}x{}", a.shape()[0], a.shape()[1], b.shape()[0], b.shape()[1]),
        "shapes that can be multiplied (mat1 and mat2 shapes cannot be multiplied)");
  for (const auto* t : {&a, &b})
    if (!is_fp8(*t) && !is_fp4(*t))
      throw InvalidArgument::make(t == &a ? "mat1" : "mat2", dtype_name(t->dtype()),
                                  fmt::format("a Float8 or Float4_x2 matrix (float8_e4m3fn, float8_e5m2, or uint8 "
                                              "holding float4_e2m1fn_x2 pairs) for {}",
                                              t == &a ? "mat1" : "mat2"));
}

}  // namespace

ScaledMmRecipe scaled_mm_recipe(const TensorView& a, const TensorView& b, const TensorView& scale_a,
                                const TensorView& scale_b, ScaleLayout layout) {
  check_operands(a, b);
  using R = ScaleRecipe;
  static constexpr std::pair<R, R> kOptions[] = {
      {R::kTensorwise, R::kTensorwise},     {R::kRowwise, R::kRowwise},
      {R::kBlock128x128, R::kBlock1x128},   {R::kBlock1x128, R::kBlock128x128},
      {R::kBlock1x128, R::kBlock1x128},     {R::kMX, R::kMX},
      {R::kNVFP4, R::kNVFP4},
  };
  const TensorView bt = transposed(b);
  for (auto [ra, rb] : kOptions) {
    // Block-scaled (MX, NVFP4) scales are laid out for b.t() already.
    const bool swizzled_like = rb == R::kMX || rb == R::kNVFP4;
    if (matches(ra, a, scale_a, layout) && matches(rb, bt, swizzled_like ? scale_b : transposed(scale_b), layout))
      return {ra, rb};
  }
  invalid_scaling(a, b, scale_a, scale_b, layout);
}

void scaled_mm(const TensorView& a, const TensorView& b, const TensorView& scale_a, const TensorView& scale_b,
               const TensorView& out, const ScaledMmOptions& o) {
  const ScaledMmRecipe recipe = scaled_mm_recipe(a, b, scale_a, scale_b, o.scale_layout);
  const int64_t m = a.shape()[0], kp = a.shape()[1], n = b.shape()[1];
  const bool fp4 = is_fp4(a);
  const int64_t k = fp4 ? 2 * kp : kp;

  if (o.bias && o.bias->numel() != n)
    throw InvalidArgument::make("bias", o.bias->to_string(),
                                fmt::format("{} elements (Bias must be size {} but got {})", n, n, o.bias->numel()));
  if (kp % 16 != 0)
    throw InvalidArgument::make(
        "mat1", fmt::format("shape ({}x{})", m, kp),
        fmt::format("trailing dimension of mat1 to be divisible by 16 but got mat1 shape: ({}x{})", m, kp));
  if (b.shape()[0] % 16 != 0 || n % 16 != 0)
    throw InvalidArgument::make("mat2", fmt::format("shape ({}x{})", b.shape()[0], n),
                                fmt::format("mat2 shape ({}x{}) must be divisible by 16", b.shape()[0], n));
  if (a.dtype() == DType::kF8E5M2 && b.dtype() == DType::kF8E5M2)
    throw InvalidArgument::make("mat1, mat2", "float8_e5m2 and float8_e5m2",
                                "at most one float8_e5m2 operand (Multiplication of two Float8_e5m2 matrices is not "
                                "supported)");
  if (is_fp4(a) != is_fp4(b))
    throw InvalidArgument::make("mat1, mat2", fmt::format("{} and {}", data_type_name(a), data_type_name(b)),
                                "both fp8 or both fp4 (mat_a and mat_b must be of the same kind)");
  if (recipe.a == ScaleRecipe::kMX && k % 32 != 0)
    throw InvalidArgument::make("K", std::to_string(k),
                                "a multiple of 32 for MX block scaling (32-element blocks along K)");
  if (out.dim() != 2 || out.shape()[0] != m || out.shape()[1] != n)
    throw InvalidArgument::make("out", out.to_string(), fmt::format("a [{}, {}] matrix", m, n));
  if (out.dtype() != DType::kF32 && out.dtype() != DType::kBF16)
    throw InvalidArgument::make("out", out.to_string(),
                                "float32 or bfloat16 (sinew's scaled_mm has no float16 or float8 output)");
  if (o.bias) {
    if (out.dtype() == DType::kF32)
      throw InvalidArgument::make("bias", o.bias->to_string(),
                                  "no bias with a float32 out (Bias is not supported when out_dtype is set to "
                                  "Float32)");
    if (o.bias->dtype() != DType::kBF16)
      throw InvalidArgument::make("bias", o.bias->to_string(),
                                  fmt::format("Bias must be BFloat16 to compute BFloat16 output, but got {}",
                                              dtype_name(o.bias->dtype())));
  }
  if (recipe.a == ScaleRecipe::kRowwise && out.dtype() != DType::kBF16)
    throw InvalidArgument::make("out", out.to_string(),
                                "bfloat16 (Only bf16 high precision output types are supported for row-wise "
                                "scaling.)");
  if (a.shape()[1] > 1 && a.strides()[1] != 1)
    throw InvalidArgument::make("mat1", a.to_string(),
                                "a row-major matrix, stride(1) == 1 (Only multiplication of row-major and "
                                "column-major matrices is supported)");
  if (b.shape()[0] > 1 && b.strides()[0] != 1)
    throw InvalidArgument::make("mat2", b.to_string(),
                                "a column-major matrix, stride(0) == 1 (Only multiplication of row-major and "
                                "column-major matrices is supported)");
  if (o.global_scale_a.has_value() != o.global_scale_b.has_value())
    throw InvalidArgument::make(o.global_scale_a ? "global_scale_b" : "global_scale_a", "no value",
                                "a value (For two-level-scaled NVFP4, global_scale_a and global_scale_b must both "
                                "have a value)");
  if (o.global_scale_a && recipe.a != ScaleRecipe::kNVFP4)
    throw InvalidArgument::make("global_scale_a, global_scale_b", scale_recipe_name(recipe.a),
                                "NVFP4 scaling (global scales belong to two-level NVFP4 only)");

  if (m == 0 || n == 0) return;
  std::vector<float> acc(static_cast<size_t>(m * n), 0.0f);
  auto& pool = ThreadPool::global();
  const TensorView acc_view(acc.data(), DType::kF32, {m, n});
  if (k > 0) {
    // The operands as quantized [rows, K] matrices (b as b.t()).
    auto operand_scale = [&](const TensorView& s, int64_t rows, ScaleRecipe r, bool is_b) {
      if (r != ScaleRecipe::kMX && r != ScaleRecipe::kNVFP4) return is_b ? transposed(s) : s;
      if (o.scale_layout == ScaleLayout::kSwizzled) return s;
      return TensorView(s.data(), s.dtype(), {rows, ceil_div(k, r == ScaleRecipe::kMX ? 32 : 16)});
    };
    const QuantizedMatrix qa{a, operand_scale(scale_a, m, recipe.a, false), recipe.a, o.scale_layout,
                             o.global_scale_a.value_or(1.0f)};
    const QuantizedMatrix qb{transposed(b), operand_scale(scale_b, n, recipe.b, true), recipe.b, o.scale_layout,
                             o.global_scale_b.value_or(1.0f)};
    const int64_t panel = std::min(k, kPanel);
    std::vector<float> pa(static_cast<size_t>(m * panel)), pb(static_cast<size_t>(n * panel));
    GemmOptions gopt;
    gopt.threads = o.threads;
    for (int64_t k0 = 0; k0 < k; k0 += panel) {
      const int64_t w = std::min(panel, k - k0);
      pool.parallel_for(m + n, o.threads, [&](int64_t r, int) {
        if (r < m) detail::dequantize_row(qa, r, k0, k0 + w, pa.data() + r * w);
        else detail::dequantize_row(qb, r - m, k0, k0 + w, pb.data() + (r - m) * w);
      });
      gopt.beta = k0 == 0 ? 0.0 : 1.0;
      mm(TensorView(pa.data(), DType::kF32, {m, w}), TensorView(pb.data(), DType::kF32, {w, n}, {1, w}), acc_view,
         gopt);
    }
  }
  if (o.bias) {
    std::vector<float> bias(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      uint16_t v;
      std::memcpy(&v, static_cast<const char*>(o.bias->data()) + o.bias->byte_offset_of(j), 2);
      bias[j] = bf16_to_f32(v);
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) acc[i * n + j] += bias[j];
  }
  for (int64_t i = 0; i < m; ++i) detail::store_row(out, i, 0, n, acc.data() + i * n);
}

}  // namespace sinew::kernels
