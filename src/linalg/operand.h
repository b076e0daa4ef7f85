// What the public entry points hand to the per-ISA code: each operand as a
// base pointer, strides and one offset per batch matrix, plus a log of the
// first failure (by batch index) that the front end turns into an error.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "sinew/tensor/tensor_view.h"

namespace sinew::linalg::detail {

// Matrix b of a batch starts at data + offsets[b] elements; its element
// (i, j) is at + i * rs + j * cs. A vector operand has cols == 1.
struct MatArg {
  void* data = nullptr;
  DType dtype = DType::kF64;
  int64_t rows = 0, cols = 0, rs = 0, cs = 0;
  // Shared, so that a copy (transposed(), per matrix in the batch loops)
  // does not copy a batch's worth of offsets: 80 KB for 10,000 matrices.
  std::shared_ptr<const std::vector<int64_t>> offsets;
  bool present = false;

  template <class T> T* ptr(int64_t b) const { return static_cast<T*>(data) + (*offsets)[b]; }
  int64_t batch() const { return offsets ? static_cast<int64_t>(offsets->size()) : 0; }
  // The same operand read transposed.
  MatArg transposed() const;
};

struct BatchShape {
  std::vector<int64_t> dims;
  int64_t count = 1;
  std::string index(int64_t b) const;  // "[2, 0]", or "" for a single matrix
};

// options.threads as a count: 0 means ThreadPool::default_threads().
int resolve_threads(int threads);

// The batch dimensions of a (all but the last two).
BatchShape batch_of(const TensorView& a);

// Checks that v is batch.dims + [rows, cols] of dtype on the CPU.
MatArg matrix_arg(const TensorView& v, const BatchShape& batch, int64_t rows, int64_t cols, DType dtype,
                  const char* routine, const char* name);
// Checks that v is batch.dims + [len] of dtype on the CPU.
MatArg vector_arg(const TensorView& v, const BatchShape& batch, int64_t len, DType dtype, const char* routine,
                  const char* name);

enum class FailKind {
  kNonFinite,            // (i, j) of the input holds `value`
  kNotPositiveDefinite,  // pivot i is `value`
  kZeroDiagonal,         // triangular diagonal entry i is `value`
  kRankDeficient,        // R[i, i] is `value`, below the rank tolerance
  kNoConvergence,        // i sweeps did not converge
  kRangeTooWide,         // R[i, i] is `value` of the largest entry: its square is subnormal
};

struct Failure {
  int64_t batch = -1;
  FailKind kind = FailKind::kNonFinite;
  int64_t i = 0, j = 0;
  double value = 0;
  const char* operand = nullptr;  // a string literal; nullptr: the routine's main operand
};

// Keeps the failure of the lowest batch index, so that a threaded batch
// reports the same error as a serial one.
class FailureLog {
 public:
  void record(const Failure& f);
  bool any() const { return any_.load(std::memory_order_acquire); }
  // Throws InvalidArgument for the recorded failure, if any: `routine: name[index]`.
  void throw_if_any(const char* routine, const char* name, const BatchShape& batch) const;

 private:
  mutable std::mutex mu_;
  std::atomic<bool> any_{false};
  Failure first_;
};

}  // namespace sinew::linalg::detail
