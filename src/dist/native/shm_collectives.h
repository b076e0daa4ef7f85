// Collectives on the shared-memory engine (one host). Each function runs
// the whole operation on the calling thread and throws on failure.
// Assumptions: tensors are contiguous and validated by ProcessGroup.
#pragma once

#include <cstdint>
#include <vector>

#include "sinew/dist/reduce_op.h"
#include "sinew/tensor/tensor_view.h"
#include "dist/shm/shm_engine.h"

namespace sinew::dist::shm {

struct Call {
  ShmEngine& engine;
  uint64_t seq;
  Deadline deadline;
};

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

}  // namespace sinew::dist::shm
