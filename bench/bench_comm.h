// What the collectives benchmark times: the same loop drives sinew's process
// groups and the peers (raw MPI calls, so MPI is measured at its best, not
// through a wrapper).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace sinew::bench {

class BenchComm {
 public:
  virtual ~BenchComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // One op over `bytes` of float32 (nccl-tests' sizes: the total buffer).
  virtual void run(const std::string& op, int64_t bytes, float* a, float* b) = 0;
  virtual void barrier() = 0;
  virtual double max_over_ranks(double v) = 0;
  virtual int64_t from_rank0(int64_t v) = 0;
};

// Raw MPI (MPI_Allreduce, MPI_Allgather, ...); nullptr when built without MPI.
std::unique_ptr<BenchComm> make_mpi_bench_comm();

}  // namespace sinew::bench
