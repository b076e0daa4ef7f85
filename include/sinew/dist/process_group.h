// ProcessGroup: the collective contract every backend (sinew, gloo, mpi)
// implements. Every operation is asynchronous and returns a Work.
//
// The public methods validate arguments and handle strided tensors (packed
// to contiguous scratch and unpacked on completion); backends implement the
// protected `do_*` methods on contiguous tensors only.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sinew/core/deadline.h"
#include "sinew/dist/hooks.h"
#include "sinew/dist/reduce_op.h"
#include "sinew/dist/store.h"
#include "sinew/dist/work.h"
#include "sinew/tensor/tensor_view.h"

namespace sinew::dist {

struct P2POp {
  enum class Kind { kSend, kRecv } kind;
  TensorView tensor;
  int peer;
  int tag = 0;
};

class ProcessGroup : public std::enable_shared_from_this<ProcessGroup> {
 public:
  ProcessGroup(int rank, int size, std::string name, Millis timeout);
  virtual ~ProcessGroup();

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }
  Millis timeout() const { return timeout_; }
  virtual std::string backend_name() const = 0;

  // Collectives. Tensors are the caller's; keep them alive until the Work
  // completes.
  WorkPtr allreduce(const TensorView& tensor, const ReduceOp& op = {});
  WorkPtr broadcast(const TensorView& tensor, int root);
  WorkPtr reduce(const TensorView& tensor, int root, const ReduceOp& op = {});
  // List form: outputs[r] receives rank r's input.
  WorkPtr allgather(const std::vector<TensorView>& outputs, const TensorView& input);
  // Into one tensor of size() * input.numel() elements.
  WorkPtr allgather_into_tensor(const TensorView& output, const TensorView& input);
  // outputs is used on the root only (size() tensors).
  WorkPtr gather(const std::vector<TensorView>& outputs, const TensorView& input, int root);
  // inputs is used on the root only (size() tensors).
  WorkPtr scatter(const TensorView& output, const std::vector<TensorView>& inputs, int root);
  // List form: inputs[r] is reduced into rank r's output.
  WorkPtr reduce_scatter(const TensorView& output, const std::vector<TensorView>& inputs,
                         const ReduceOp& op = {});
  // input has size() * output.numel() elements.
  WorkPtr reduce_scatter_tensor(const TensorView& output, const TensorView& input,
                                const ReduceOp& op = {});
  // Even split: input and output have size() equal blocks along the flat order.
  WorkPtr all_to_all(const TensorView& output, const TensorView& input);
  // Uneven split: element counts per peer (the sizes along dim 0 in PyTorch,
  // here in elements). Empty split lists mean an even split.
  WorkPtr all_to_all_v(const TensorView& output, const TensorView& input,
                       const std::vector<int64_t>& output_split_sizes,
                       const std::vector<int64_t>& input_split_sizes);
  WorkPtr barrier();
  WorkPtr send(const TensorView& tensor, int dst, int tag = 0);
  WorkPtr recv(const TensorView& tensor, int src, int tag = 0);
  // All sends and receives progress together (no ordering deadlock).
  WorkPtr batch_isend_irecv(const std::vector<P2POp>& ops);

  // Eagerly creates the subgroup of ranks with the same color, ordered by
  // (key, rank). Every rank must call it; color < 0 returns nullptr.
  std::shared_ptr<ProcessGroup> split(int color, int key);
  // Every rank must call it; ranks outside `ranks` get nullptr.
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks);

  // Unblocks every pending and later operation with AbortedError within
  // 100 ms. Callable from any thread; never kills the process.
  virtual void abort(const std::string& reason = "abort() called") = 0;
  bool aborted() const { return aborted_.load(); }
  // --- fault tolerance (docs/fault_tolerance.md) ---------------------------
  // The group's epoch: 0 when created, +1 per reconfigure().
  virtual uint64_t epoch() const { return 0; }
  // Blocks until every survivor agrees on the set of failed ranks (old-epoch
  // numbering) and returns it; every survivor gets the same answer, also
  // when another rank dies during the agreement. Backends without fault
  // tolerance throw InvalidArgument.
  virtual std::vector<int> agree_on_failures(Deadline deadline);
  // Agrees on the failed set, then builds the group of survivors in place:
  // the next epoch, its own store namespace, ranks renumbered densely in
  // old-rank order. Every survivor must call it.
  virtual std::shared_ptr<ProcessGroup> reconfigure(Deadline deadline);

  // PyTorch-shaped external reconfiguration, for users who bring their own
  // coordinator: each rank hands out its handle; the coordinator gives every
  // member of the new group the same list; a rank's new number is its index
  // in it. `uuid` names the new group's store namespace and may be used once.
  virtual std::string reconfigure_handle() const;
  virtual std::shared_ptr<ProcessGroup> reconfigure(const std::string& uuid, const std::vector<std::string>& handles,
                                                    Millis timeout);
  // Subgroups made by split() and new_group() follow reconfigure(Deadline)
  // (sinew and gloo backends; mpi groups are re-split by the user):
  // the new group rebuilds each one that lost a member (its surviving
  // members, in their old order, in the new epoch's namespace; the old one
  // is aborted) and keeps the others as they are. What became of
  // `old_subgroup`, a subgroup of the group this one was reconfigured from:
  // the same group, its rebuilt successor, or nullptr when none of its
  // members survived. InvalidArgument when it was not such a subgroup.
  std::shared_ptr<ProcessGroup> successor(const ProcessGroup* old_subgroup) const;
  // The group's error state, as PyTorch's error query reports it.
  enum class ErrorState { kSuccess, kTimeout, kCommError };
  ErrorState error_state() const { return error_state_.load(); }
  // Runs `hook(reason)` when the group is aborted (on the aborting thread).
  void add_abort_hook(std::function<void(const std::string&)> hook);

  // --- hooks (hooks.h) ------------------------------------------------------
  // Adds hooks for this group's later operations and events.
  void add_hooks(std::shared_ptr<ProcessGroupHooks> hooks);
  // What hooks are told about this group (pg_id, description, members).
  GroupInfo group_info();

  // Non-blocking init: Ok while connecting or connected, the error if init
  // failed.
  virtual Status init_status() const = 0;
  // Blocks until init has finished (or failed; then throws).
  virtual void wait_ready(Deadline deadline) = 0;

 protected:
  // Contiguous-only implementations. Validation already happened; `work` was
  // created by the caller (with any finalizers attached) and the backend must
  // complete it exactly once, from any thread.
  virtual void do_allreduce(const WorkPtr& work, const TensorView& t, const ReduceOp& op) = 0;
  virtual void do_broadcast(const WorkPtr& work, const TensorView& t, int root) = 0;
  virtual void do_reduce(const WorkPtr& work, const TensorView& t, int root, const ReduceOp& op) = 0;
  // out has size() * in.numel() elements.
  virtual void do_allgather(const WorkPtr& work, const TensorView& out, const TensorView& in) = 0;
  // out holds size() blocks on the root; on other ranks it is an empty view.
  virtual void do_gather(const WorkPtr& work, const TensorView& out, const TensorView& in, int root) = 0;
  // in holds size() blocks on the root; on other ranks it is an empty view.
  virtual void do_scatter(const WorkPtr& work, const TensorView& out, const TensorView& in, int root) = 0;
  // in has size() * out.numel() elements.
  virtual void do_reduce_scatter(const WorkPtr& work, const TensorView& out, const TensorView& in,
                                 const ReduceOp& op) = 0;
  // Splits are in elements, one per rank, summing to out/in numel.
  virtual void do_all_to_all(const WorkPtr& work, const TensorView& out, const TensorView& in,
                             const std::vector<int64_t>& out_splits,
                             const std::vector<int64_t>& in_splits) = 0;
  virtual void do_barrier(const WorkPtr& work) = 0;
  // Tensors are contiguous.
  virtual void do_batch_p2p(const WorkPtr& work, const std::vector<P2POp>& ops) = 0;
  // Builds the subgroup of `ranks` (this rank is ranks[new_rank]). Called on
  // member ranks only, after all ranks agreed on the membership. `tag` is the
  // same on every member and unique per subgroup creation.
  virtual std::shared_ptr<ProcessGroup> make_subgroup(const std::vector<int>& ranks, int new_rank,
                                                      const std::string& tag) = 0;

  std::atomic<bool> aborted_{false};
  std::atomic<ErrorState> error_state_{ErrorState::kSuccess};
  // Backends call this from abort().
  void run_abort_hooks(const std::string& reason);
  // Reports a group event (revoke, reconfigure, ...) to the hooks.
  void trace_event(GroupEvent event, const std::string& detail);
  // How hooks describe this group; set before its first operation (split,
  // new_group and reconfigure do).
  void set_trace_identity(std::string desc, std::vector<int> job_ranks);
  // Shared by backends' reconfigure(uuid, handles, timeout): validates the
  // arguments, claims `uuid` in `store` for this handle list (a uuid used
  // with another list is InvalidArgument) and returns this rank's new number.
  static int claim_reconfigure(Store& store, const std::string& uuid, const std::vector<std::string>& handles,
                               const std::string& mine);
  // Called by a backend's reconfigure(Deadline) on the group it built from
  // `old` (survivors: old ranks in new-rank order): rebuilds or keeps old's
  // subgroups (see successor()). Every survivor calls it, so every member
  // of a rebuilt subgroup creates it with the same tag.
  void follow_subgroups(ProcessGroup& old, const std::vector<int>& survivors);

 private:
  std::mutex hooks_mu_;
  std::vector<std::function<void(const std::string&)>> abort_hooks_;
  WorkPtr new_work(const char* op, std::span<const TensorView> inputs, std::span<const TensorView> outputs,
                   bool p2p = false, int peer = -1);
  const HookSet* hookset();
  std::vector<int> job_ranks_of(const std::vector<int>& group_ranks);
  std::mutex hookset_mu_;
  // Built at first use and replaced by add_hooks(); every set lives as long
  // as the group, so works (completed before the group is gone) may point
  // at the one they started with.
  std::atomic<const HookSet*> hookset_{nullptr};
  std::vector<std::unique_ptr<HookSet>> hooksets_;
  std::string trace_desc_;
  std::vector<int> trace_job_ranks_;
  uint64_t coll_seq_ = 0;
  uint64_t p2p_seq_ = 0;
  int rank_;
  int size_;
  std::string name_;
  Millis timeout_;
  uint64_t subgroup_counter_ = 0;
  // How each subgroup was made (on every rank, members or not), so it can
  // follow a reconfigure.
  struct SubgroupRecipe {
    std::vector<int> ranks;  // this group's ranks, in the subgroup's rank order
    std::string tag;         // its store namespace, the same on every member
    std::string desc;
    std::weak_ptr<ProcessGroup> group;  // null on non-members
    const ProcessGroup* id = nullptr;
  };
  std::vector<SubgroupRecipe> recipes_;
  std::map<const ProcessGroup*, std::shared_ptr<ProcessGroup>> successors_;
  void remember_subgroup(std::vector<int> ranks, std::string tag, std::string desc,
                         const std::shared_ptr<ProcessGroup>& child);
};

using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

struct GroupOptions {
  std::string backend = "sinew";  // sinew | gloo | mpi
  StorePtr store;                 // not needed by mpi
  int rank = -1;
  int size = -1;
  std::string name = "default";
  Millis timeout{600'000};
  // sinew backend: auto (shared memory on one host, UCX between hosts), shm, ucx.
  std::string transport = "auto";
  // Ranks of this group its launcher saw die (sinew run --fault-tolerant
  // records them in the job store); polled while the group initializes, so
  // a rank that dies before joining fails init with PeerLostError naming it
  // at once instead of a timeout. init_process_group sets it.
  std::function<std::vector<int>()> lost_ranks;
};

// Creates a group; init (rendezvous, connections) continues in the
// background and ops queue until it is ready.
ProcessGroupPtr create_process_group(const GroupOptions& options);

// Grow: a new process (a replacement for a dead rank, or extra capacity)
// asks to join the running group `options.name` through `options.store`;
// the members admit it at their next reconfigure() (which also works with no
// failure), where it gets the rank after the survivors. Blocks until
// admitted or the deadline. The sinew backend only.
ProcessGroupPtr join_process_group(const GroupOptions& options, Deadline deadline);

// Sends `tensors` from rank `root` of `pg` to every rank (e.g. model state to
// joiners right after a reconfigure). Every rank passes tensors of the same
// shapes and dtypes.
void broadcast_state(ProcessGroup& pg, const std::vector<TensorView>& tensors, int root = 0);

using BackendFactory = ProcessGroupPtr (*)(const GroupOptions&);
void register_backend(const std::string& name, BackendFactory factory);
std::vector<std::string> available_backends();

}  // namespace sinew::dist
