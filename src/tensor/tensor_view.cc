#include "sinew/tensor/tensor_view.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>

#include "sinew/core/check.h"

namespace sinew {

std::string Device::to_string() const {
  return type == DeviceType::kCPU ? "cpu" : fmt::format("cuda:{}", index);
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i] > 0 ? shape[i] : 1;
  }
  return s;
}

TensorView::TensorView(void* data, DType dtype, std::vector<int64_t> shape, Device device)
    : TensorView(data, dtype, shape, contiguous_strides(shape), device) {}

TensorView::TensorView(void* data, DType dtype, std::vector<int64_t> shape,
                       std::vector<int64_t> strides, Device device)
    : data_(data), dtype_(dtype), device_(device) {
  SINEW_ARG_CHECK(shape.size() == strides.size(), "strides", fmt::format("{}", strides),
                  fmt::format("{} entries to match shape {}", shape.size(), shape));
  SINEW_ARG_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "shape", fmt::format("{}", shape),
                  fmt::format("at most {} dimensions", kMaxDims));
  ndim_ = static_cast<int32_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    SINEW_ARG_CHECK(shape[i] >= 0, fmt::format("shape[{}]", i), shape[i], "a size >= 0");
    SINEW_ARG_CHECK(strides[i] >= 0, fmt::format("strides[{}]", i), strides[i], "a stride >= 0");
    shape_[i] = shape[i];
    strides_[i] = strides[i];
  }
  SINEW_ARG_CHECK(data_ != nullptr || numel() == 0, "data", "nullptr",
                  fmt::format("a pointer for {} elements", numel()));
}

TensorView TensorView::flat(void* data, DType dtype, int64_t count, Device device) {
  SINEW_ARG_CHECK(count >= 0, "count", count, "a size >= 0");
  SINEW_ARG_CHECK(data != nullptr || count == 0, "data", "nullptr", fmt::format("a pointer for {} elements", count));
  TensorView v;
  v.data_ = data;
  v.dtype_ = dtype;
  v.ndim_ = 1;
  v.shape_[0] = count;
  v.strides_[0] = 1;
  v.device_ = device;
  return v;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= shape_[i];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = static_cast<size_t>(ndim_); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

size_t TensorView::byte_offset_of(int64_t flat) const {
  int64_t off = 0;
  for (size_t i = static_cast<size_t>(ndim_); i-- > 0;) {
    int64_t idx = flat % shape_[i];
    flat /= shape_[i];
    off += idx * strides_[i];
  }
  return static_cast<size_t>(off) * element_size();
}

std::string TensorView::to_string() const {
  return fmt::format("{}{} strides {} {}", dtype_name(dtype_), shape(), strides(), device_.to_string());
}

namespace {
// Walks a strided view, calling f(byte_offset) for each innermost run of
// `run` contiguous bytes.
template <class F>
void for_each_run(const TensorView& v, F&& f) {
  const auto shape = v.shape();
  const auto strides = v.strides();
  const size_t es = v.element_size();
  if (v.numel() == 0) return;
  if (v.is_contiguous()) {
    f(size_t{0}, v.nbytes(), size_t{0});
    return;
  }
  size_t nd = shape.size();
  size_t inner = nd - 1;
  bool inner_contig = strides[inner] == 1;
  size_t run_elems = inner_contig ? static_cast<size_t>(shape[inner]) : 1;
  size_t outer = static_cast<size_t>(v.numel()) / run_elems;
  std::vector<int64_t> idx(nd, 0);
  size_t packed = 0;
  for (size_t o = 0; o < outer; ++o) {
    int64_t off = 0;
    for (size_t i = 0; i < nd; ++i) off += idx[i] * strides[i];
    f(static_cast<size_t>(off) * es, run_elems * es, packed);
    packed += run_elems * es;
    // advance the multi-index, skipping the inner dim when it is a run
    for (size_t i = inner_contig ? inner : nd; i-- > 0;) {
      if (++idx[i] < shape[i]) break;
      idx[i] = 0;
    }
  }
}
}  // namespace

void TensorView::copy_to_contiguous(void* dst) const {
  auto* base = static_cast<const char*>(data_);
  for_each_run(*this, [&](size_t off, size_t n, size_t packed) {
    std::memcpy(static_cast<char*>(dst) + packed, base + off, n);
  });
}

void TensorView::copy_from_contiguous(const void* src) const {
  auto* base = static_cast<char*>(data_);
  for_each_run(*this, [&](size_t off, size_t n, size_t packed) {
    std::memcpy(base + off, static_cast<const char*>(src) + packed, n);
  });
}

}  // namespace sinew
