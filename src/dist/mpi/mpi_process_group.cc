// The mpi backend: sinew's ProcessGroup over MPI (the role of PyTorch's
// ProcessGroupMPI). Rank and size come from MPI; the store is not used.
//
// Every op runs on the group's OpQueue worker in issue order as a
// non-blocking MPI call (MPI_Iallreduce, MPI_Isend, ...) that the worker
// polls with MPI_Testall, so the group timeout and abort() are honoured.
// When an op fails that way, receives are cancelled, but MPI cannot cancel a
// collective: it stays pending, MPI may still write into its buffers, and
// the group's communicator is unusable; reconfigure() builds a new one
// (mpi_recovery.h).
//
// Failure detection without ULFM: the ranks exchange pids at init, and a
// wait checks the pids of its peers on this host every 20 ms. A dead peer
// revokes the group: the op fails with PeerLostError and so does every later
// op, at once; the survivors then agree on the failed set and reconfigure().
// Plain mpirun kills the whole job when a rank dies; survivors only live on
// under `mpirun --enable-recovery`. A rank on another host that dies is not
// seen (nothing reports it without ULFM): ops time out instead.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <cstring>
#include <thread>

#include <unistd.h>

#include <charconv>
#include <mutex>
#include <set>

#include "dist/backend_util.h"
#include "dist/op_queue.h"
#include "dist/process_identity.h"
#include "mpi_recovery.h"
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

class MpiProcessGroup final : public ProcessGroup {
 public:
  // A group over all of MPI_COMM_WORLD. The duplicates (the group's and the
  // lineage's base for reconfigure) are started here, on the caller's
  // thread: collective calls on one communicator must come in the same order
  // on every rank, which program order guarantees and racing worker threads
  // of several world groups would not. The init step awaits them and
  // exchanges pids and hosts for failure detection.
  MpiProcessGroup(int rank, int size, std::string name, Millis timeout)
      : ProcessGroup(rank, size, std::move(name), timeout),
        members_(identity(size)),
        queue_(std::make_unique<OpQueue>(fmt::format("mpi:{}", this->name()))) {
    std::vector<MPI_Request> reqs(2, MPI_REQUEST_NULL);
    {
      mpi::Lock lock;
      mpi::check(MPI_Comm_idup(MPI_COMM_WORLD, &pending_comm_, &reqs[0]), "MPI_Comm_idup(MPI_COMM_WORLD)");
      mpi::check(MPI_Comm_idup(MPI_COMM_WORLD, &pending_base_, &reqs[1]), "MPI_Comm_idup(MPI_COMM_WORLD)");
    }
    const Deadline deadline = Deadline::after(timeout);
    queue_->post_init([this, reqs, deadline]() mutable {
      const std::string what = fmt::format("init of mpi group '{}'", this->name());
      wait_requests(reqs, deadline, what + " (MPI_Comm_idup)");
      {
        mpi::Lock lock;
        mpi::check(MPI_Comm_set_errhandler(pending_comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
        mpi::check(MPI_Comm_set_errhandler(pending_base_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
      }
      comm_ = pending_comm_;
      lineage_ = exchange_identities(deadline, what);
      SINEW_INFO(kInit, "mpi group '{}': rank {} of {} ready", this->name(), this->rank(), this->size());
    });
  }

  // A group over a communicator made by make_subgroup or reconfigure;
  // members[r] is the world rank of its rank r.
  MpiProcessGroup(MPI_Comm comm, int rank, std::string name, Millis timeout, std::shared_ptr<mpi::Lineage> lineage,
                  std::vector<int> members, uint64_t epoch)
      : ProcessGroup(rank, static_cast<int>(members.size()), std::move(name), timeout),
        comm_(comm),
        lineage_(std::move(lineage)),
        members_(std::move(members)),
        epoch_(epoch),
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

  uint64_t epoch() const override { return epoch_; }

  // Rounds of exchanges among the presumed survivors on the lineage's base
  // communicator: each sends the failed set it knows; a round in which every
  // set equals one's own decides it (every member saw the same messages),
  // otherwise the union goes to the next round. A peer found dead while
  // awaited ends the round early with it added.
  std::vector<int> agree_on_failures(Deadline deadline) override {
    wait_ready(deadline);
    std::set<int> failed = known_failed();
    for (int r = 0; r < size(); ++r)
      if (r != rank() && lineage_->dead(members_[r])) failed.insert(r);
    const uint64_t seed = mpi::hash_of(fmt::format("agree|{}|{}|{}", name(), epoch_, members_));
    for (uint64_t round = 0;; ++round) {
      const std::vector<uint64_t> mine = encode(failed);
      std::vector<int> peers;
      for (int r = 0; r < size(); ++r)
        if (r != rank() && !failed.count(r)) peers.push_back(members_[r]);
      auto x = mpi::exchange(*lineage_, peers, mpi::agreement_tag(mpi::hash_of(std::to_string(round), seed)), mine,
                             deadline,
                             fmt::format("agreeing on the failed ranks of mpi group '{}' epoch {} (rank {} of {}, "
                                         "round {})", name(), epoch_, rank(), size(), round));
      for (int w : x.dead) failed.insert(group_rank_of(w));
      if (!x.dead.empty()) continue;
      bool same = true;
      for (const auto& got : x.got) {
        same &= got == mine;
        for (int r : decode(got)) failed.insert(r);
      }
      if (!same) continue;
      // Failures are pids seen gone: a live rank is never in the set.
      if (failed.count(rank()))
        throw InternalError(fmt::format("mpi group '{}': the survivors count rank {} (alive) as failed", name(),
                                        rank()));
      revoke(failed);
      return {failed.begin(), failed.end()};
    }
  }

  // Survivors keep their order; the new group has the next epoch.
  std::shared_ptr<ProcessGroup> reconfigure(Deadline deadline) override {
    const auto failed = agree_on_failures(deadline);
    std::vector<int> members;
    int new_rank = 0;
    for (int r = 0; r < size(); ++r) {
      if (std::binary_search(failed.begin(), failed.end(), r)) continue;
      if (r == rank()) new_rank = static_cast<int>(members.size());
      members.push_back(members_[r]);
    }
    const std::string what = fmt::format("reconfigure of mpi group '{}' epoch {} (rank {} of {})", name(), epoch_,
                                         rank(), size());
    MPI_Comm comm = MPI_COMM_NULL;
    try {
      comm = mpi::build_comm(*lineage_, members,
                             mpi::hash_of(fmt::format("auto|{}|{}|{}|{}", name(), epoch_, members_, failed)),
                             deadline, what);
    } catch (const PeerLostError& e) {
      // A survivor died after the agreement: the next reconfigure() leaves it out.
      std::set<int> lost;
      for (int i : e.ranks()) lost.insert(group_rank_of(members[i]));
      revoke(lost);
      throw PeerLostError(fmt::format("{}; call reconfigure() again", e.what()), {lost.begin(), lost.end()});
    }
    if (failed.empty())
      SINEW_INFO(kFt, "mpi group '{}' epoch {}: no failed ranks; rank {} continues as rank {} of {}", name(), epoch_,
                 rank(), new_rank, members.size());
    else
      SINEW_WARN(kFt, "mpi group '{}' epoch {}: failed ranks {}; rank {} continues as rank {} of {}", name(), epoch_,
                 failed, rank(), new_rank, members.size());
    return std::make_shared<MpiProcessGroup>(comm, new_rank, name(), timeout(), lineage_, std::move(members),
                                             epoch_ + 1);
  }

  // Names the process (world rank and pid), so handles from any group of
  // the job resolve to the same member.
  std::string reconfigure_handle() const override {
    return fmt::format("mpi|{}|w{}|pid{}", name(), members_[rank()], ::getpid());
  }

  std::shared_ptr<ProcessGroup> reconfigure(const std::string& uuid, const std::vector<std::string>& handles,
                                            Millis timeout) override {
    const Deadline deadline = Deadline::after(timeout);
    wait_ready(deadline);
    SINEW_ARG_CHECK(!uuid.empty() && uuid.find('/') == std::string::npos, "uuid", fmt::format("'{}'", uuid),
                    "a non-empty id without '/'");
    std::vector<int> members;
    for (const auto& h : handles) members.push_back(world_rank_of_handle(h));
    const int me = lineage_->world_rank();
    const auto it = std::find(members.begin(), members.end(), me);
    SINEW_ARG_CHECK(it != members.end(), "handles", fmt::format("{}", handles),
                    fmt::format("a list containing this rank's handle '{}'", reconfigure_handle()));
    SINEW_ARG_CHECK(std::set<int>(members.begin(), members.end()).size() == members.size(), "handles",
                    fmt::format("{}", handles), "each rank's handle once");
    if (!lineage_->claim(uuid))
      throw InvalidArgument::make("uuid", fmt::format("'{}'", uuid),
                                  "a uuid not used before (this process already reconfigured with it; pass a "
                                  "fresh one)");
    const int new_rank = static_cast<int>(it - members.begin());
    const std::string what = fmt::format("reconfigure '{}' of mpi group '{}' (rank {} of {} -> rank {} of {})", uuid,
                                         name(), rank(), size(), new_rank, members.size());
    MPI_Comm comm = mpi::build_comm(*lineage_, members, mpi::hash_of("uuid|" + uuid), deadline, what);
    return std::make_shared<MpiProcessGroup>(comm, new_rank, name(), timeout, lineage_, std::move(members),
                                             epoch_ + 1);
  }

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
    std::vector<int> members;
    for (int r : ranks) members.push_back(members_[r]);
    return std::make_shared<MpiProcessGroup>(*comm, new_rank, tag, timeout(), lineage_, std::move(members), 0);
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
      if (auto failed = known_failed(); !failed.empty())
        throw PeerLostError(fmt::format("{}: the group was revoked: rank(s) {} failed; agree on the failed set "
                                        "and reconfigure() to continue with the survivors",
                                        what, std::vector<int>(failed.begin(), failed.end())),
                            std::vector<int>(failed.begin(), failed.end()));
      try {
        body(deadline, what);
      } catch (const PeerLostError&) {
        error_state_.store(ErrorState::kCommError);
        throw;
      } catch (const TimeoutError&) {
        error_state_.store(ErrorState::kTimeout);
        throw;
      }
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
    mpi::Backoff backoff;
    // Peers found dead at the last poll: what they sent before dying is
    // still delivered, so the op gets one more test before it fails.
    std::vector<int> dead;
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
      if (aborted_ || deadline.expired() || !dead.empty()) {
        if (p2p_is_recv) {
          mpi::Lock lock;
          release_p2p(reqs, *p2p_is_recv);
        }
        if (aborted_) throw AbortedError(fmt::format("{}: the group was aborted", what));
        if (!dead.empty()) {
          revoke({dead.begin(), dead.end()});
          throw PeerLostError(fmt::format("{}: rank(s) {} died (their processes on this host are gone); the "
                                          "group is revoked: agree on the failed set and reconfigure()",
                                          what, dead),
                              dead);
        }
        throw TimeoutError(fmt::format("{} did not complete within the group timeout ({} ms)", what,
                                       timeout().count()));
      }
      dead = dead_peers();
      if (dead.empty()) backoff.pause();
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

  static std::vector<int> identity(int n) {
    std::vector<int> v(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) v[i] = i;
    return v;
  }

  // Init step of a world group: every rank's pid and host, for the lineage.
  std::shared_ptr<mpi::Lineage> exchange_identities(Deadline deadline, const std::string& what) {
    const std::vector<uint64_t> mine{static_cast<uint64_t>(::getpid()), mpi::hash_of(host_identity())};
    std::vector<uint64_t> all(2 * static_cast<size_t>(size()));
    std::vector<MPI_Request> reqs(1, MPI_REQUEST_NULL);
    {
      mpi::Lock lock;
      mpi::check(MPI_Iallgather(mine.data(), 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, comm_, &reqs[0]),
                 what + " (MPI_Iallgather of pids)");
    }
    wait_requests(reqs, deadline, what + " (MPI_Iallgather of pids)");
    std::vector<pid_t> pids;
    std::vector<uint64_t> hosts;
    for (int r = 0; r < size(); ++r) {
      pids.push_back(static_cast<pid_t>(all[2 * r]));
      hosts.push_back(all[2 * r + 1]);
    }
    return std::make_shared<mpi::Lineage>(pending_base_, std::move(pids), hosts);
  }

  // The world rank a handle names; InvalidArgument unless it is a handle of
  // a live process of this job.
  int world_rank_of_handle(const std::string& h) const {
    const std::string expected = "a handle from reconfigure_handle() of an mpi group of this job "
                                 "('mpi|<name>|w<world rank>|pid<pid>')";
    const size_t w = h.rfind("|w"), p = h.rfind("|pid");
    SINEW_ARG_CHECK(h.rfind("mpi|", 0) == 0 && w != std::string::npos && p != std::string::npos && w < p,
                    "handles", fmt::format("'{}'", h), expected);
    int world = -1;
    long pid = -1;
    const char* end = h.data() + h.size();
    auto [wend, wec] = std::from_chars(h.data() + w + 2, h.data() + p, world);
    auto [pend, pec] = std::from_chars(h.data() + p + 4, end, pid);
    SINEW_ARG_CHECK(wec == std::errc() && wend == h.data() + p && pec == std::errc() && pend == end &&
                        world >= 0 && world < lineage_->world_size() && lineage_->pid(world) == pid,
                    "handles", fmt::format("'{}'", h), expected);
    return world;
  }

  int group_rank_of(int world) const {
    return static_cast<int>(std::find(members_.begin(), members_.end(), world) - members_.begin());
  }

  // The failed set as a bitmask over this group's ranks.
  std::vector<uint64_t> encode(const std::set<int>& ranks) const {
    std::vector<uint64_t> bits(static_cast<size_t>(size() + 63) / 64);
    for (int r : ranks) bits[r / 64] |= uint64_t{1} << (r % 64);
    return bits;
  }
  std::set<int> decode(const std::vector<uint64_t>& bits) const {
    std::set<int> out;
    for (int r = 0; r < size(); ++r)
      if (bits[r / 64] >> (r % 64) & 1) out.insert(r);
    return out;
  }

  std::set<int> known_failed() {
    std::lock_guard<std::mutex> g(failed_mu_);
    return known_failed_;
  }
  void revoke(const std::set<int>& failed) {
    if (failed.empty()) return;
    error_state_.store(ErrorState::kCommError);
    std::lock_guard<std::mutex> g(failed_mu_);
    known_failed_.insert(failed.begin(), failed.end());
  }

  // Peers on this host whose process is gone; checked every 20 ms at most.
  std::vector<int> dead_peers() {
    std::vector<int> dead;
    if (!lineage_ || Clock::now() < next_liveness_check_) return dead;
    next_liveness_check_ = Clock::now() + std::chrono::milliseconds(20);
    for (int r = 0; r < size(); ++r)
      if (r != rank() && lineage_->dead(members_[r])) dead.push_back(r);
    return dead;
  }

  MPI_Comm pending_comm_ = MPI_COMM_NULL;  // written by MPI_Comm_idup until init completes
  MPI_Comm pending_base_ = MPI_COMM_NULL;  // likewise, for the lineage
  MPI_Comm comm_ = MPI_COMM_NULL;          // used on the worker only
  // Set by init (world groups) or the constructor; read after init.
  std::shared_ptr<mpi::Lineage> lineage_;
  std::vector<int> members_;  // world rank of each rank
  uint64_t epoch_ = 0;
  std::mutex failed_mu_;
  std::set<int> known_failed_;
  Clock::time_point next_liveness_check_{};  // worker only
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
