// The gloo backend: sinew's ProcessGroup over gloo's TCP transport and its
// new-style collectives (the role of PyTorch's ProcessGroupGloo).
//
// One gloo context per group. Every op runs on the group's OpQueue worker in
// issue order and is bounded by the group timeout counted from when it was
// issued. Reductions go through sinew's reduce_pair, so every dtype and op
// means exactly what it means in the sinew backend.
//
// abort() completes every waiter at once. A send/recv in flight is woken too
// (gloo's abortWait*), but a gloo collective in flight has no cancel: it runs
// on the worker until its own timeout, so destroying an aborted group can
// block that long.
#include <fmt/ranges.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/scatter.h>
#include <gloo/transport/unbound_buffer.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <random>
#include <condition_variable>
#include <map>
#include <set>
#include <thread>
#include <sstream>

#include "dist/backend_util.h"
#include "dist/ft_agreement.h"
#include "dist/op_queue.h"
#include "dist/process_identity.h"
#include "gloo_device.h"
#include "gloo_store_adapter.h"
#include "sinew/core/check.h"
#include "sinew/core/log.h"
#include "sinew/dist/process_group.h"

namespace sinew::dist {
namespace {

// Rethrows the exception being handled as sinew's taxonomy; `what` names
// the op, `peers` the ranks a lost connection may be to (when known).
[[noreturn]] void rethrow_gloo_error(const std::string& what, std::vector<int> peers = {}) {
  try {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const gloo::IoException& e) {
    std::string m = e.what();
    // Timeouts: our own wait ("Timed out waiting"), or a pair that another
    // op's timeout closed ("Application timeout caused pair closure").
    if (m.find("Timed out") != std::string::npos || m.find("timeout") != std::string::npos)
      throw TimeoutError(fmt::format("{} timed out: {}", what, m));
    throw PeerLostError(fmt::format("{}: a peer closed its connection or failed: {} (re-create the "
                                    "group)", what, m), std::move(peers));
  } catch (const gloo::EnforceNotMet& e) {
    throw InternalError(fmt::format("{}: gloo check failed: {}", what, e.what()));
  } catch (const gloo::Exception& e) {
    throw IoError(fmt::format("{}: {}", what, e.what()));
  }
}

// gloo's typed setters only need the element width; reductions get the
// real dtype through the combine function.
template <class F>
void with_word(size_t width, F&& f) {
  switch (width) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    case 8: f(uint64_t{}); return;
  }
  throw InternalError(fmt::format("gloo: no word type for element size {}", width));
}

gloo::AllreduceOptions::Func combine_fn(DType dtype, ReduceKind kind) {
  return [dtype, kind](void* out, const void* a, const void* b, size_t n) {
    reduce_pair(out, a, b, n, dtype, kind);
  };
}

uint8_t* bytes(const TensorView& t) { return static_cast<uint8_t*>(nonnull_data(t)); }

class GlooProcessGroup final : public ProcessGroup {
 public:
  // `root` is the group's namespace; epoch e > 0 rebuilds the context under
  // "<root>/e<e>" (PyTorch 2.14's Gloo recovery).
  GlooProcessGroup(StorePtr root, int rank, int size, std::string name, Millis timeout, uint64_t epoch = 0)
      : ProcessGroup(rank, size, std::move(name), timeout),
        root_(root),
        store_(epoch ? make_prefix_store(fmt::format("e{}", epoch), root) : root),
        epoch_(epoch),
        queue_(std::make_unique<OpQueue>(fmt::format("gloo:{}", this->name()))) {
    queue_->post_init([this] { connect(); });
  }

  uint64_t epoch() const override { return epoch_; }

  // Failures surface as gloo connection errors (often without the rank);
  // local ranks are checked by pid, the others by their acks.
  std::vector<int> agree_on_failures(Deadline deadline) override {
    auto seen_dead = [this](int r) { return peer_dead(r); };
    std::set<int> failed;
    {
      std::lock_guard<std::mutex> g(failed_mu_);
      failed = known_failed_;
    }
    for (int r = 0; r < size(); ++r)
      if (r != rank() && peer_dead(r)) failed.insert(r);
    return agree_on_failed_ranks({*root_, name(), epoch_, rank(), size(), seen_dead}, failed, deadline);
  }

  std::shared_ptr<ProcessGroup> reconfigure(Deadline deadline) override {
    auto failed = agree_on_failures(deadline);
    int new_rank = 0, n = 0;
    std::vector<int> survivors;
    for (int r = 0; r < size(); ++r) {
      if (std::binary_search(failed.begin(), failed.end(), r)) continue;
      if (r == rank()) new_rank = n;
      survivors.push_back(r);
      ++n;
    }
    SINEW_WARN(kFt, "gloo group '{}' epoch {}: failed ranks {}; rank {} continues as rank {} of {}", name(), epoch_,
               failed, rank(), new_rank, n);
    auto next = std::make_shared<GlooProcessGroup>(root_, new_rank, n, name(), timeout(), epoch_ + 1);
    next->follow_subgroups(*this, survivors);
    return next;
  }

  // Wakes a send/recv in flight, so joining the worker is prompt unless a
  // collective is in flight (that one runs until its timeout).
  ~GlooProcessGroup() override {
    // Creating a group is collective: a member that dropped its queued
    // connect (abort() below drops it) would leave the others waiting for
    // its address until their timeout, as a subgroup made and destroyed
    // unused did. So the connect runs to its end first: bounded by the
    // timeout, and quick when the members are alive, as each does the same.
    try {
      queue_->wait_init(Deadline::after(timeout()));
    } catch (const Error&) {  // its outcome no longer matters
    }
    {
      std::lock_guard<std::mutex> g(watch_mu_);
      watch_stop_ = true;
    }
    watch_cv_.notify_all();
    abort("the process group was destroyed");
    queue_.reset();  // joins the worker: connect() (which starts the watchdog) is over
    if (watchdog_.joinable()) watchdog_.join();
  }

  std::string backend_name() const override { return "gloo"; }

  // PyTorch 2.14's Gloo recovery: rebuild the context in a new store namespace.
  std::string reconfigure_handle() const override {
    return fmt::format("gloo|{}|r{}|pid{}|{}", name(), rank(), ::getpid(), instance_);
  }

  std::shared_ptr<ProcessGroup> reconfigure(const std::string& uuid, const std::vector<std::string>& handles,
                                            Millis timeout) override {
    const int new_rank = claim_reconfigure(*store_, uuid, handles, reconfigure_handle());
    return std::make_shared<GlooProcessGroup>(make_prefix_store("u/" + uuid, store_), new_rank,
                                              static_cast<int>(handles.size()), name(), timeout);
  }

  void abort(const std::string& reason) override {
    if (!aborted_.load()) run_abort_hooks(reason);
    // Waiters get the reason: their works complete before the worker can
    // notice the flag and fail them with its own message.
    queue_->abort(Status(ErrorCode::kAborted, fmt::format("gloo group '{}' (rank {} of {}) was "
                                                          "aborted: {}", name(), rank(), size(), reason)));
    aborted_ = true;
    std::lock_guard<std::mutex> g(inflight_mu_);
    for (auto* buf : inflight_) {
      buf->abortWaitRecv();
      buf->abortWaitSend();
    }
  }

  Status init_status() const override { return queue_->init_status(); }
  void wait_ready(Deadline deadline) override { queue_->wait_init(deadline); }

 protected:
  void do_allreduce(const WorkPtr& work, const TensorView& t, const ReduceOp& op) override {
    run(work, [this, t, op, tag = tag_of(work)](Millis left) {
      const auto n = static_cast<size_t>(t.numel());
      prepare_reduction(t.data(), n, t.dtype(), op);
      allreduce_in_place(t.data(), n, t.dtype(), wire_kind(op), tag, left);
      finalize_reduction(t.data(), n, t.dtype(), op, size());
    });
  }

  void do_broadcast(const WorkPtr& work, const TensorView& t, int root) override {
    run(work, [this, t, root, tag = tag_of(work)](Millis left) {
      if (size() == 1 || t.nbytes() == 0) return;
      gloo::BroadcastOptions o(context_);
      o.setOutput(bytes(t), t.nbytes());
      o.setRoot(root);
      o.setTag(tag);
      o.setTimeout(left);
      gloo::broadcast(o);
    });
  }

  // Non-roots' tensors are inputs only: they are left unchanged.
  void do_reduce(const WorkPtr& work, const TensorView& t, int root, const ReduceOp& op) override {
    run(work, [this, t, root, op, tag = tag_of(work)](Millis left) {
      const auto n = static_cast<size_t>(t.numel());
      if (n == 0) return;
      ReduceInput in(t, op);
      std::vector<uint8_t> scratch;
      void* out = t.data();
      if (rank() != root) {
        scratch.resize(t.nbytes());
        out = scratch.data();
      }
      if (size() == 1) {
        std::memmove(out, in.data(), t.nbytes());
      } else {
        with_word(t.element_size(), [&](auto word) {
          using W = decltype(word);
          gloo::ReduceOptions o(context_);
          if (in.data() != out) o.setInput(static_cast<W*>(const_cast<void*>(in.data())), n);
          o.setOutput(static_cast<W*>(out), n);
          o.setRoot(root);
          o.setReduceFunction(combine_fn(t.dtype(), wire_kind(op)));
          o.setTag(tag);
          o.setTimeout(left);
          gloo::reduce(o);
        });
      }
      if (rank() == root) finalize_reduction(t.data(), n, t.dtype(), op, size());
    });
  }

  void do_allgather(const WorkPtr& work, const TensorView& out, const TensorView& in) override {
    run(work, [this, out, in, tag = tag_of(work)](Millis left) {
      if (in.nbytes() == 0) return;
      if (size() == 1) {
        std::memmove(out.data(), in.data(), in.nbytes());
        return;
      }
      gloo::AllgatherOptions o(context_);
      o.setInput(bytes(in), in.nbytes());
      o.setOutput(bytes(out), out.nbytes());
      o.setTag(tag);
      o.setTimeout(left);
      gloo::allgather(o);
    });
  }

  void do_gather(const WorkPtr& work, const TensorView& out, const TensorView& in, int root) override {
    run(work, [this, out, in, root, tag = tag_of(work)](Millis left) {
      if (in.nbytes() == 0) return;
      if (size() == 1) {
        std::memmove(out.data(), in.data(), in.nbytes());
        return;
      }
      gloo::GatherOptions o(context_);
      o.setInput(bytes(in), in.nbytes());
      if (rank() == root) o.setOutput(bytes(out), out.nbytes());
      o.setRoot(root);
      o.setTag(tag);
      o.setTimeout(left);
      gloo::gather(o);
    });
  }

  void do_scatter(const WorkPtr& work, const TensorView& out, const TensorView& in, int root) override {
    run(work, [this, out, in, root, tag = tag_of(work)](Millis left) {
      const size_t block = out.nbytes();
      if (block == 0) return;
      if (size() == 1) {
        std::memmove(out.data(), in.data(), block);
        return;
      }
      gloo::ScatterOptions o(context_);
      if (rank() == root) {
        std::vector<uint8_t*> blocks(size());
        for (int r = 0; r < size(); ++r) blocks[r] = bytes(in) + r * block;
        o.setInputs(blocks, block);
      }
      o.setOutput(bytes(out), block);
      o.setRoot(root);
      o.setTag(tag);
      o.setTimeout(left);
      gloo::scatter(o);
    });
  }

  // gloo's new-style API has no reduce_scatter (gloo/reduce_scatter.h is the
  // old algorithm class: typed, with bound buffers set up per instance and a
  // stateless function pointer, so no per-dtype/op combine). Instead:
  // allreduce a scratch copy of the input and keep this rank's block. That
  // moves size() times the data of a true reduce_scatter, which is fine for
  // the CPU fallback this backend is.
  void do_reduce_scatter(const WorkPtr& work, const TensorView& out, const TensorView& in,
                         const ReduceOp& op) override {
    run(work, [this, out, in, op, tag = tag_of(work)](Millis left) {
      if (out.nbytes() == 0) return;
      std::vector<uint8_t> scratch(in.nbytes());
      std::memcpy(scratch.data(), in.data(), in.nbytes());
      const auto n = static_cast<size_t>(in.numel());
      prepare_reduction(scratch.data(), n, in.dtype(), op);
      allreduce_in_place(scratch.data(), n, in.dtype(), wire_kind(op), tag, left);
      std::memcpy(out.data(), scratch.data() + rank() * out.nbytes(), out.nbytes());
      finalize_reduction(out.data(), static_cast<size_t>(out.numel()), out.dtype(), op, size());
    });
  }

  void do_all_to_all(const WorkPtr& work, const TensorView& out, const TensorView& in,
                     const std::vector<int64_t>& out_splits,
                     const std::vector<int64_t>& in_splits) override {
    check_own_split(out_splits, in_splits, rank());
    const auto width = static_cast<int64_t>(in.element_size());
    std::vector<int64_t> out_bytes, in_bytes;
    for (int r = 0; r < size(); ++r) {
      out_bytes.push_back(out_splits[r] * width);
      in_bytes.push_back(in_splits[r] * width);
    }
    run(work, [this, out, in, out_bytes, in_bytes, tag = tag_of(work)](Millis left) {
      if (size() == 1) {
        std::memmove(bytes(out), bytes(in), in.nbytes());
        return;
      }
      gloo::AlltoallvOptions o(context_);
      o.setInput(bytes(in), in_bytes);
      o.setOutput(bytes(out), out_bytes);
      o.setTag(tag);
      o.setTimeout(left);
      gloo::alltoallv(o);
    });
  }

  void do_barrier(const WorkPtr& work) override {
    run(work, [this, tag = tag_of(work)](Millis left) {
      if (size() == 1) return;
      gloo::BarrierOptions o(context_);
      o.setTag(tag);
      o.setTimeout(left);
      gloo::barrier(o);
    });
  }

  // Everything is posted first, then waited for: no ordering deadlock.
  // gloo matches a send and a recv by (peer, slot); the user tag is the slot
  // (collectives use slots with a non-zero prefix byte, so they never clash).
  void do_batch_p2p(const WorkPtr& work, const std::vector<P2POp>& ops) override {
    run(work, [this, ops](Millis left) {
      const Deadline deadline = Deadline::after(left);
      std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> bufs;
      for (const auto& op : ops) {
        bufs.push_back(context_->createUnboundBuffer(nonnull_data(op.tensor), op.tensor.nbytes()));
        if (op.kind == P2POp::Kind::kSend) bufs.back()->send(op.peer, static_cast<uint64_t>(op.tag));
        else bufs.back()->recv(op.peer, static_cast<uint64_t>(op.tag));
      }
      InflightGuard guard(*this, bufs);
      for (size_t i = 0; i < ops.size(); ++i) {
        const bool send = ops[i].kind == P2POp::Kind::kSend;
        const std::string what =
            fmt::format("{} rank {} (tag {}, {} bytes) on gloo group '{}' (rank {} of {})",
                        send ? "send to" : "recv from", ops[i].peer, ops[i].tag,
                        ops[i].tensor.nbytes(), name(), rank(), size());
        bool done = false;
        try {
          auto ms = std::max(Millis(1), std::chrono::duration_cast<Millis>(deadline.remaining()));
          done = send ? bufs[i]->waitSend(ms) : bufs[i]->waitRecv(ms);
        } catch (...) {
          rethrow_gloo_error(what, {ops[i].peer});
        }
        if (!done) throw AbortedError(fmt::format("{}: group '{}' was aborted", what, name()));
      }
    });
  }

  std::shared_ptr<ProcessGroup> make_subgroup(const std::vector<int>& ranks, int new_rank,
                                              const std::string& tag) override {
    return std::make_shared<GlooProcessGroup>(make_prefix_store(tag, store_), new_rank,
                                              static_cast<int>(ranks.size()), tag, timeout());
  }

 private:
  // Registers p2p buffers so abort() can wake their waits.
  class InflightGuard {
   public:
    InflightGuard(GlooProcessGroup& pg,
                  const std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>>& bufs)
        : pg_(pg), bufs_(bufs) {
      {
        std::lock_guard<std::mutex> g(pg_.inflight_mu_);
        for (const auto& b : bufs_) pg_.inflight_.push_back(b.get());
      }
      // abort() sets the flag before it wakes registered buffers: an abort
      // that came before this registration is seen here.
      if (pg_.aborted_) {
        remove();
        throw AbortedError(fmt::format("group '{}' was aborted", pg_.name()));
      }
    }
    ~InflightGuard() { remove(); }

   private:
    void remove() {
      std::lock_guard<std::mutex> g(pg_.inflight_mu_);
      auto& v = pg_.inflight_;
      for (const auto& b : bufs_) v.erase(std::remove(v.begin(), v.end(), b.get()), v.end());
    }
    GlooProcessGroup& pg_;
    const std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>>& bufs_;
  };

  static uint32_t tag_of(const WorkPtr& work) { return static_cast<uint32_t>(work->seq()); }

  // Runs on the worker: rendezvous through the store, then one TCP pair per peer.
  void connect() {
    auto device = make_gloo_device();
    auto context = std::make_shared<gloo::rendezvous::Context>(rank(), size());
    context->setTimeout(timeout());
    GlooStoreAdapter store(make_prefix_store(fmt::format("gloo/{}", name()), store_), timeout());
    try {
      context->connectFullMesh(store, device);
    } catch (...) {
      rethrow_gloo_error(fmt::format("gloo group '{}' connecting rank {} of {}", name(), rank(), size()));
    }
    context_ = std::move(context);
    // Who runs where, so the watchdog and agreement can check local peers' pids.
    store_->set(fmt::format("proc/{}", rank()), fmt::format("{} {}", ::getpid(), host_identity()));
    watched_context_ = context_;
    watchdog_ = std::thread([this] { watch(); });
    SINEW_INFO(kInit, "gloo group '{}': rank {} of {} connected", name(), rank(), size());
  }

  // Queues `body` with the time left until the op's deadline.
  void run(const WorkPtr& work, std::function<void(Millis)> body) {
    const Deadline deadline = Deadline::after(timeout());
    std::string what = fmt::format("{} (seq {}) on gloo group '{}' (rank {} of {})", work->op_name(),
                                   work->seq(), name(), rank(), size());
    queue_->post(work, [this, deadline, what = std::move(what), body = std::move(body)] {
      if (deadline.expired())
        throw TimeoutError(fmt::format("{} waited behind earlier operations past the group timeout "
                                       "({} ms)", what, timeout().count()));
      {
        // Revoked (the watchdog closed the connections): a new op would post
        // receives on closed pairs and wait out the whole timeout.
        std::lock_guard<std::mutex> g(failed_mu_);
        if (!known_failed_.empty())
          throw PeerLostError(fmt::format("{}: the group was revoked: rank(s) {} failed; agree on the failed set "
                                          "and reconfigure() to continue with the survivors",
                                          what, known_failed_),
                              std::vector<int>(known_failed_.begin(), known_failed_.end()));
      }
      try {
        try {
          body(std::max(Millis(1), std::chrono::duration_cast<Millis>(deadline.remaining())));
        } catch (...) {
          rethrow_gloo_error(what);
        }
      } catch (const PeerLostError& e) {
        error_state_.store(ErrorState::kCommError);
        std::lock_guard<std::mutex> g(failed_mu_);
        known_failed_.insert(e.ranks().begin(), e.ranks().end());
        throw;
      } catch (const TimeoutError& e) {
        // An op that started as the watchdog closed the connections cannot
        // be woken (gloo has no way to): it ends at its timeout, and the
        // revoke is why.
        std::lock_guard<std::mutex> g(failed_mu_);
        if (!known_failed_.empty()) {
          error_state_.store(ErrorState::kCommError);
          throw PeerLostError(fmt::format("{} (the group was revoked while it ran: rank(s) {} failed)", e.what(),
                                          known_failed_),
                              std::vector<int>(known_failed_.begin(), known_failed_.end()));
        }
        error_state_.store(ErrorState::kTimeout);
        throw;
      }
    });
  }

  void allreduce_in_place(void* data, size_t n, DType dtype, ReduceKind kind, uint32_t tag, Millis left) {
    if (size() == 1 || n == 0) return;
    with_word(dtype_size(dtype), [&](auto word) {
      using W = decltype(word);
      gloo::AllreduceOptions o(context_);
      o.setOutput(static_cast<W*>(data), n);
      o.setReduceFunction(combine_fn(dtype, kind));
      o.setTag(tag);
      o.setTimeout(left);
      gloo::allreduce(o);
    });
  }

  // True when rank r runs on this host and its process is gone.
  bool peer_dead(int r) {
    pid_t pid = 0;
    {
      std::lock_guard<std::mutex> g(failed_mu_);
      if (auto it = local_pids_.find(r); it != local_pids_.end()) pid = it->second;
    }
    if (pid == 0) {
      const std::string key = fmt::format("proc/{}", r);
      if (!store_->check({key})) return false;
      std::istringstream in(store_->get_string(key));
      std::string host;
      in >> pid >> host;
      if (host != host_identity()) pid = -1;  // remote: no pid evidence
      std::lock_guard<std::mutex> g(failed_mu_);
      local_pids_[r] = pid;
    }
    return pid > 0 && !process_alive(pid);
  }

  // Revoke: a local peer's death (pid) or another rank's revoke record in the
  // store closes this rank's gloo connections, so an op in flight fails now
  // with PeerLostError instead of at the gloo timeout.
  void watch() {
    const std::string key = fmt::format("ft/e{}/revoked", epoch_);
    int round = 0;
    std::unique_lock<std::mutex> lk(watch_mu_);
    while (!watch_cv_.wait_for(lk, Millis(20), [&] { return watch_stop_; })) {
      try {
        std::set<int> failed;
        for (int r = 0; r < size(); ++r)
          if (r != rank() && peer_dead(r)) failed.insert(r);
        if (failed.empty() && ++round % 10 == 0 && root_->check({key})) failed = decode_rank_set(root_->get_string(key));
        if (failed.empty()) continue;
        SINEW_WARN(kFt, "gloo group '{}' epoch {}: rank(s) {} failed; revoking", name(), epoch_, failed);
        merge_rank_set(*root_, key, failed);
        {
          std::lock_guard<std::mutex> g(failed_mu_);
          known_failed_.insert(failed.begin(), failed.end());
        }
        lk.unlock();  // the aborts below run completion hooks and callbacks
        watched_context_->closeConnections();
        // Closing the connections wakes an op blocked on them, but not one
        // that posts its receives an instant later (gloo cannot interrupt
        // it before its timeout): complete every pending op now, so that no
        // waiter is left waiting on a dead peer.
        queue_->abort(Status(ErrorCode::kPeerLost,
                             fmt::format("gloo group '{}' (rank {} of {}) was revoked: rank(s) {} failed; agree on "
                                         "the failed set and reconfigure() to continue with the survivors",
                                         name(), rank(), size(), failed),
                             std::vector<int>(failed.begin(), failed.end())));
        return;
      } catch (const std::exception& e) {
        SINEW_WARN(kFt, "gloo group '{}': watchdog: {}", name(), e.what());
      }
    }
  }

  StorePtr root_;
  StorePtr store_;
  uint64_t epoch_;
  std::mutex failed_mu_;
  std::set<int> known_failed_;
  std::map<int, pid_t> local_pids_;  // rank -> pid on this host (-1: remote)
  std::shared_ptr<gloo::rendezvous::Context> watched_context_;
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool watch_stop_ = false;
  std::thread watchdog_;
  // Tells this group object's handle from an earlier one's of the same rank.
  const std::string instance_ = fmt::format("{:016x}", std::random_device{}() * 0x9e3779b97f4a7c15ull);
  std::shared_ptr<gloo::rendezvous::Context> context_;  // set by connect(), used on the worker
  std::mutex inflight_mu_;
  std::vector<gloo::transport::UnboundBuffer*> inflight_;
  // Last: destroyed first, so the worker is joined before what it uses goes.
  std::unique_ptr<OpQueue> queue_;
};

}  // namespace

ProcessGroupPtr make_gloo_process_group(const GroupOptions& options) {
  SINEW_ARG_CHECK(options.store != nullptr, "store", "nullptr",
                  "a store for the gloo rendezvous (GroupOptions::store)");
  // gloo writes its sockets with writev, which raises SIGPIPE once a peer is
  // gone, and SIGPIPE's default action kills the process without a word:
  // the survivors of a failure died with it. Python, gloo's usual host,
  // ignores SIGPIPE; a C++ program must. A handler the program installed
  // itself is left alone.
  static std::once_flag sigpipe_once;
  std::call_once(sigpipe_once, [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
  });
  return std::make_shared<GlooProcessGroup>(options.store, options.rank, options.size, options.name,
                                            options.timeout);
}

}  // namespace sinew::dist
