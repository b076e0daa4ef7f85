#include "backend_util.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>

#include "sinew/core/check.h"

namespace sinew::dist {

ReduceKind wire_kind(const ReduceOp& op) {
  if (op.kind == ReduceKind::kAvg || op.kind == ReduceKind::kPremulSum) return ReduceKind::kSum;
  return op.kind;
}

ReduceInput::ReduceInput(const TensorView& t, const ReduceOp& op) : original_(nonnull_data(t)) {
  if (op.kind != ReduceKind::kPremulSum || op.factor == 1.0 || t.numel() == 0) return;
  scratch_.resize(t.nbytes());
  std::memcpy(scratch_.data(), t.data(), t.nbytes());
  prepare_reduction(scratch_.data(), static_cast<size_t>(t.numel()), t.dtype(), op);
}

void check_own_split(const std::vector<int64_t>& out_splits, const std::vector<int64_t>& in_splits,
                     int rank) {
  SINEW_ARG_CHECK(out_splits[rank] == in_splits[rank], "output_split_sizes",
                  fmt::format("{} (entry {} is {})", out_splits, rank, out_splits[rank]),
                  fmt::format("entry {} equal to input_split_sizes[{}] = {} (what rank {} keeps "
                              "for itself)", rank, rank, in_splits[rank], rank));
}

void* nonnull_data(const TensorView& t) {
  static uint8_t dummy;
  return t.data() ? t.data() : &dummy;
}

}  // namespace sinew::dist
