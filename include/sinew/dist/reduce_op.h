// Reduction operators (torch.distributed.ReduceOp).
#pragma once

#include <string>

#include "sinew/tensor/dtype.h"

namespace sinew::dist {

enum class ReduceKind : uint8_t { kSum, kProd, kMin, kMax, kAvg, kBand, kBor, kBxor, kPremulSum };

struct ReduceOp {
  ReduceKind kind = ReduceKind::kSum;
  // The factor of premul_sum: each input is multiplied by it before the sum.
  double factor = 1.0;

  ReduceOp() = default;
  ReduceOp(ReduceKind k) : kind(k) {}  // NOLINT: implicit, like ReduceOp.SUM
  static ReduceOp premul_sum(double f) {
    ReduceOp op(ReduceKind::kPremulSum);
    op.factor = f;
    return op;
  }
  bool operator==(const ReduceOp&) const = default;
  std::string name() const;  // "sum", "premul_sum(0.5)", ...
};

const char* reduce_kind_name(ReduceKind k);
ReduceKind parse_reduce_kind(const std::string& name);

// Throws InvalidArgument if `op` makes no sense for `dtype` (bitwise ops on
// floats, premul_sum on integers, ...).
void check_reduce_op(const ReduceOp& op, DType dtype);

// dst[i] = dst[i] (op) src[i] for `count` elements. For kAvg and kPremulSum
// this accumulates the plain sum; see finalize_reduction.
void reduce_into(void* dst, const void* src, size_t count, DType dtype, ReduceKind kind);
// dst[i] = a[i] (op) b[i].
void reduce_pair(void* dst, const void* a, const void* b, size_t count, DType dtype, ReduceKind kind);
// Applies what must happen once to each input before reduction (premul_sum's
// factor) in place.
void prepare_reduction(void* data, size_t count, DType dtype, const ReduceOp& op);
// Applies what must happen once after the sum (avg divides by world size).
void finalize_reduction(void* data, size_t count, DType dtype, const ReduceOp& op, int world_size);

}  // namespace sinew::dist
