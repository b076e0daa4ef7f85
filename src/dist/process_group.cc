#include "sinew/dist/process_group.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <set>

#include "sinew/core/check.h"
#include "sinew/core/log.h"

namespace sinew::dist {
namespace {

void check_cpu(const TensorView& t, const char* arg) {
  SINEW_ARG_CHECK(t.device().type == DeviceType::kCPU, arg, t.to_string(), "a CPU tensor");
}

void check_root(int root, int size) {
  SINEW_ARG_CHECK(root >= 0 && root < size, "root", root, fmt::format("a rank in [0, {})", size));
}

void check_peer(int peer, int size, int self, const char* arg) {
  SINEW_ARG_CHECK(peer >= 0 && peer < size, arg, peer, fmt::format("a rank in [0, {})", size));
  SINEW_ARG_CHECK(peer != self, arg, peer, fmt::format("a rank other than this rank ({})", self));
}

void check_same_dtype(const TensorView& a, const TensorView& b, const char* what) {
  SINEW_ARG_CHECK(a.dtype() == b.dtype(), what, dtype_name(b.dtype()),
                  fmt::format("dtype {} (as the input)", dtype_name(a.dtype())));
}

// A contiguous stand-in for a possibly strided view: the original if it is
// contiguous, else a scratch copy that is unpacked back into the original by
// a finalizer on the work.
struct Staged {
  TensorView view;
  std::shared_ptr<std::vector<uint8_t>> scratch;
};

Staged stage(const TensorView& t, bool copy_in) {
  if (t.is_contiguous()) return {t, nullptr};
  auto buf = std::make_shared<std::vector<uint8_t>>(t.nbytes());
  if (copy_in) t.copy_to_contiguous(buf->data());
  return {TensorView::flat(buf->data(), t.dtype(), t.numel()), buf};
}

void unstage_on_complete(const WorkPtr& work, const TensorView& original, const Staged& s) {
  if (!s.scratch) return;
  auto scratch = s.scratch;
  work->add_finalizer([original, scratch] { original.copy_from_contiguous(scratch->data()); });
}

void keep_alive(const WorkPtr& work, const Staged& s) {
  if (!s.scratch) return;
  auto scratch = s.scratch;
  work->add_finalizer([scratch] {});
}

// Concatenates a list of equally sized tensors into one scratch buffer view.
Staged concat(const std::vector<TensorView>& list, DType dtype, int64_t per, bool copy_in) {
  auto buf = std::make_shared<std::vector<uint8_t>>(list.size() * per * dtype_size(dtype));
  if (copy_in) {
    size_t off = 0;
    for (const auto& t : list) {
      t.copy_to_contiguous(buf->data() + off);
      off += t.nbytes();
    }
  }
  return {TensorView::flat(buf->data(), dtype, static_cast<int64_t>(list.size()) * per), buf};
}

void check_list(const std::vector<TensorView>& list, int size, const TensorView& ref, const char* arg) {
  SINEW_ARG_CHECK(static_cast<int>(list.size()) == size, arg, fmt::format("{} tensors", list.size()),
                  fmt::format("{} tensors (one per rank)", size));
  for (size_t i = 0; i < list.size(); ++i) {
    check_cpu(list[i], arg);
    SINEW_ARG_CHECK(list[i].dtype() == ref.dtype(), fmt::format("{}[{}].dtype", arg, i),
                    dtype_name(list[i].dtype()), dtype_name(ref.dtype()));
    SINEW_ARG_CHECK(list[i].numel() == ref.numel(), fmt::format("{}[{}].numel", arg, i),
                    list[i].numel(), fmt::format("{} elements (as the input)", ref.numel()));
  }
}

std::mutex& backends_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, BackendFactory>& backends() {
  static std::map<std::string, BackendFactory> b;
  return b;
}

}  // namespace

ProcessGroup::ProcessGroup(int rank, int size, std::string name, Millis timeout)
    : rank_(rank), size_(size), name_(std::move(name)), timeout_(timeout) {
  SINEW_ARG_CHECK(size >= 1, "size", size, "a world size >= 1");
  SINEW_ARG_CHECK(rank >= 0 && rank < size, "rank", rank, fmt::format("a rank in [0, {})", size));
  SINEW_ARG_CHECK(timeout.count() > 0, "timeout", fmt::format("{} ms", timeout.count()), "> 0 ms");
}

ProcessGroup::~ProcessGroup() = default;

WorkPtr ProcessGroup::new_work(const char* op, std::span<const TensorView> inputs,
                               std::span<const TensorView> outputs, bool p2p, int peer) {
  uint64_t seq = p2p ? ++p2p_seq_ : ++coll_seq_;
  auto work = std::make_shared<Work>(op, seq, Deadline::after(timeout_));
  work->set_op_literal(op);
  const HookSet* hooks = hookset();
  work->attach_hooks(hooks);  // also names the group in the op's timeout and peer-lost errors
  for (const auto& h : hooks->hooks) h->on_enqueue(*work, p2p, peer, inputs, outputs);
  return work;
}

const char* group_event_name(GroupEvent e) {
  switch (e) {
    case GroupEvent::kCreate: return "create";
    case GroupEvent::kSplit: return "split";
    case GroupEvent::kReconfigure: return "reconfigure";
    case GroupEvent::kAbort: return "abort";
    case GroupEvent::kRevoke: return "revoke";
  }
  return "?";
}

namespace {
std::mutex& factories_mu() {
  static std::mutex m;
  return m;
}
std::vector<HooksFactory>& factories() {
  static std::vector<HooksFactory> f;
  return f;
}
}  // namespace

void register_hooks_factory(HooksFactory factory) {
  std::lock_guard<std::mutex> g(factories_mu());
  factories().push_back(std::move(factory));
}

void install_flight_recorder();  // fr/recorder.cc

GroupInfo ProcessGroup::group_info() { return hookset()->group; }

void ProcessGroup::set_trace_identity(std::string desc, std::vector<int> job_ranks) {
  std::lock_guard<std::mutex> g(hookset_mu_);
  trace_desc_ = std::move(desc);
  trace_job_ranks_ = std::move(job_ranks);
}

const HookSet* ProcessGroup::hookset() {
  if (const HookSet* h = hookset_.load(std::memory_order_acquire)) return h;
  install_flight_recorder();
  const HookSet* made = nullptr;
  {
    std::lock_guard<std::mutex> g(hookset_mu_);
    if (const HookSet* h = hookset_.load(std::memory_order_acquire)) return h;
    auto set = std::make_unique<HookSet>();
    GroupInfo& info = set->group;
    info.epoch = epoch();
    info.pg_id = fmt::format("{}@e{}", name_, info.epoch);
    info.name = name_;
    info.desc = !trace_desc_.empty() ? trace_desc_ : (name_ == "default" ? "default_pg" : "user group");
    info.backend = backend_name();
    info.rank = rank_;
    info.size = size_;
    info.timeout_ms = timeout_.count();
    info.ranks = trace_job_ranks_;
    if (info.ranks.empty() && info.epoch == 0 && trace_desc_.empty()) {
      // A group made straight from the launcher's environment spans the job.
      info.ranks.resize(size_);
      std::iota(info.ranks.begin(), info.ranks.end(), 0);
    }
    std::vector<HooksFactory> fs;
    {
      std::lock_guard<std::mutex> fg(factories_mu());
      fs = factories();
    }
    for (auto& f : fs)
      if (auto h = f(info)) set->hooks.push_back(std::move(h));
    made = set.get();
    hooksets_.push_back(std::move(set));
    hookset_.store(made, std::memory_order_release);
  }
  for (const auto& h : made->hooks) h->on_event(GroupEvent::kCreate, made->group.desc);
  return made;
}

void ProcessGroup::add_hooks(std::shared_ptr<ProcessGroupHooks> hooks) {
  SINEW_ARG_CHECK(hooks != nullptr, "hooks", "nullptr", "a hooks object");
  hookset();  // built first, so the new set extends it
  std::lock_guard<std::mutex> g(hookset_mu_);
  auto set = std::make_unique<HookSet>(*hookset_.load());
  set->hooks.push_back(std::move(hooks));
  hookset_.store(set.get(), std::memory_order_release);
  hooksets_.push_back(std::move(set));
}

void ProcessGroup::trace_event(GroupEvent event, const std::string& detail) {
  const HookSet* set = hookset();
  for (const auto& h : set->hooks) {
    try {
      h->on_event(event, detail);
    } catch (const std::exception& e) {
      SINEW_WARN(kColl, "a process-group hook failed on event {}: {}", group_event_name(event), e.what());
    }
  }
}

WorkPtr ProcessGroup::allreduce(const TensorView& t, const ReduceOp& op) {
  check_cpu(t, "tensor");
  check_reduce_op(op, t.dtype());
  auto work = new_work("allreduce", {&t, 1}, {&t, 1});
  Staged s = stage(t, true);
  unstage_on_complete(work, t, s);
  do_allreduce(work, s.view, op);
  return work;
}

WorkPtr ProcessGroup::broadcast(const TensorView& t, int root) {
  check_cpu(t, "tensor");
  check_root(root, size_);
  auto work = new_work("broadcast", {&t, 1}, {&t, 1});
  Staged s = stage(t, rank_ == root);
  unstage_on_complete(work, t, s);
  do_broadcast(work, s.view, root);
  return work;
}

WorkPtr ProcessGroup::reduce(const TensorView& t, int root, const ReduceOp& op) {
  check_cpu(t, "tensor");
  check_root(root, size_);
  check_reduce_op(op, t.dtype());
  auto work = new_work("reduce", {&t, 1}, {&t, 1});
  Staged s = stage(t, true);
  if (rank_ == root) unstage_on_complete(work, t, s);
  else keep_alive(work, s);
  do_reduce(work, s.view, root, op);
  return work;
}

WorkPtr ProcessGroup::allgather(const std::vector<TensorView>& outputs, const TensorView& input) {
  check_cpu(input, "input");
  check_list(outputs, size_, input, "outputs");
  auto work = new_work("allgather", {&input, 1}, outputs);
  Staged in = stage(input, true);
  keep_alive(work, in);
  Staged out = concat(outputs, input.dtype(), input.numel(), false);
  auto scratch = out.scratch;
  work->add_finalizer([outputs, scratch] {
    size_t off = 0;
    for (const auto& t : outputs) {
      t.copy_from_contiguous(scratch->data() + off);
      off += t.nbytes();
    }
  });
  do_allgather(work, out.view, in.view);
  return work;
}

WorkPtr ProcessGroup::allgather_into_tensor(const TensorView& output, const TensorView& input) {
  check_cpu(input, "input");
  check_cpu(output, "output");
  check_same_dtype(input, output, "output.dtype");
  SINEW_ARG_CHECK(output.numel() == input.numel() * size_, "output.numel", output.numel(),
                  fmt::format("{} (world size {} x input numel {})", input.numel() * size_, size_,
                              input.numel()));
  auto work = new_work("allgather_into_tensor", {&input, 1}, {&output, 1});
  Staged in = stage(input, true);
  keep_alive(work, in);
  Staged out = stage(output, false);
  unstage_on_complete(work, output, out);
  do_allgather(work, out.view, in.view);
  return work;
}

WorkPtr ProcessGroup::gather(const std::vector<TensorView>& outputs, const TensorView& input, int root) {
  check_cpu(input, "input");
  check_root(root, size_);
  if (rank_ == root) check_list(outputs, size_, input, "outputs");
  auto work = new_work("gather", {&input, 1}, outputs);
  Staged in = stage(input, true);
  keep_alive(work, in);
  TensorView outv;
  if (rank_ == root) {
    Staged out = concat(outputs, input.dtype(), input.numel(), false);
    auto scratch = out.scratch;
    work->add_finalizer([outputs, scratch] {
      size_t off = 0;
      for (const auto& t : outputs) {
        t.copy_from_contiguous(scratch->data() + off);
        off += t.nbytes();
      }
    });
    outv = out.view;
  }
  do_gather(work, outv, in.view, root);
  return work;
}

WorkPtr ProcessGroup::scatter(const TensorView& output, const std::vector<TensorView>& inputs, int root) {
  check_cpu(output, "output");
  check_root(root, size_);
  if (rank_ == root) check_list(inputs, size_, output, "inputs");
  auto work = new_work("scatter", inputs, {&output, 1});
  Staged out = stage(output, false);
  unstage_on_complete(work, output, out);
  TensorView inv;
  if (rank_ == root) {
    Staged in = concat(inputs, output.dtype(), output.numel(), true);
    keep_alive(work, in);
    inv = in.view;
  }
  do_scatter(work, out.view, inv, root);
  return work;
}

WorkPtr ProcessGroup::reduce_scatter(const TensorView& output, const std::vector<TensorView>& inputs,
                                     const ReduceOp& op) {
  check_cpu(output, "output");
  check_reduce_op(op, output.dtype());
  check_list(inputs, size_, output, "inputs");
  auto work = new_work("reduce_scatter", inputs, {&output, 1});
  Staged in = concat(inputs, output.dtype(), output.numel(), true);
  keep_alive(work, in);
  Staged out = stage(output, false);
  unstage_on_complete(work, output, out);
  do_reduce_scatter(work, out.view, in.view, op);
  return work;
}

WorkPtr ProcessGroup::reduce_scatter_tensor(const TensorView& output, const TensorView& input,
                                            const ReduceOp& op) {
  check_cpu(output, "output");
  check_cpu(input, "input");
  check_same_dtype(input, output, "output.dtype");
  check_reduce_op(op, output.dtype());
  SINEW_ARG_CHECK(input.numel() == output.numel() * size_, "input.numel", input.numel(),
                  fmt::format("{} (world size {} x output numel {})", output.numel() * size_, size_,
                              output.numel()));
  auto work = new_work("reduce_scatter_tensor", {&input, 1}, {&output, 1});
  Staged in = stage(input, true);
  keep_alive(work, in);
  Staged out = stage(output, false);
  unstage_on_complete(work, output, out);
  do_reduce_scatter(work, out.view, in.view, op);
  return work;
}

WorkPtr ProcessGroup::all_to_all(const TensorView& output, const TensorView& input) {
  return all_to_all_v(output, input, {}, {});
}

WorkPtr ProcessGroup::all_to_all_v(const TensorView& output, const TensorView& input,
                                   const std::vector<int64_t>& output_split_sizes,
                                   const std::vector<int64_t>& input_split_sizes) {
  check_cpu(output, "output");
  check_cpu(input, "input");
  check_same_dtype(input, output, "output.dtype");
  auto splits = [&](const std::vector<int64_t>& given, const TensorView& t, const char* arg) {
    if (given.empty()) {
      SINEW_ARG_CHECK(t.numel() % size_ == 0, fmt::format("{}.numel", arg), t.numel(),
                      fmt::format("a multiple of the world size {} for an even split (or pass split sizes)", size_));
      return std::vector<int64_t>(size_, t.numel() / size_);
    }
    SINEW_ARG_CHECK(static_cast<int>(given.size()) == size_, fmt::format("{}_split_sizes", arg),
                    fmt::format("{}", given), fmt::format("{} entries (one per rank)", size_));
    int64_t sum = 0;
    for (auto v : given) {
      SINEW_ARG_CHECK(v >= 0, fmt::format("{}_split_sizes", arg), fmt::format("{}", given),
                      "non-negative sizes");
      sum += v;
    }
    SINEW_ARG_CHECK(sum == t.numel(), fmt::format("{}_split_sizes", arg), fmt::format("{} (sum {})", given, sum),
                    fmt::format("sizes summing to {}.numel() = {}", arg, t.numel()));
    return given;
  };
  auto out_splits = splits(output_split_sizes, output, "output");
  auto in_splits = splits(input_split_sizes, input, "input");
  auto work = new_work(output_split_sizes.empty() && input_split_sizes.empty() ? "all_to_all" : "all_to_all_v",
                       {&input, 1}, {&output, 1});
  Staged in = stage(input, true);
  keep_alive(work, in);
  Staged out = stage(output, false);
  unstage_on_complete(work, output, out);
  do_all_to_all(work, out.view, in.view, out_splits, in_splits);
  return work;
}

WorkPtr ProcessGroup::barrier() {
  auto work = new_work("barrier", {}, {});
  do_barrier(work);
  return work;
}

WorkPtr ProcessGroup::send(const TensorView& tensor, int dst, int tag) {
  return batch_isend_irecv({P2POp{P2POp::Kind::kSend, tensor, dst, tag}});
}

WorkPtr ProcessGroup::recv(const TensorView& tensor, int src, int tag) {
  return batch_isend_irecv({P2POp{P2POp::Kind::kRecv, tensor, src, tag}});
}

WorkPtr ProcessGroup::batch_isend_irecv(const std::vector<P2POp>& ops) {
  SINEW_ARG_CHECK(!ops.empty(), "ops", "an empty list", "at least one send or recv");
  const char* name = ops.size() == 1 ? (ops[0].kind == P2POp::Kind::kSend ? "send" : "recv")
                                     : "batch_isend_irecv";
  std::vector<P2POp> staged_ops;
  std::vector<Staged> staged;
  for (const auto& op : ops) {
    check_cpu(op.tensor, "tensor");
    check_peer(op.peer, size_, rank_, op.kind == P2POp::Kind::kSend ? "dst" : "src");
    SINEW_ARG_CHECK(op.tag >= 0, "tag", op.tag, "a tag >= 0");
  }
  std::vector<TensorView> sent, received;
  for (const auto& op : ops) (op.kind == P2POp::Kind::kSend ? sent : received).push_back(op.tensor);
  int peer = ops[0].peer;
  for (const auto& op : ops)
    if (op.peer != peer) peer = -1;
  auto work = new_work(name, sent, received, /*p2p=*/true, peer);
  for (const auto& op : ops) {
    Staged s = stage(op.tensor, op.kind == P2POp::Kind::kSend);
    if (op.kind == P2POp::Kind::kRecv) unstage_on_complete(work, op.tensor, s);
    else keep_alive(work, s);
    staged_ops.push_back(P2POp{op.kind, s.view, op.peer, op.tag});
  }
  do_batch_p2p(work, staged_ops);
  return work;
}

std::shared_ptr<ProcessGroup> ProcessGroup::split(int color, int key) {
  // Agree on membership with one allgather of (color, key).
  std::vector<int64_t> mine = {color, key};
  std::vector<int64_t> all(2 * static_cast<size_t>(size_));
  allgather_into_tensor(TensorView::flat(all.data(), DType::kI64, static_cast<int64_t>(all.size())),
                        TensorView::flat(mine.data(), DType::kI64, 2))
      ->wait();
  const std::string tag = fmt::format("{}/split{}", name_, subgroup_counter_++);
  std::vector<std::pair<int64_t, int>> members;
  // Every color's membership is remembered on every rank, so subgroups can
  // follow a reconfigure.
  std::set<int64_t> colors;
  for (int r = 0; r < size_; ++r)
    if (all[2 * r] >= 0) colors.insert(all[2 * r]);
  std::shared_ptr<ProcessGroup> mine_child;
  for (int64_t c : colors) {
    std::vector<std::pair<int64_t, int>> members;
    for (int r = 0; r < size_; ++r)
      if (all[2 * r] == c) members.emplace_back(all[2 * r + 1], r);
    std::sort(members.begin(), members.end());
    std::vector<int> ranks;
    int new_rank = -1;
    for (auto& [k, r] : members) {
      if (r == rank_) new_rank = static_cast<int>(ranks.size());
      ranks.push_back(r);
    }
    const std::string desc = fmt::format("split of {} color {}", name_, c);
    std::shared_ptr<ProcessGroup> child;
    if (c == color) {
      SINEW_CHECK_GE(new_rank, 0);
      SINEW_DEBUG(kInit, "split of {} color {} key {}: ranks {} -> new rank {}", name_, color, key, ranks, new_rank);
      trace_event(GroupEvent::kSplit, fmt::format("color {} key {}: ranks {}", color, key, ranks));
      child = make_subgroup(ranks, new_rank, fmt::format("{}/c{}", tag, color));
      if (child) child->set_trace_identity(desc, job_ranks_of(ranks));
      mine_child = child;
    }
    remember_subgroup(std::move(ranks), fmt::format("{}/c{}", tag, c), desc, child);
  }
  return mine_child;
}

std::shared_ptr<ProcessGroup> ProcessGroup::new_group(const std::vector<int>& ranks) {
  std::set<int> uniq(ranks.begin(), ranks.end());
  SINEW_ARG_CHECK(uniq.size() == ranks.size() && !ranks.empty(), "ranks", fmt::format("{}", ranks),
                  "a non-empty list of distinct ranks");
  for (int r : ranks)
    SINEW_ARG_CHECK(r >= 0 && r < size_, "ranks", fmt::format("{}", ranks),
                    fmt::format("ranks in [0, {})", size_));
  // Every rank must pass the same list: check with one allgather of a hash.
  uint64_t h = 1469598103934665603ull;
  for (int r : ranks) h = (h ^ static_cast<uint64_t>(r + 1)) * 1099511628211ull;
  std::vector<int64_t> all(size_);
  int64_t mine = static_cast<int64_t>(h);
  allgather_into_tensor(TensorView::flat(all.data(), DType::kI64, size_), TensorView::flat(&mine, DType::kI64, 1))
      ->wait();
  for (int r = 0; r < size_; ++r)
    if (all[r] != mine)
      throw InvalidArgument::make("ranks", fmt::format("{} on rank {}", ranks, rank_),
                                  fmt::format("the same list on every rank (rank {} passed a different one)", r));
  const std::string tag = fmt::format("{}/group{}", name_, subgroup_counter_++);
  const std::string desc = fmt::format("new_group of {} {}", name_, ranks);
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  std::shared_ptr<ProcessGroup> child;
  if (it != ranks.end()) {
    child = make_subgroup(ranks, static_cast<int>(it - ranks.begin()), tag);
    if (child) child->set_trace_identity(desc, job_ranks_of(ranks));
  }
  remember_subgroup(ranks, tag, desc, child);
  return child;
}

void ProcessGroup::remember_subgroup(std::vector<int> ranks, std::string tag, std::string desc,
                                     const std::shared_ptr<ProcessGroup>& child) {
  recipes_.push_back(SubgroupRecipe{std::move(ranks), std::move(tag), std::move(desc), child, child.get()});
}

void ProcessGroup::follow_subgroups(ProcessGroup& old, const std::vector<int>& survivors) {
  std::map<int, int> renumber;  // old rank -> new rank
  for (size_t i = 0; i < survivors.size(); ++i) renumber[survivors[i]] = static_cast<int>(i);
  for (size_t i = 0; i < old.recipes_.size(); ++i) {
    const SubgroupRecipe& r = old.recipes_[i];
    std::vector<int> kept;  // new-group ranks of the surviving members, in subgroup order
    for (int m : r.ranks)
      if (auto it = renumber.find(m); it != renumber.end()) kept.push_back(it->second);
    std::shared_ptr<ProcessGroup> before = r.group.lock();
    if (kept.empty()) {
      if (r.id) successors_[r.id] = nullptr;
      if (before) before->abort(fmt::format("none of its members survived the reconfigure of '{}'", name_));
      continue;
    }
    std::shared_ptr<ProcessGroup> after;
    if (kept.size() == r.ranks.size()) {
      after = before;  // lost no member: kept as it is
    } else {
      auto me = std::find(kept.begin(), kept.end(), rank_);
      if (me != kept.end()) {
        // From the subgroup's own tag, which every member has (a recipe's
        // position differs on a joiner); "@e<epoch>" cannot meet the tags of
        // split()/new_group() in this epoch's namespace.
        after = make_subgroup(kept, static_cast<int>(me - kept.begin()), fmt::format("{}@e{}", r.tag, epoch()));
        if (after) after->set_trace_identity(fmt::format("{} (epoch {})", r.desc, epoch()), job_ranks_of(kept));
      }
      if (before)
        before->abort(fmt::format("a member failed and group '{}' was reconfigured to epoch {}; its successor() "
                                  "continues with {} of {} ranks", name_, epoch(), kept.size(), r.ranks.size()));
    }
    if (r.id) successors_[r.id] = after;
    recipes_.push_back(SubgroupRecipe{std::move(kept), after == before ? r.tag : fmt::format("{}@e{}", r.tag, epoch()),
                                      r.desc, after, after.get()});
  }
}

std::shared_ptr<ProcessGroup> ProcessGroup::successor(const ProcessGroup* old_subgroup) const {
  auto it = successors_.find(old_subgroup);
  if (it == successors_.end())
    throw InvalidArgument::make("old_subgroup", old_subgroup ? "a group" : "nullptr",
                                fmt::format("a subgroup this rank got from split() or new_group() of the group "
                                            "that '{}' (epoch {}) was reconfigured from", name_, epoch()));
  return it->second;
}

std::vector<int> ProcessGroup::job_ranks_of(const std::vector<int>& group_ranks) {
  auto mine = hookset()->group.ranks;
  if (mine.empty()) return {};
  std::vector<int> out;
  for (int r : group_ranks) out.push_back(mine[r]);
  return out;
}

void register_backend(const std::string& name, BackendFactory factory) {
  std::lock_guard<std::mutex> g(backends_mutex());
  backends()[name] = factory;
}

std::vector<int> ProcessGroup::agree_on_failures(Deadline) {
  throw InvalidArgument::make("backend", backend_name(), "the sinew backend for agree_on_failures()");
}

std::shared_ptr<ProcessGroup> ProcessGroup::reconfigure(Deadline) {
  throw InvalidArgument::make("backend", backend_name(), "the sinew backend for reconfigure()");
}

std::string ProcessGroup::reconfigure_handle() const {
  throw InvalidArgument::make("backend", backend_name(), "the sinew backend for reconfigure_handle()");
}

std::shared_ptr<ProcessGroup> ProcessGroup::reconfigure(const std::string&, const std::vector<std::string>&, Millis) {
  throw InvalidArgument::make("backend", backend_name(), "the sinew backend for reconfigure(uuid, handles, timeout)");
}

int ProcessGroup::claim_reconfigure(Store& store, const std::string& uuid, const std::vector<std::string>& handles,
                                    const std::string& mine) {
  SINEW_ARG_CHECK(!uuid.empty() && uuid.find('/') == std::string::npos, "uuid", fmt::format("'{}'", uuid),
                  "a non-empty id without '/'");
  auto it = std::find(handles.begin(), handles.end(), mine);
  SINEW_ARG_CHECK(it != handles.end(), "handles", fmt::format("{} handles", handles.size()),
                  fmt::format("a list containing this rank's handle '{}'", mine));
  SINEW_ARG_CHECK(std::count(handles.begin(), handles.end(), mine) == 1, "handles", fmt::format("{}", handles),
                  "each rank's handle once");
  // A uuid names one reconfiguration: the first caller claims it for this
  // handle list; any other use is rejected.
  const std::string list = fmt::format("{}", fmt::join(handles, ";"));
  Bytes claimed = store.compare_set("uuid/" + uuid, {}, to_bytes(list));
  if (to_string(claimed) != list)
    throw InvalidArgument::make("uuid", fmt::format("'{}'", uuid),
                                "a uuid not used before (it names an earlier reconfiguration of this group "
                                "with other handles; pass a fresh one)");
  return static_cast<int>(it - handles.begin());
}

void ProcessGroup::add_abort_hook(std::function<void(const std::string&)> hook) {
  std::lock_guard<std::mutex> g(hooks_mu_);
  abort_hooks_.push_back(std::move(hook));
}

void ProcessGroup::run_abort_hooks(const std::string& reason) {
  for (const auto& h : hookset()->hooks) {
    try {
      h->on_abort(reason);
    } catch (const std::exception& e) {
      SINEW_WARN(kColl, "a process-group hook failed on abort: {}", e.what());
    }
  }
  std::vector<std::function<void(const std::string&)>> hooks;
  {
    std::lock_guard<std::mutex> g(hooks_mu_);
    hooks = abort_hooks_;
  }
  for (auto& h : hooks) h(reason);
}

ProcessGroupPtr join_native_process_group(const GroupOptions& o, Deadline deadline);  // native/

ProcessGroupPtr join_process_group(const GroupOptions& options, Deadline deadline) {
  SINEW_ARG_CHECK(options.backend == "sinew", "backend", options.backend, "sinew (the backend that can grow)");
  return join_native_process_group(options, deadline);
}

void broadcast_state(ProcessGroup& pg, const std::vector<TensorView>& tensors, int root) {
  std::vector<WorkPtr> works;
  works.reserve(tensors.size());
  for (const auto& t : tensors) works.push_back(pg.broadcast(t, root));
  wait_all(works);
}

void register_builtin_backends();  // backends.cc

std::vector<std::string> available_backends() {
  register_builtin_backends();
  std::lock_guard<std::mutex> g(backends_mutex());
  std::vector<std::string> names;
  for (auto& [n, f] : backends()) names.push_back(n);
  return names;
}

ProcessGroupPtr create_process_group(const GroupOptions& options) {
  register_builtin_backends();
  BackendFactory f = nullptr;
  {
    std::lock_guard<std::mutex> g(backends_mutex());
    auto it = backends().find(options.backend);
    if (it != backends().end()) f = it->second;
  }
  if (!f) {
    auto names = available_backends();
    throw InvalidArgument::make("backend", fmt::format("'{}'", options.backend),
                                fmt::format("one of {} (built into this sinew)", names));
  }
  return f(options);
}

}  // namespace sinew::dist
