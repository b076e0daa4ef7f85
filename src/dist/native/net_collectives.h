// Collectives over a point-to-point Transport (groups spanning hosts).
// Ring for large messages, recursive doubling for small allreduce on
// power-of-two worlds, binomial trees for broadcast and reduce.
// Assumptions: tensors are contiguous and validated by ProcessGroup.
#pragma once

#include <cstdint>
#include <vector>

#include "sinew/dist/reduce_op.h"
#include "sinew/dist/transport.h"
#include "sinew/tensor/tensor_view.h"
#include "dist/shm/shm_engine.h"  // OpDesc, OpKind

namespace sinew::dist::net {

struct Call {
  Transport& transport;
  uint64_t seq;
  Deadline deadline;
};

// Every rank learns the smallest and largest descriptor in the group by a
// dissemination exchange (ceil(log2 W) rounds of 96 bytes), so a mismatch
// raises the same InvalidArgument on every rank.
void check_args(const Call& c, OpDesc mine, bool check_count);

void allreduce(const Call& c, const TensorView& t, const ReduceOp& op);
void broadcast(const Call& c, const TensorView& t, int root);
void reduce(const Call& c, const TensorView& t, int root, const ReduceOp& op);
void allgather(const Call& c, const TensorView& out, const TensorView& in);
void gather(const Call& c, const TensorView& out, const TensorView& in, int root);
void scatter(const Call& c, const TensorView& out, const TensorView& in, int root);
void reduce_scatter(const Call& c, const TensorView& out, const TensorView& in, const ReduceOp& op);
void all_to_all(const Call& c, const TensorView& out, const TensorView& in,
                const std::vector<int64_t>& out_splits, const std::vector<int64_t>& in_splits);
void barrier(const Call& c);

}  // namespace sinew::dist::net
