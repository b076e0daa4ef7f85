// Process-wide MPI state for the mpi backend: initialisation, the lock that
// serialises every MPI call, and sinew dtype/op -> MPI handles. Internal.
//
// MPI is initialised with MPI_THREAD_SERIALIZED: each group's worker is its
// own thread, so calls from several groups are serialised by one
// process-wide lock (mpi::Lock). Nothing blocks while holding it except
// MPI_Comm_create_group, which has no non-blocking form.
#pragma once

#include <mpi.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "sinew/core/deadline.h"
#include "sinew/dist/reduce_op.h"

namespace sinew::dist::mpi {

// Initialises MPI unless the program already did (then it must provide at
// least MPI_THREAD_SERIALIZED). When sinew initialised it, MPI_Finalize runs
// at exit. Throws IoError when MPI is unusable.
void ensure_initialized();

// Holds the process-wide MPI lock. Throws IoError once MPI has been
// finalized, so no MPI call happens after MPI_Finalize.
class Lock {
 public:
  Lock();

 private:
  std::unique_lock<std::mutex> lock_;
};

// Rank 0's `value` (at most kShareMaxBytes) on every rank of
// MPI_COMM_WORLD. A non-blocking broadcast polled until `deadline`, then
// TimeoutError. Every rank of the world must call it.
constexpr size_t kShareMaxBytes = 512;
std::string share_from_rank0(const std::string& value, Deadline deadline);

// Throws IoError naming `what` and MPI's message unless rc is MPI_SUCCESS.
void check(int rc, const std::string& what);
std::string error_string(int rc);

// The handles below need ensure_initialized() first.
MPI_Datatype datatype(DType dtype);
// MPI's own op where it computes what sinew's reduce_pair does (sum, prod,
// min, max and bitwise ops on f32/f64/ints); else a user op over
// reduce_pair (narrow floats, bool). `kind` is a wire kind (see wire_kind).
MPI_Op reduce_op(DType dtype, ReduceKind kind);
int tag_upper_bound();

// Polling backs off from yielding to short sleeps: latency for short ops,
// little CPU for long ones, abort() seen within a millisecond.
class Backoff {
 public:
  void pause() {
    if (++polls_ < 64) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(200));
  }

 private:
  int polls_ = 0;
};

}  // namespace sinew::dist::mpi
