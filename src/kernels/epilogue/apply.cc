#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/epilogue/math.h"
#include "kernels/epilogue/pass.h"
#include "sinew/core/error.h"
#include "sinew/core/thread_pool.h"

namespace sinew::kernels {

bool load_element(const void* p, DType t, double* v) {
  switch (t) {
    case DType::kF32: *v = *static_cast<const float*>(p); return true;
    case DType::kF64: *v = *static_cast<const double*>(p); return true;
    case DType::kBF16: *v = bf16_to_f32(*static_cast<const uint16_t*>(p)); return true;
    case DType::kF16: *v = f16_to_f32(*static_cast<const uint16_t*>(p)); return true;
    case DType::kF8E4M3FN: *v = e4m3fn_to_f32(*static_cast<const uint8_t*>(p)); return true;
    case DType::kF8E5M2: *v = e5m2_to_f32(*static_cast<const uint8_t*>(p)); return true;
    default: return false;
  }
}

bool store_element(void* p, DType t, double v) {
  switch (t) {
    case DType::kF32: *static_cast<float*>(p) = static_cast<float>(v); return true;
    case DType::kF64: *static_cast<double*>(p) = v; return true;
    case DType::kBF16: *static_cast<uint16_t*>(p) = f32_to_bf16(static_cast<float>(v)); return true;
    case DType::kF16: *static_cast<uint16_t*>(p) = f32_to_f16(static_cast<float>(v)); return true;
    case DType::kF8E4M3FN: *static_cast<uint8_t*>(p) = f32_to_e4m3fn(static_cast<float>(v)); return true;
    case DType::kF8E5M2: *static_cast<uint8_t*>(p) = f32_to_e5m2(static_cast<float>(v)); return true;
    default: return false;
  }
}

namespace {

char* at(const MatrixRef& r, int64_t b, int64_t i, int64_t j) { return r.byte_ptr(b, i, j); }

double load(const void* p, DType t) {
  double v;
  if (!load_element(p, t, &v)) throw InternalError(fmt::format("epilogue: cannot read {}", dtype_name(t)));
  return v;
}

void store(void* p, DType t, double v) {
  if (!store_element(p, t, v)) throw InternalError(fmt::format("epilogue: cannot write {}", dtype_name(t)));
}

template <class T>
double reduce_group(Reduction op, const T* v, int64_t g) {
  if (op == Reduction::kSum || op == Reduction::kMean) {
    double s = 0;
    for (int64_t j = 0; j < g; ++j) s += v[j];
    return op == Reduction::kMean ? s / static_cast<double>(g) : s;
  }
  const bool mag = op == Reduction::kAmax;
  double m = mag ? 0.0 : -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < g; ++j) m = nan_max(m, mag ? std::fabs(static_cast<double>(v[j])) : static_cast<double>(v[j]));
  if (op != Reduction::kLogSumExp || std::isnan(m) || std::isinf(m)) return m;
  double s = 0;
  for (int64_t j = 0; j < g; ++j) s += std::exp(static_cast<double>(v[j]) - m);
  return m + std::log(s);
}

template <class T>
void finish_row_impl(const BoundEpilogue& e, int64_t i, T* v, int64_t n, const MatrixRef& out) {
  for (int s = 0; s < e.num_steps; ++s) {
    const BoundStep& st = e.steps[s];
    switch (st.kind) {
      case EpilogueStep::Kind::kBias:
      case EpilogueStep::Kind::kResidual:
        for (int64_t j = 0; j < n; ++j) v[j] = static_cast<T>(v[j] + load(at(st.operand, 0, i, j), st.operand.dtype));
        break;
      case EpilogueStep::Kind::kActivation:
        for (int64_t j = 0; j < n; ++j) v[j] = static_cast<T>(activate_scalar(st.activation, v[j]));
        break;
      case EpilogueStep::Kind::kScale:
        for (int64_t j = 0; j < n; ++j) v[j] = static_cast<T>(v[j] * st.scale);
        break;
      case EpilogueStep::Kind::kClamp:
        for (int64_t j = 0; j < n; ++j)
          if (v[j] == v[j]) v[j] = static_cast<T>(std::min(std::max(static_cast<double>(v[j]), st.lo), st.hi));
        break;
      case EpilogueStep::Kind::kCast: break;
    }
  }
  for (int r = 0; r < e.num_reductions; ++r) {
    const BoundReduction& red = e.reductions[r];
    for (int64_t g = 0; g < n / red.group; ++g)
      store(at(red.out, 0, i, g), red.out.dtype, reduce_group(red.op, v + g * red.group, red.group));
  }
  for (int64_t j = 0; j < n; ++j) store(at(out, 0, i, j), out.dtype, static_cast<double>(v[j]) * e.cast_scale);
}

template <class T>
void pass(const BoundEpilogue& e, int64_t batch, int64_t m, int64_t n, const MatrixRef& values, const MatrixRef& out,
          int threads) {
  const int64_t rows = batch * m;
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(rows, (1 << 16) / std::max<int64_t>(n, 1)));
  ThreadPool::global().parallel_for((rows + chunk - 1) / chunk, threads, [&](int64_t task, int) {
    std::vector<T> row(static_cast<size_t>(n));
    BoundEpilogue eb;
    int64_t eb_batch = -1;
    for (int64_t r = task * chunk; r < std::min(rows, (task + 1) * chunk); ++r) {
      const int64_t b = r / m, i = r % m;
      if (b != eb_batch) {
        eb = e.at_batch(b);
        eb_batch = b;
      }
      for (int64_t j = 0; j < n; ++j) row[j] = static_cast<T>(load(at(values, b, i, j), values.dtype));
      MatrixRef o = out;
      o.data = at(out, b, 0, 0);
      finish_row_impl(eb, i, row.data(), n, o);
    }
  });
}

}  // namespace

void finish_row(const BoundEpilogue& e, int64_t i, double* values, int64_t n, const MatrixRef& out) {
  finish_row_impl(e, i, values, n, out);
}
void finish_row(const BoundEpilogue& e, int64_t i, float* values, int64_t n, const MatrixRef& out) {
  finish_row_impl(e, i, values, n, out);
}

void epilogue_pass(const BoundEpilogue& e, int64_t batch, int64_t m, int64_t n, const MatrixRef& values,
                   const MatrixRef& out, int threads) {
  if (values.dtype == DType::kF64) pass<double>(e, batch, m, n, values, out, threads);
  else pass<float>(e, batch, m, n, values, out, threads);
}

void init_reductions(const BoundEpilogue& e, int64_t batch, int64_t m, int64_t n) {
  for (int r = 0; r < e.num_reductions; ++r) {
    const BoundReduction& red = e.reductions[r];
    const double id = reduction_identity(red.op);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t g = 0; g < n / red.group; ++g) store(at(red.out, b, i, g), red.out.dtype, id);
  }
}

void apply_epilogue(const Epilogue& epilogue, const TensorView& values, const TensorView& out) {
  if (values.dim() != 2 && values.dim() != 3)
    throw InvalidArgument::make("apply_epilogue: values", values.to_string(), "[M, N] or [B, M, N]");
  if (values.dtype() != DType::kF32 && values.dtype() != DType::kF64)
    throw InvalidArgument::make("apply_epilogue: values.dtype", dtype_name(values.dtype()), "float32 or float64");
  bool same_shape = out.dim() == values.dim();
  for (int64_t d = 0; same_shape && d < values.dim(); ++d) same_shape = out.shape()[d] == values.shape()[d];
  if (!same_shape)
    throw InvalidArgument::make("apply_epilogue: out", out.to_string(), "the shape of values " + values.to_string());
  const auto cast = epilogue.cast_dtype();
  if (cast && out.dtype() != *cast)
    throw InvalidArgument::make("apply_epilogue: out.dtype", dtype_name(out.dtype()),
                                fmt::format("{} (the epilogue's cast)", dtype_name(*cast)));
  if (!cast && out.dtype() != DType::kF32 && out.dtype() != DType::kF64 && out.dtype() != DType::kBF16 &&
      out.dtype() != DType::kF16)
    throw InvalidArgument::make("apply_epilogue: out.dtype", dtype_name(out.dtype()),
                                "float32, float64, bfloat16 or float16 (or add a cast step)");
  const bool batched = values.dim() == 3;
  const int64_t batch = batched ? values.shape()[0] : 1;
  const int64_t m = values.shape()[values.dim() - 2], n = values.shape()[values.dim() - 1];
  auto ref = [&](const TensorView& t) {
    auto s = t.strides();
    return MatrixRef{t.data(), t.dtype(), batched ? s[0] : 0, s[t.dim() - 2], s[t.dim() - 1]};
  };
  const BoundEpilogue e = bind_epilogue(&epilogue, "apply_epilogue", batch, m, n, batched, out.dtype());
  epilogue_pass(e, batch, m, n, ref(values), ref(out), 1);
}

}  // namespace sinew::kernels
