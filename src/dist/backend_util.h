// What the library backends (gloo, mpi) share on top of the ProcessGroup
// contract: how a ReduceOp maps onto a plain elementwise combine, and the
// checks their transports need beyond the base class's validation.
// Internal to dist.
#pragma once

#include <cstdint>
#include <vector>

#include "sinew/dist/reduce_op.h"
#include "sinew/tensor/tensor_view.h"

namespace sinew::dist {

// The combine a transport runs while data moves. avg and premul_sum travel
// as sums: their once-per-input and once-per-result steps are
// prepare_reduction and finalize_reduction.
ReduceKind wire_kind(const ReduceOp& op);

// A reduction input that must stay unchanged (reduce on non-roots,
// reduce_scatter inputs): premul_sum's factor is applied to a scratch copy.
class ReduceInput {
 public:
  ReduceInput(const TensorView& t, const ReduceOp& op);
  const void* data() const { return scratch_.empty() ? original_ : scratch_.data(); }  // never null

 private:
  const void* original_;
  std::vector<uint8_t> scratch_;
};

// all_to_all_v: what this rank keeps for itself must be the same size on
// both sides (the only part of the split agreement one rank can check).
void check_own_split(const std::vector<int64_t>& out_splits, const std::vector<int64_t>& in_splits,
                     int rank);

// Transports take a pointer even for zero bytes; some reject null.
void* nonnull_data(const TensorView& t);

}  // namespace sinew::dist
