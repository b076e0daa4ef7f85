// The native "sinew" backend: shared memory when every rank is on one host,
// UCX otherwise. Ops run in issue order on the group's OpQueue; small ones
// run on the caller's thread when the queue is idle.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include "../op_queue.h"
#include "net_collectives.h"
#include "shm_collectives.h"
#include "shm_engine.h"
#include "sinew/core/env.h"
#include "sinew/core/log.h"
#include "sinew/dist/process_group.h"

namespace sinew::dist {
namespace {

const EnvParam<int64_t> kInlineBytes{"SINEW_INLINE_BYTES", 64 << 10,
                                     "ops moving at most this many bytes run on the calling thread when "
                                     "the group is idle (no hand-off latency)"};
// 256 KiB measured best for 8-64 MiB allreduce on 2 ranks (Zen 5, 1 MiB L2):
// a step's working set stays in L2.
const EnvParam<int64_t> kShmSlotBytes{"SINEW_SHM_SLOT_BYTES", 256 << 10,
                                      "bytes per shared-memory step slot (two per rank)"};
const EnvParam<int64_t> kShmRingBytes{"SINEW_SHM_RING_BYTES", 256 << 10,
                                      "bytes per shared-memory point-to-point ring (one per pair)"};
const EnvParam<std::string> kTransport{"SINEW_TRANSPORT", std::string("auto"),
                                       "auto (shared memory on one host, UCX between hosts), shm or ucx"};

// Ranks share memory when they share a kernel boot and a pid namespace.
std::string host_identity() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat st {};
  ::stat("/proc/self/ns/pid", &st);
  return fmt::format("{}|{}|{}", host, boot, static_cast<uint64_t>(st.st_ino));
}

class NativeProcessGroup final : public ProcessGroup {
 public:
  NativeProcessGroup(StorePtr store, int rank, int size, std::string name, Millis timeout, std::string transport)
      : ProcessGroup(rank, size, name, timeout),
        store_(std::move(store)),
        transport_choice_(std::move(transport)),
        queue_("sinew:" + name) {
    if (transport_choice_ == "auto" && kTransport.get() != "auto") transport_choice_ = kTransport.get();
    if (transport_choice_ != "auto" && transport_choice_ != "shm" && transport_choice_ != "ucx")
      throw InvalidArgument::make("transport", fmt::format("'{}'", transport_choice_), "one of auto, shm, ucx");
    if (!store_) throw InvalidArgument::make("store", "nullptr", "a store for the sinew backend's rendezvous");
    queue_.post_init([this] { init(); });
  }

  ~NativeProcessGroup() override {
    aborted_.store(true);
    if (net_) net_->abort();
  }

  std::string backend_name() const override { return "sinew"; }

  void abort(const std::string& reason) override {
    aborted_.store(true);
    if (net_) net_->abort();
    queue_.abort(Status(ErrorCode::kAborted,
                        fmt::format("process group '{}' (rank {}) aborted: {}", name(), rank(), reason)));
  }

  Status init_status() const override { return queue_.init_status(); }
  void wait_ready(Deadline deadline) override { queue_.wait_init(deadline); }

  // Which engine runs the collectives, once init finished ("shm"/"ucx").
  std::string engine_name() const { return shm_ ? "shm" : (net_ ? net_->name() : "none"); }

 protected:
  void do_allreduce(const WorkPtr& w, const TensorView& t, const ReduceOp& op) override {
    run(w, t.nbytes(), [=, this](Deadline d) {
      if (shm_) shm::allreduce({*shm_, w->seq(), d}, t, op);
      else net::allreduce({*net_, w->seq(), d}, t, op);
    });
  }
  void do_broadcast(const WorkPtr& w, const TensorView& t, int root) override {
    run(w, t.nbytes(), [=, this](Deadline d) {
      if (shm_) shm::broadcast({*shm_, w->seq(), d}, t, root);
      else net::broadcast({*net_, w->seq(), d}, t, root);
    });
  }
  void do_reduce(const WorkPtr& w, const TensorView& t, int root, const ReduceOp& op) override {
    run(w, t.nbytes(), [=, this](Deadline d) {
      if (shm_) shm::reduce({*shm_, w->seq(), d}, t, root, op);
      else net::reduce({*net_, w->seq(), d}, t, root, op);
    });
  }
  void do_allgather(const WorkPtr& w, const TensorView& out, const TensorView& in) override {
    run(w, out.nbytes(), [=, this](Deadline d) {
      if (shm_) shm::allgather({*shm_, w->seq(), d}, out, in);
      else net::allgather({*net_, w->seq(), d}, out, in);
    });
  }
  void do_gather(const WorkPtr& w, const TensorView& out, const TensorView& in, int root) override {
    run(w, in.nbytes() * size(), [=, this](Deadline d) {
      if (shm_) shm::gather({*shm_, w->seq(), d}, out, in, root);
      else net::gather({*net_, w->seq(), d}, out, in, root);
    });
  }
  void do_scatter(const WorkPtr& w, const TensorView& out, const TensorView& in, int root) override {
    run(w, out.nbytes() * size(), [=, this](Deadline d) {
      if (shm_) shm::scatter({*shm_, w->seq(), d}, out, in, root);
      else net::scatter({*net_, w->seq(), d}, out, in, root);
    });
  }
  void do_reduce_scatter(const WorkPtr& w, const TensorView& out, const TensorView& in,
                         const ReduceOp& op) override {
    run(w, in.nbytes(), [=, this](Deadline d) {
      if (shm_) shm::reduce_scatter({*shm_, w->seq(), d}, out, in, op);
      else net::reduce_scatter({*net_, w->seq(), d}, out, in, op);
    });
  }
  void do_all_to_all(const WorkPtr& w, const TensorView& out, const TensorView& in,
                     const std::vector<int64_t>& out_splits, const std::vector<int64_t>& in_splits) override {
    run(w, in.nbytes() + out.nbytes(), [=, this](Deadline d) {
      if (shm_) shm::all_to_all({*shm_, w->seq(), d}, out, in, out_splits, in_splits);
      else net::all_to_all({*net_, w->seq(), d}, out, in, out_splits, in_splits);
    });
  }
  void do_barrier(const WorkPtr& w) override {
    run(w, 0, [=, this](Deadline d) {
      if (shm_) shm::barrier({*shm_, w->seq(), d});
      else net::barrier({*net_, w->seq(), d});
    });
  }
  void do_batch_p2p(const WorkPtr& w, const std::vector<P2POp>& ops) override {
    size_t bytes = 0;
    for (const auto& op : ops) bytes += op.tensor.nbytes();
    run(w, bytes, [=, this](Deadline d) {
      Transport& t = shm_ ? shm_->p2p() : *net_;
      if (shm_) shm_->check_usable();
      std::vector<RequestPtr> reqs;
      reqs.reserve(ops.size());
      // The user's tag travels in the low bits; the transport checks it.
      for (const auto& op : ops) {
        uint64_t tag = (1ull << 63) | static_cast<uint64_t>(op.tag);
        if (op.kind == P2POp::Kind::kSend) reqs.push_back(t.isend(op.peer, tag, op.tensor.data(), op.tensor.nbytes()));
        else reqs.push_back(t.irecv(op.peer, tag, op.tensor.data(), op.tensor.nbytes()));
      }
      t.wait(reqs, d);
    });
  }

  std::shared_ptr<ProcessGroup> make_subgroup(const std::vector<int>& ranks, int new_rank,
                                              const std::string& tag) override {
    return std::make_shared<NativeProcessGroup>(make_prefix_store(tag, store_), new_rank,
                                                static_cast<int>(ranks.size()), tag, timeout(),
                                                transport_choice_);
  }

 private:
  template <class F>
  void run(const WorkPtr& w, size_t bytes, F&& body) {
    const Deadline d = w->default_deadline();
    auto guarded = [this, d](F& b) {
      if (aborted_.load(std::memory_order_relaxed))
        throw AbortedError(fmt::format("process group '{}' was aborted", name()));
      b(d);
    };
    if (static_cast<int64_t>(bytes) <= kInlineBytes.get() && queue_.try_run_inline(w, [&] { guarded(body); }))
      return;
    queue_.post(w, [guarded, b = std::forward<F>(body)]() mutable { guarded(b); });
  }

  void init() {
    const Deadline deadline = Deadline::after(timeout());
    // Which ranks share this host?
    store_->set(fmt::format("host/{}", rank()), host_identity());
    std::vector<std::string> keys;
    for (int r = 0; r < size(); ++r) keys.push_back(fmt::format("host/{}", r));
    wait_keys(*store_, keys, deadline, &aborted_);
    auto hosts = store_->multi_get(keys);
    std::set<Bytes> distinct(hosts.begin(), hosts.end());
    const bool one_host = distinct.size() == 1;
    std::string choice = transport_choice_;
    if (choice == "auto") choice = one_host ? "shm" : "ucx";
    if (choice == "shm" && !one_host)
      throw InvalidArgument::make("transport", "'shm'",
                                  fmt::format("ranks on one host, but they span {} hosts (use auto or ucx)",
                                              distinct.size()));
    if (choice == "shm") {
      ShmEngine::Options o;
      o.slot_bytes = static_cast<size_t>(kShmSlotBytes.get());
      o.ring_bytes = static_cast<size_t>(kShmRingBytes.get());
      shm_ = std::make_unique<ShmEngine>(store_, rank(), size(), o, deadline, &aborted_);
    } else {
      net_ = make_ucx_transport(make_prefix_store("ucx", store_), rank(), size(), deadline);
    }
    SINEW_INFO(kInit, "group '{}' ready: rank {}/{} over {}", name(), rank(), size(), choice);
  }

  StorePtr store_;
  std::string transport_choice_;
  std::unique_ptr<ShmEngine> shm_;
  TransportPtr net_;
  OpQueue queue_;  // last: its worker must stop before the engines go
};

}  // namespace

ProcessGroupPtr make_native_process_group(const GroupOptions& o) {
  return std::make_shared<NativeProcessGroup>(make_prefix_store(o.name, o.store), o.rank, o.size, o.name,
                                              o.timeout, o.transport);
}

}  // namespace sinew::dist
