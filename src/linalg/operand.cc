#include "linalg/operand.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sinew/core/error.h"
#include "sinew/core/thread_pool.h"

namespace sinew::linalg::detail {

MatArg MatArg::transposed() const {
  MatArg t = *this;
  std::swap(t.rows, t.cols);
  std::swap(t.rs, t.cs);
  return t;
}

std::string BatchShape::index(int64_t b) const {
  if (dims.empty()) return "";
  std::vector<int64_t> idx(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    idx[d] = b % dims[d];
    b /= dims[d];
  }
  return fmt::format("[{}]", fmt::join(idx, ", "));
}

int resolve_threads(int threads) { return threads > 0 ? threads : ThreadPool::default_threads(); }

BatchShape batch_of(const TensorView& a) {
  BatchShape s;
  auto shape = a.shape();
  s.dims.assign(shape.begin(), shape.end() - 2);
  for (int64_t d : s.dims) s.count *= d;
  return s;
}

namespace {

std::vector<int64_t> batch_offsets(const TensorView& v, const BatchShape& batch) {
  std::vector<int64_t> off(batch.count);
  auto strides = v.strides();
  const size_t nd = batch.dims.size();
  std::vector<int64_t> idx(nd, 0);
  int64_t cur = 0;
  for (int64_t b = 0; b < batch.count; ++b) {
    off[b] = cur;
    for (size_t d = nd; d-- > 0;) {  // odometer over the batch dims
      cur += strides[d];
      if (++idx[d] < batch.dims[d]) break;
      cur -= idx[d] * strides[d];
      idx[d] = 0;
    }
  }
  return off;
}

void check_operand(const TensorView& v, const BatchShape& batch, std::vector<int64_t> tail, DType dtype,
                   const char* routine, const char* name) {
  std::vector<int64_t> want = batch.dims;
  want.insert(want.end(), tail.begin(), tail.end());
  auto shape = v.shape();
  if (std::vector<int64_t>(shape.begin(), shape.end()) != want)
    throw InvalidArgument::make(fmt::format("{}: {}", routine, name), v.to_string(),
                                fmt::format("shape {}", want));
  if (v.dtype() != dtype)
    throw InvalidArgument::make(fmt::format("{}: {}.dtype", routine, name), dtype_name(v.dtype()),
                                fmt::format("{} (the dtype of a)", dtype_name(dtype)));
  if (v.device().type != DeviceType::kCPU)
    throw InvalidArgument::make(fmt::format("{}: {}.device", routine, name), v.device().to_string(), "cpu");
}

}  // namespace

MatArg matrix_arg(const TensorView& v, const BatchShape& batch, int64_t rows, int64_t cols, DType dtype,
                  const char* routine, const char* name) {
  check_operand(v, batch, {rows, cols}, dtype, routine, name);
  MatArg m;
  m.data = v.data();
  m.dtype = dtype;
  m.rows = rows;
  m.cols = cols;
  auto st = v.strides();
  m.rs = st[st.size() - 2];
  m.cs = st[st.size() - 1];
  m.offsets = std::make_shared<const std::vector<int64_t>>(batch_offsets(v, batch));
  m.present = true;
  return m;
}

MatArg vector_arg(const TensorView& v, const BatchShape& batch, int64_t len, DType dtype, const char* routine,
                  const char* name) {
  check_operand(v, batch, {len}, dtype, routine, name);
  MatArg m;
  m.data = v.data();
  m.dtype = dtype;
  m.rows = len;
  m.cols = 1;
  m.rs = v.strides()[v.dim() - 1];
  m.cs = 0;
  m.offsets = std::make_shared<const std::vector<int64_t>>(batch_offsets(v, batch));
  m.present = true;
  return m;
}

void FailureLog::record(const Failure& f) {
  std::lock_guard<std::mutex> g(mu_);
  if (!any_.load(std::memory_order_relaxed) || f.batch < first_.batch) first_ = f;
  any_.store(true, std::memory_order_release);
}

void FailureLog::throw_if_any(const char* routine, const char* name, const BatchShape& batch) const {
  if (!any()) return;
  std::lock_guard<std::mutex> g(mu_);
  const Failure& f = first_;
  const std::string arg = fmt::format("{}: {}{}", routine, f.operand ? f.operand : name, batch.index(f.batch));
  switch (f.kind) {
    case FailKind::kNonFinite:
      throw InvalidArgument::make(arg, fmt::format("{} at row {}, column {}", f.value, f.i, f.j),
                                  "finite entries (NaN and Inf are not accepted)");
    case FailKind::kNotPositiveDefinite:
      throw InvalidArgument::make(
          arg, fmt::format("a matrix that is not positive definite: pivot {} is {:.6g} (the leading minor of "
                           "order {} is not positive)",
                           f.i, f.value, f.i + 1),
          "a symmetric positive-definite matrix");
    case FailKind::kZeroDiagonal:
      throw InvalidArgument::make(arg, fmt::format("diagonal entry {} equal to {}", f.i, f.value),
                                  "a nonsingular triangular matrix (finite, nonzero diagonal)");
    case FailKind::kRankDeficient:
      throw InvalidArgument::make(
          arg, fmt::format("a rank-deficient matrix: |R[{0}, {0}]| = {1:.6g} is below the rank tolerance", f.i,
                           f.value),
          "a matrix of full rank (use svd for rank-deficient least squares)");
    case FailKind::kRangeTooWide:
      throw InvalidArgument::make(
          arg,
          fmt::format("column norms spanning too wide a range: R[{0}, {0}] of its pivoted QR is {1:.3g} of the "
                      "largest entry",
                      f.i, f.value),
          "nonzero column norms within 1e154 (float64) or 1e19 (float32) of the largest: one-sided Jacobi works "
          "with squared norms, and below that their squares are subnormal");
    case FailKind::kNoConvergence:
      throw InternalError(fmt::format("{}: {}{} did not converge in {} sweeps", routine, name,
                                      batch.index(f.batch), f.i));
  }
}

}  // namespace sinew::linalg::detail
