// A non-owning view of a tensor: pointer, dtype, shape, strides (in
// elements) and device. What collectives and kernels take; the caller owns
// the memory and keeps it alive until the operation completes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <array>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "sinew/tensor/dtype.h"

namespace sinew {

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  static Device cpu() { return {}; }
  bool operator==(const Device&) const = default;
  std::string to_string() const;
};

class TensorView {
 public:
  // Dimensions are stored inline so that copying a view (into an async op)
  // never allocates.
  static constexpr int kMaxDims = 8;

  TensorView() = default;
  // Contiguous row-major view.
  TensorView(void* data, DType dtype, std::vector<int64_t> shape, Device device = Device::cpu());
  // Strided view; strides are in elements and may be any non-negative values.
  TensorView(void* data, DType dtype, std::vector<int64_t> shape, std::vector<int64_t> strides,
             Device device = Device::cpu());
  // A 1-D contiguous view of `count` elements.
  static TensorView flat(void* data, DType dtype, int64_t count, Device device = Device::cpu());

  void* data() const { return data_; }
  template <class T> T* data_as() const { return static_cast<T*>(data_); }
  DType dtype() const { return dtype_; }
  std::span<const int64_t> shape() const { return {shape_.data(), static_cast<size_t>(ndim_)}; }
  std::span<const int64_t> strides() const { return {strides_.data(), static_cast<size_t>(ndim_)}; }
  Device device() const { return device_; }
  int64_t dim() const { return ndim_; }
  int64_t numel() const;
  size_t element_size() const { return dtype_size(dtype_); }
  // Bytes of a contiguous copy: numel * element_size.
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  // Byte offset of the element with the given flat (row-major) index.
  size_t byte_offset_of(int64_t flat_index) const;
  std::string to_string() const;  // "float32[4, 8] strides [8, 1] cpu"

  // Copies this (possibly strided) view into a contiguous buffer and back.
  void copy_to_contiguous(void* dst) const;
  void copy_from_contiguous(const void* src) const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  int32_t ndim_ = 0;
  std::array<int64_t, kMaxDims> shape_{};
  std::array<int64_t, kMaxDims> strides_{};
  Device device_;
};

// Contiguous row-major strides for a shape.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);

}  // namespace sinew
