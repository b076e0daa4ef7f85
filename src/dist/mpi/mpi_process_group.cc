// The mpi backend: sinew's ProcessGroup over MPI (the role of PyTorch's
// ProcessGroupMPI). Rank and size come from MPI; the store is not used.
//
// Every op runs on the group's OpQueue worker in issue order as a
// non-blocking MPI call (MPI_Iallreduce, MPI_Isend, ...) that the worker
// polls with MPI_Testall, so the group timeout and abort() are honoured.
// When an op fails that way, receives are cancelled, but MPI cannot cancel a
// collective: it stays pending, MPI may still write into its buffers, and
// the group's communicator is unusable; re-create the group (or the job).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <cstring>
#include <thread>

#include "dist/backend_util.h"
#include "dist/op_queue.h"
#include "mpi_runtime.h"
#include "sinew/core/check.h"
#include "sinew/core/log.h"
#include "sinew/dist/process_group.h"

namespace sinew::dist {
namespace {

int count_of(int64_t n, const std::string& arg) {
  SINEW_ARG_CHECK(n <= INT_MAX, arg, n, "at most 2147483647 elements (MPI counts are int)");
  return static_cast<int>(n);
}

// MPI_Comm_create_group tags must be equal on every member; any value up to
// 32767 is valid everywhere.
int subgroup_tag(const std::string& tag) {
  uint32_t h = 2166136261u;
  for (unsigned char c : tag) h = (h ^ c) * 16777619u;
  return static_cast<int>(h & 0x7fff);
}

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

class MpiProcessGroup final : public ProcessGroup {
 public:
  // A group over all of MPI_COMM_WORLD. The duplicate is started here, on
  // the caller's thread: collective calls on one communicator must come in
  // the same order on every rank, which program order guarantees and racing
  // worker threads of several world groups would not. The init step awaits it.
  MpiProcessGroup(int rank, int size, std::string name, Millis timeout)
      : ProcessGroup(rank, size, std::move(name), timeout),
        queue_(std::make_unique<OpQueue>(fmt::format("mpi:{}", this->name()))) {
    MPI_Request req = MPI_REQUEST_NULL;
    {
      mpi::Lock lock;
      mpi::check(MPI_Comm_idup(MPI_COMM_WORLD, &pending_comm_, &req), "MPI_Comm_idup(MPI_COMM_WORLD)");
    }
    const Deadline deadline = Deadline::after(timeout);
    queue_->post_init([this, req, deadline] {
      std::vector<MPI_Request> reqs{req};
      wait_requests(reqs, deadline, fmt::format("init of mpi group '{}' (MPI_Comm_idup)", this->name()));
      mpi::Lock lock;
      mpi::check(MPI_Comm_set_errhandler(pending_comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
      comm_ = pending_comm_;
      SINEW_INFO(kInit, "mpi group '{}': rank {} of {} ready", this->name(), this->rank(), this->size());
    });
  }

  // A group over a communicator made by make_subgroup.
  MpiProcessGroup(MPI_Comm comm, int rank, int size, std::string name, Millis timeout)
      : ProcessGroup(rank, size, std::move(name), timeout),
        comm_(comm),
        queue_(std::make_unique<OpQueue>(fmt::format("mpi:{}", this->name()))) {}

  ~MpiProcessGroup() override {
    abort("the process group was destroyed");  // the worker stops polling at once
    queue_.reset();                            // joins it: nothing uses comm_ after this
    if (comm_ == MPI_COMM_NULL) return;
    try {
      mpi::Lock lock;
      MPI_Comm_free(&comm_);
    } catch (const Error&) {
      // MPI is finalized: it already released the communicator.
    }
  }

  std::string backend_name() const override { return "mpi"; }

  // The worker sees the flag at its next poll and gives up on the op in
  // flight; the communicator is unusable afterwards.
  void abort(const std::string& reason) override {
    if (!aborted_.load()) run_abort_hooks(reason);
    // Waiters get the reason: their works complete before the worker can
    // notice the flag and fail them with its own message.
    queue_->abort(Status(ErrorCode::kAborted, fmt::format("mpi group '{}' (rank {} of {}) was aborted: {}",
                                                          name(), rank(), size(), reason)));
    aborted_ = true;
  }

  Status init_status() const override { return queue_->init_status(); }
  void wait_ready(Deadline deadline) override { queue_->wait_init(deadline); }

 protected:
  void do_allreduce(const WorkPtr& work, const TensorView& t, const ReduceOp& op) override {
    const int n = count_of(t.numel(), "tensor.numel");
    run(work, [this, t, op, n](Deadline deadline, const std::string& what) {
      prepare_reduction(t.data(), n, t.dtype(), op);
      start_and_wait(deadline, what, [&](MPI_Request* req) {
        return MPI_Iallreduce(MPI_IN_PLACE, nonnull_data(t), n, mpi::datatype(t.dtype()),
                              mpi::reduce_op(t.dtype(), wire_kind(op)), comm_, req);
      });
      finalize_reduction(t.data(), n, t.dtype(), op, size());
    });
  }

  void do_broadcast(const WorkPtr& work, const TensorView& t, int root) override {
    const int n = count_of(t.numel(), "tensor.numel");
    run(work, [this, t, root, n](Deadline deadline, const std::string& what) {
      start_and_wait(deadline, what, [&](MPI_Request* req) {
        return MPI_Ibcast(nonnull_data(t), n, mpi::datatype(t.dtype()), root, comm_, req);
      });
    });
  }

  // Non-roots' tensors are inputs only: they are left unchanged.
  void do_reduce(const WorkPtr& work, const TensorView& t, int root, const ReduceOp& op) override {
    const int n = count_of(t.numel(), "tensor.numel");
    run(work, [this, t, root, op, n](Deadline deadline, const std::string& what) {
      const bool is_root = rank() == root;
      if (is_root) prepare_reduction(t.data(), n, t.dtype(), op);
      std::optional<ReduceInput> in;
      if (!is_root) in.emplace(t, op);
      start_and_wait(deadline, what, [&](MPI_Request* req) {
        return MPI_Ireduce(is_root ? MPI_IN_PLACE : in->data(), is_root ? nonnull_data(t) : nullptr, n,
                           mpi::datatype(t.dtype()), mpi::reduce_op(t.dtype(), wire_kind(op)), root,
                           comm_, req);
      });
      if (is_root) finalize_reduction(t.data(), n, t.dtype(), op, size());
    });
  }

  void do_allgather(const WorkPtr& work, const TensorView& out, const TensorView& in) override {
    const int n = count_of(in.numel(), "input.numel");
    run(work, [this, out, in, n](Deadline deadline, const std::string& what) {
      // MPI forbids aliased buffers; an input that is this rank's block of
      // the output is MPI_IN_PLACE.
      const bool in_place = in.nbytes() > 0 && static_cast<const uint8_t*>(in.data()) ==
                                                   static_cast<const uint8_t*>(out.data()) + rank() * in.nbytes();
      const MPI_Datatype type = mpi::datatype(in.dtype());
      start_and_wait(deadline, what, [&](MPI_Request* req) {
        return MPI_Iallgather(in_place ? MPI_IN_PLACE : nonnull_data(in), n, type, nonnull_data(out), n,
                              type, comm_, req);
      });
    });
  }

  void do_gather(const WorkPtr& work, const TensorView& out, const TensorView& in, int root) override {
    const int n = count_of(in.numel(), "input.numel");
    run(work, [this, out, in, root, n](Deadline deadline, const std::string& what) {
      const MPI_Datatype type = mpi::datatype(in.dtype());
      start_and_wait(deadline, what, [&](MPI_Request* req) {
        return MPI_Igather(nonnull_data(in), n, type, rank() == root ? nonnull_data(out) : nullptr, n,
                           type, root, comm_, req);
      });
    });
  }

  void do_scatter(const WorkPtr& work, const TensorView& out, const TensorView& in, int root) override {
    const int n = count_of(out.numel(), "output.numel");
    run(work, [this, out, in, root, n](Deadline deadline, const std::string& what) {
      const MPI_Datatype type = mpi::datatype(out.dtype());
      start_and_wait(deadline, what, [&](MPI_Request* req) {
        return MPI_Iscatter(rank() == root ? nonnull_data(in) : nullptr, n, type, nonnull_data(out), n,
                            type, root, comm_, req);
      });
    });
  }

  void do_reduce_scatter(const WorkPtr& work, const TensorView& out, const TensorView& in,
                         const ReduceOp& op) override {
    const int n = count_of(out.numel(), "output.numel");
    run(work, [this, out, in, op, n](Deadline deadline, const std::string& what) {
      ReduceInput input(in, op);
      start_and_wait(deadline, what, [&](MPI_Request* req) {
        return MPI_Ireduce_scatter_block(input.data(), nonnull_data(out), n,
                                         mpi::datatype(out.dtype()),
                                         mpi::reduce_op(out.dtype(), wire_kind(op)), comm_, req);
      });
      finalize_reduction(out.data(), n, out.dtype(), op, size());
    });
  }

  void do_all_to_all(const WorkPtr& work, const TensorView& out, const TensorView& in,
                     const std::vector<int64_t>& out_splits,
                     const std::vector<int64_t>& in_splits) override {
    check_own_split(out_splits, in_splits, rank());
    std::vector<int> out_counts, out_displs, in_counts, in_displs;
    int64_t out_off = 0, in_off = 0;
    for (int r = 0; r < size(); ++r) {
      out_counts.push_back(count_of(out_splits[r], "output_split_sizes"));
      in_counts.push_back(count_of(in_splits[r], "input_split_sizes"));
      out_displs.push_back(count_of(out_off, "output offset"));
      in_displs.push_back(count_of(in_off, "input offset"));
      out_off += out_splits[r];
      in_off += in_splits[r];
    }
    auto all_equal = [](const std::vector<int>& v) { return std::equal(v.begin() + 1, v.end(), v.begin()); };
    const bool even = all_equal(out_counts) && all_equal(in_counts) && out_counts[0] == in_counts[0];
    run(work, [=, this](Deadline deadline, const std::string& what) {
      const MPI_Datatype type = mpi::datatype(in.dtype());
      start_and_wait(deadline, what, [&](MPI_Request* req) {
        if (even)
          return MPI_Ialltoall(nonnull_data(in), in_counts[0], type, nonnull_data(out), out_counts[0], type,
                               comm_, req);
        return MPI_Ialltoallv(nonnull_data(in), in_counts.data(), in_displs.data(), type, nonnull_data(out),
                              out_counts.data(), out_displs.data(), type, comm_, req);
      });
    });
  }

  void do_barrier(const WorkPtr& work) override {
    run(work, [this](Deadline deadline, const std::string& what) {
      start_and_wait(deadline, what, [&](MPI_Request* req) { return MPI_Ibarrier(comm_, req); });
    });
  }

  // All sends and receives are posted, then completed together.
  void do_batch_p2p(const WorkPtr& work, const std::vector<P2POp>& ops) override {
    std::vector<int> counts;
    for (const auto& op : ops) {
      SINEW_ARG_CHECK(op.tag <= mpi::tag_upper_bound(), "tag", op.tag,
                      fmt::format("a tag <= {} (MPI_TAG_UB)", mpi::tag_upper_bound()));
      counts.push_back(count_of(op.tensor.numel(), "tensor.numel"));
    }
    run(work, [this, ops, counts](Deadline deadline, const std::string& what) {
      std::vector<MPI_Request> reqs(ops.size(), MPI_REQUEST_NULL);
      std::vector<bool> is_recv;
      for (const auto& op : ops) is_recv.push_back(op.kind == P2POp::Kind::kRecv);
      {
        mpi::Lock lock;
        for (size_t i = 0; i < ops.size(); ++i) {
          const auto& op = ops[i];
          const MPI_Datatype type = mpi::datatype(op.tensor.dtype());
          int rc = is_recv[i] ? MPI_Irecv(nonnull_data(op.tensor), counts[i], type, op.peer, op.tag, comm_, &reqs[i])
                              : MPI_Isend(nonnull_data(op.tensor), counts[i], type, op.peer, op.tag, comm_, &reqs[i]);
          if (rc != MPI_SUCCESS) {
            release_p2p(reqs, is_recv);
            mpi::check(rc, fmt::format("{}: posting {} rank {} (tag {})", what,
                                       is_recv[i] ? "recv from" : "send to", op.peer, op.tag));
          }
        }
      }
      wait_requests(reqs, deadline, what, &is_recv);
    });
  }

  // MPI_Comm_create_group is collective over the members only (non-members
  // never get here). It runs as a task on this group's queue, so on every
  // member it is ordered the same way with this group's ops; it has no
  // non-blocking form, so that task blocks (holding the MPI lock) until
  // every member has called it.
  std::shared_ptr<ProcessGroup> make_subgroup(const std::vector<int>& ranks, int new_rank,
                                              const std::string& tag) override {
    auto comm = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
    auto work = std::make_shared<Work>("make_subgroup", 0, Deadline::after(timeout()));
    queue_->post(work, [this, ranks, tag, comm] {
      mpi::Lock lock;
      MPI_Group parent = MPI_GROUP_NULL, members = MPI_GROUP_NULL;
      mpi::check(MPI_Comm_group(comm_, &parent), "MPI_Comm_group");
      int rc = MPI_Group_incl(parent, static_cast<int>(ranks.size()), ranks.data(), &members);
      if (rc == MPI_SUCCESS) rc = MPI_Comm_create_group(comm_, members, subgroup_tag(tag), comm.get());
      if (members != MPI_GROUP_NULL) MPI_Group_free(&members);
      MPI_Group_free(&parent);
      mpi::check(rc, fmt::format("creating the communicator of subgroup '{}' (ranks {})", tag, ranks));
      mpi::check(MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    });
    work->wait();
    return std::make_shared<MpiProcessGroup>(*comm, new_rank, static_cast<int>(ranks.size()), tag,
                                             timeout());
  }

 private:
  using Body = std::function<void(Deadline, const std::string&)>;

  // Queues `body` with the op's deadline (the group timeout from now).
  void run(const WorkPtr& work, Body body) {
    const Deadline deadline = Deadline::after(timeout());
    std::string what = fmt::format("{} (seq {}) on mpi group '{}' (rank {} of {})", work->op_name(),
                                   work->seq(), name(), rank(), size());
    queue_->post(work, [this, deadline, what = std::move(what), body = std::move(body)] {
      // A collective started late would only leave the communicator broken.
      if (deadline.expired())
        throw TimeoutError(fmt::format("{} waited behind earlier operations past the group timeout "
                                       "({} ms)", what, timeout().count()));
      body(deadline, what);
    });
  }

  template <class Start>
  void start_and_wait(Deadline deadline, const std::string& what, Start&& start) {
    std::vector<MPI_Request> reqs(1, MPI_REQUEST_NULL);
    {
      mpi::Lock lock;
      mpi::check(start(&reqs[0]), what);
    }
    wait_requests(reqs, deadline, what);
  }

  // Polls until every request completes, the deadline passes or the group
  // is aborted. On failure p2p requests are released (receives cancelled);
  // collective requests cannot be, and stay pending.
  void wait_requests(std::vector<MPI_Request>& reqs, Deadline deadline, const std::string& what,
                     const std::vector<bool>* p2p_is_recv = nullptr) {
    std::vector<MPI_Status> statuses(reqs.size());
    Backoff backoff;
    for (;;) {
      int done = 0;
      {
        mpi::Lock lock;
        int rc = MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, statuses.data());
        if (rc == MPI_ERR_IN_STATUS) {
          for (const auto& st : statuses)
            if (st.MPI_ERROR != MPI_SUCCESS && st.MPI_ERROR != MPI_ERR_PENDING) rc = st.MPI_ERROR;
        }
        if (rc != MPI_SUCCESS) {
          if (p2p_is_recv) release_p2p(reqs, *p2p_is_recv);
          mpi::check(rc, what);
        }
      }
      if (done) return;
      if (aborted_ || deadline.expired()) {
        if (p2p_is_recv) {
          mpi::Lock lock;
          release_p2p(reqs, *p2p_is_recv);
        }
        if (aborted_) throw AbortedError(fmt::format("{}: the group was aborted", what));
        throw TimeoutError(fmt::format("{} did not complete within the group timeout ({} ms)", what,
                                       timeout().count()));
      }
      backoff.pause();
    }
  }

  // Needs the MPI lock.
  static void release_p2p(std::vector<MPI_Request>& reqs, const std::vector<bool>& is_recv) {
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i] == MPI_REQUEST_NULL) continue;
      if (is_recv[i]) MPI_Cancel(&reqs[i]);
      MPI_Request_free(&reqs[i]);
    }
  }

  MPI_Comm pending_comm_ = MPI_COMM_NULL;  // written by MPI_Comm_idup until init completes
  MPI_Comm comm_ = MPI_COMM_NULL;          // used on the worker only
  std::unique_ptr<OpQueue> queue_;
};

}  // namespace

ProcessGroupPtr make_mpi_process_group(const GroupOptions& options) {
  mpi::ensure_initialized();
  int rank = 0, size = 0;
  {
    mpi::Lock lock;
    mpi::check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
    mpi::check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  }
  if (options.rank >= 0 && options.rank != rank)
    throw InvalidArgument::make("rank", std::to_string(options.rank),
                                fmt::format("-1 or this process's MPI rank {} (the mpi backend takes rank "
                                            "and size from MPI)", rank));
  if (options.size >= 0 && options.size != size)
    throw InvalidArgument::make("size", std::to_string(options.size),
                                fmt::format("-1 or the MPI world size {} (the mpi backend takes rank "
                                            "and size from MPI)", size));
  return std::make_shared<MpiProcessGroup>(rank, size, options.name, options.timeout);
}

}  // namespace sinew::dist
