// The mpi impl of `sinew bench collectives`: plain MPI calls, no wrapper.
#include "bench_comm.h"

#ifdef SINEW_HAVE_MPI
#include <mpi.h>

#include <algorithm>

#include "sinew/core/error.h"

namespace sinew::bench {
namespace {

class MpiComm final : public BenchComm {
 public:
  MpiComm() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) MPI_Init(nullptr, nullptr);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiComm() override { MPI_Finalize(); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void run(const std::string& op, int64_t bytes, float* a, float* b) override {
    const int n = static_cast<int>(std::max<int64_t>(bytes / 4, 1));
    const int per = std::max(n / size_, 1);
    if (op == "allreduce") MPI_Allreduce(MPI_IN_PLACE, a, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (op == "broadcast") MPI_Bcast(a, n, MPI_FLOAT, 0, MPI_COMM_WORLD);
    else if (op == "allgather") MPI_Allgather(a, per, MPI_FLOAT, b, per, MPI_FLOAT, MPI_COMM_WORLD);
    else if (op == "reduce_scatter") MPI_Reduce_scatter_block(a, b, per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (op == "all_to_all") MPI_Alltoall(a, per, MPI_FLOAT, b, per, MPI_FLOAT, MPI_COMM_WORLD);
    else throw InvalidArgument::make("op", op, "a benchmarked collective");
  }
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
  double max_over_ranks(double v) override {
    MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return v;
  }
  int64_t from_rank0(int64_t v) override {
    MPI_Bcast(&v, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    return v;
  }

 private:
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<BenchComm> make_mpi_bench_comm() { return std::make_unique<MpiComm>(); }

}  // namespace sinew::bench
#else
namespace sinew::bench {
std::unique_ptr<BenchComm> make_mpi_bench_comm() { return nullptr; }
}  // namespace sinew::bench
#endif
