// The native "sinew" backend: shared memory when every rank is on one host,
// UCX otherwise. Ops run in issue order on the group's OpQueue; small ones
// run on the caller's thread when the queue is idle.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <random>
#include <sstream>
#include <thread>

#include "../ft_agreement.h"
#include "../op_queue.h"
#include "../process_identity.h"
#include "net_collectives.h"
#include "shm_collectives.h"
#include "dist/shm/shm_engine.h"
#include "sinew/core/check.h"
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
const EnvParam<int64_t> kHeartbeatMs{"SINEW_FT_HEARTBEAT_MS", 10,
                                     "interval of each rank's watchdog: heartbeat and peer liveness checks"};
// 2 s: a loaded 2-core machine can starve a thread for hundreds of ms; a
// stopped process is still caught well before typical collective timeouts.
const EnvParam<int64_t> kHeartbeatTimeoutMs{"SINEW_FT_HEARTBEAT_TIMEOUT_MS", 2000,
                                            "a peer whose heartbeat stalls this long (stopped, hung) is failed"};
const EnvParam<int64_t> kStoreHeartbeatMs{"SINEW_FT_STORE_HEARTBEAT_MS", 200,
                                          "groups spanning hosts: heartbeat and revoke poll interval through "
                                          "the job store"};
// Long enough for live members to rendezvous (milliseconds); short enough
// that a group dropped while unwinding from an error, with a member that
// never came, does not hold the process for the group timeout.
const EnvParam<int64_t> kDestroyInitWaitMs{"SINEW_DESTROY_INIT_WAIT_MS", 10000,
                                           "a group destroyed before its init finished lets init run this long "
                                           "(at most the group timeout), so the other members' rendezvous "
                                           "completes"};
const EnvParam<std::string> kTransport{"SINEW_TRANSPORT", std::string("auto"),
                                       "auto (shared memory on one host, UCX between hosts), shm or ucx"};


// Joiner ids travel as one ";"-separated list (empty entries ignored).
std::vector<std::string> split_ids(const std::string& list) {
  std::vector<std::string> ids;
  size_t pos = 0;
  while (pos < list.size()) {
    size_t end = list.find(';', pos);
    if (end == std::string::npos) end = list.size();
    if (end > pos) ids.push_back(list.substr(pos, end - pos));
    pos = end + 1;
  }
  return ids;
}

// A process's liveness hint, "<pid>@<host identity>": on that host, a pid
// that is gone means the process died.
const std::string& this_host() {
  static const std::string h = host_identity();
  return h;
}
std::string my_hint() { return fmt::format("{}@{}", ::getpid(), this_host()); }
bool hint_dead(const std::string& hint) {
  const size_t at = hint.find('@');
  if (at == std::string::npos || at == 0 || hint.compare(at + 1, std::string::npos, this_host()) != 0) return false;
  return !process_alive(static_cast<pid_t>(std::stol(hint.substr(0, at))));
}

class NativeProcessGroup final : public ProcessGroup {
 public:
  // `root` is the group's namespace in the job store; each epoch works
  // under "<root>/e<epoch>".
  // `hints` (may be empty): each rank's liveness hint from before this group
  // existed, so a rank that dies before it even starts init is seen.
  // `links` (may be null): the previous epoch's UCX connections.
  NativeProcessGroup(StorePtr root, int rank, int size, std::string name, Millis timeout, std::string transport,
                     uint64_t epoch = 0, std::vector<std::string> hints = {},
                     std::function<std::vector<int>()> lost_ranks = {}, TransportLinksPtr links = nullptr)
      : ProcessGroup(rank, size, name, timeout),
        links_(std::move(links)),
        lost_ranks_(std::move(lost_ranks)),
        root_(root),
        store_(root ? make_prefix_store(fmt::format("e{}", epoch), root) : nullptr),
        epoch_(epoch),
        hints_(std::move(hints)),
        transport_choice_(std::move(transport)),
        queue_("sinew:" + name) {
    if (transport_choice_ == "auto" && kTransport.get() != "auto") transport_choice_ = kTransport.get();
    if (transport_choice_ != "auto" && transport_choice_ != "shm" && transport_choice_ != "ucx")
      throw InvalidArgument::make("transport", fmt::format("'{}'", transport_choice_), "one of auto, shm, ucx");
    if (!store_) throw InvalidArgument::make("store", "nullptr", "a store for the sinew backend's rendezvous");
    queue_.post_init([this] { init(); });
  }

  ~NativeProcessGroup() override {
    // Creating a group is collective: a member that dropped its queued init
    // (shutdown() below drops it) would leave the others waiting for its
    // segment until their timeout, as a subgroup made and destroyed unused
    // did. So init runs to its end first: quick when the members are alive
    // (each does the same), bounded when one never comes.
    try {
      queue_.wait_init(Deadline::after(std::min(timeout(), Millis(kDestroyInitWaitMs.get()))));
    } catch (const Error&) {  // its outcome no longer matters
    }
    aborted_.store(true);
    {
      std::lock_guard<std::mutex> g(watch_mu_);
      watch_stop_ = true;
    }
    watch_cv_.notify_all();
    if (net_ready_.load()) net_->abort();
    queue_.shutdown();  // init (which starts the watchdog) is over after this
    if (watchdog_.joinable()) watchdog_.join();
    if (shm_ready_.load()) shm_->depart();
    if (net_ready_.load()) {
      try {  // a clean departure is not a failure for the store heartbeat either
        root_->set(fmt::format("ft/e{}/left/{}", epoch_, rank()), "1");
      } catch (const Error&) {
      }
    }
  }

  uint64_t epoch() const override { return epoch_; }

  std::vector<int> agree_on_failures(Deadline deadline) override {
    AgreementParty party{*root_, name(), epoch_, rank(), size(), [this](int r) { return known_dead(r); }};
    return agree_on_failed_ranks(party, local_failed_view(), deadline);
  }

  // Shrink and grow in one step: agree on the failed set, then admit the
  // processes waiting to join (join_process_group) after the survivors.
  std::shared_ptr<ProcessGroup> reconfigure(Deadline deadline) override {
    auto failed = agree_on_failures(deadline);
    std::vector<int> survivors;
    for (int r = 0; r < size(); ++r)
      if (!std::binary_search(failed.begin(), failed.end(), r)) survivors.push_back(r);
    const int new_rank = static_cast<int>(std::find(survivors.begin(), survivors.end(), rank()) - survivors.begin());
    std::vector<std::string> hints;
    for (int r : survivors) hints.push_back(hint_of(r));
    const auto joiners = admit_joiners(survivors, hints, deadline);
    // A joiner's id ends with its hint.
    for (const auto& id : joiners) hints.push_back(id.substr(id.find('-') + 1));
    const int new_size = static_cast<int>(survivors.size() + joiners.size());
    // A change of membership is worth a warning; a plain epoch bump is not.
    if (!failed.empty() || !joiners.empty())
      SINEW_WARN(kFt, "group '{}' epoch {}: failed ranks {}, {} joiner(s); rank {} continues as rank {} of {} in epoch {}",
                 name(), epoch_, failed, joiners.size(), rank(), new_rank, new_size, epoch_ + 1);
    else
      SINEW_INFO(kFt, "group '{}': epoch {} -> {} with the same {} ranks", name(), epoch_, epoch_ + 1, new_size);
    trace_event(GroupEvent::kReconfigure,
                fmt::format("epoch {} -> {}: failed ranks {}, {} joiner(s); rank {} -> {} of {}", epoch_, epoch_ + 1,
                            failed, joiners.size(), rank(), new_rank, new_size));
    auto next = std::make_shared<NativeProcessGroup>(root_, new_rank, new_size, name(), timeout(), transport_choice_,
                                                     epoch_ + 1, std::move(hints), nullptr, hand_over_links());
    std::vector<int> job_ranks;
    if (joiners.empty()) {  // joiners' job ranks are not known here
      auto old = group_info().ranks;
      if (!old.empty())
        for (int r : survivors) job_ranks.push_back(old[r]);
    }
    next->set_trace_identity(fmt::format("reconfigure of {} (epoch {})", name(), epoch_ + 1), std::move(job_ranks));
    next->follow_subgroups(*this, survivors);
    return next;
  }

  // The first survivor takes the pending join requests and decides the
  // admitted list (compare_set, once); if it dies before deciding, the next
  // live survivor decides in its place. Every survivor then writes each
  // joiner's admission (same values): "<epoch> <rank> <size> <hint;hint;...>",
  // the members' liveness hints.
  std::vector<std::string> admit_joiners(const std::vector<int>& survivors, const std::vector<std::string>& hints,
                                         Deadline deadline) {
    const std::string admitted_key = fmt::format("join/e{}/admitted", epoch_);
    auto decide = [&] {
      Bytes pending = root_->compare_set("join/pending", {}, to_bytes(";"));
      // Take the list: swap it for the empty marker; retry if a joiner appended meanwhile.
      while (!pending.empty()) {
        Bytes now = root_->compare_set("join/pending", pending, to_bytes(";"));
        if (now == to_bytes(";")) break;
        pending = now;
      }
      // ";"-led, so that no joiners is not an empty value.
      return split_ids(to_string(root_->compare_set(admitted_key, {}, to_bytes(";" + to_string(pending)))));
    };
    std::vector<std::string> ids;
    for (int i = 0;; ++i) {
      if (survivors[i] == rank()) {
        ids = root_->check({admitted_key}) ? split_ids(root_->get_string(admitted_key)) : decide();
        break;
      }
      try {
        wait_keys_checked(*root_, {admitted_key}, deadline, &aborted_, [&] {
          if (known_dead(survivors[i])) throw PeerLostError("admitting leader died", {survivors[i]});
        });
        ids = split_ids(root_->get_string(admitted_key));
        break;
      } catch (const PeerLostError&) {
        SINEW_WARN(kFt, "group '{}' epoch {}: rank {} died before admitting the joiners", name(), epoch_,
                   survivors[i]);
      }
    }
    const int n = static_cast<int>(survivors.size());
    for (size_t i = 0; i < ids.size(); ++i)
      root_->set("join/admitted/" + ids[i], fmt::format("{} {} {} {}", epoch_ + 1, n + static_cast<int>(i),
                                                        n + ids.size(), fmt::join(hints, ";")));
    return ids;
  }

  std::string backend_name() const override { return "sinew"; }

  std::string reconfigure_handle() const override {
    // Self-describing and unique per rank and epoch.
    return fmt::format("sinew|{}|e{}|r{}|{}|pid{}", name(), epoch_, rank(), host_identity(), ::getpid());
  }

  std::shared_ptr<ProcessGroup> reconfigure(const std::string& uuid, const std::vector<std::string>& handles,
                                            Millis timeout) override {
    const int new_rank = claim_reconfigure(*root_, uuid, handles, reconfigure_handle());
    SINEW_INFO(kFt, "group '{}': external reconfigure '{}' -> rank {} of {}", name(), uuid, new_rank, handles.size());
    trace_event(GroupEvent::kReconfigure, fmt::format("external reconfigure '{}': epoch {} -> {}; rank {} -> {} of {}",
                                                      uuid, epoch_, epoch_ + 1, rank(), new_rank, handles.size()));
    auto next = std::make_shared<NativeProcessGroup>(make_prefix_store("u/" + uuid, root_), new_rank,
                                                     static_cast<int>(handles.size()), name(), timeout,
                                                     transport_choice_, epoch_ + 1, std::vector<std::string>{},
                                                     nullptr, hand_over_links());
    next->set_trace_identity(fmt::format("reconfigure '{}' of {} (epoch {})", uuid, name(), epoch_ + 1), {});
    return next;
  }

  // The survivors keep their UCX connections into the next epoch, and this
  // group, which the next one replaces, fails its later ops. No op may be
  // inside the transport while it changes hands.
  TransportLinksPtr hand_over_links() {
    if (!net_ready_.load()) return nullptr;
    return queue_.run_exclusive([this] { return net_->hand_over(); });
  }

  void abort(const std::string& reason) override {
    run_abort_hooks(reason);
    {
      std::lock_guard<std::mutex> g(abort_mu_);
      abort_message_ = fmt::format("process group '{}' (rank {}) aborted: {}", name(), rank(), reason);
    }
    aborted_.store(true);
    if (net_ready_.load()) net_->abort();
    queue_.abort(Status(ErrorCode::kAborted, abort_message()));
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
  // What an op that abort() ended says: the group, the rank and the reason.
  std::string abort_message() const {
    std::lock_guard<std::mutex> g(abort_mu_);
    return abort_message_.empty() ? fmt::format("process group '{}' was aborted", name()) : abort_message_;
  }

  template <class F>
  void run(const WorkPtr& w, size_t bytes, F&& body) {
    const Deadline d = w->default_deadline();
    auto guarded = [this, d](F& b) {
      if (aborted_.load(std::memory_order_relaxed)) throw AbortedError(abort_message());
      try {
        b(d);
      } catch (const AbortedError& e) {
        // The engines see only the group's flag; the user's reason is here.
        throw AbortedError(fmt::format("{} ({})", e.what(), abort_message()));
      } catch (const PeerLostError& e) {
        note_failed(e.ranks());
        error_state_.store(ErrorState::kCommError);
        if (net_) publish_revoke(e.ranks());
        throw;
      } catch (const TimeoutError&) {
        error_state_.store(ErrorState::kTimeout);
        throw;
      } catch (const IoError&) {
        error_state_.store(ErrorState::kCommError);
        throw;
      }
    };
    // Inline over shared memory, every wait reads the clock as it spins
    // (ShmEngine::check_progress), on the thread that completes the op, and
    // the op is small: little happens after its last wait.
    if (static_cast<int64_t>(bytes) <= kInlineBytes.get() && queue_.try_run_inline(w, [&] {
          if (shm_) w->set_waits_report_clock();
          guarded(body);
        }))
      return;
    queue_.post(w, [guarded, b = std::forward<F>(body)]() mutable { guarded(b); });
  }

  // Rank r's liveness hint: the one this group was made with, else the one
  // r published at init.
  std::string hint_of(int r) {
    if (r < static_cast<int>(hints_.size()) && hints_[r] != "?") return hints_[r];
    {
      std::lock_guard<std::mutex> g(published_mu_);
      if (auto it = published_.find(r); it != published_.end()) return it->second;
    }
    const std::string k = fmt::format("pid/{}", r);
    try {
      if (store_->check({k})) {
        std::string h = store_->get_string(k);
        std::lock_guard<std::mutex> g(published_mu_);
        return published_.emplace(r, std::move(h)).first->second;
      }
    } catch (const Error&) {
    }
    return "?";  // unknown (never empty: hints travel as a ';'-list)
  }

  bool known_dead(int r) {
    if (shm_ready_.load()) return !shm_->peer_alive(r);
    return hint_dead(hint_of(r));
  }

  // While init waits on the peers: a peer that died fails it with
  // PeerLostError instead of leaving it to the deadline.
  // While the group sets up: a peer its launcher reported lost, or whose
  // process is gone, fails setup with PeerLostError naming it.
  void check_peers_during_setup() {
    fail_if_launcher_lost_a_rank();
    fail_if_peer_died();
  }

  void fail_if_peer_died() {
    std::vector<int> dead;
    for (int r = 0; r < size(); ++r)
      if (r != rank() && known_dead(r)) dead.push_back(r);
    if (dead.empty()) return;
    SINEW_WARN(kFt, "group '{}' epoch {}: rank(s) {} died before the group was ready", name(), epoch_, dead);
    throw PeerLostError(fmt::format("process group '{}' epoch {}: rank(s) {} died before the group was ready; "
                                    "agree on the failed set and reconfigure() to continue with the survivors",
                                    name(), epoch_, dead),
                        dead);
  }

  void note_failed(const std::vector<int>& ranks) {
    std::lock_guard<std::mutex> g(failed_mu_);
    known_failed_.insert(ranks.begin(), ranks.end());
  }

  std::set<int> local_failed_view() {
    std::set<int> out;
    {
      std::lock_guard<std::mutex> g(failed_mu_);
      out = known_failed_;
    }
    if (shm_ready_.load()) {
      for (int r : shm_->revoked_failed_set()) out.insert(r);
      for (int r = 0; r < size(); ++r)
        if (!shm_->peer_alive(r)) out.insert(r);
    }
    return out;
  }

  // Groups spanning hosts revoke through the job store: the failed set is
  // merged into one key that every rank's watchdog polls.
  std::string revoke_key() const { return fmt::format("ft/e{}/revoked", epoch_); }

  void publish_revoke(const std::vector<int>& failed) { publish_revoke(failed, *root_); }
  void publish_revoke(const std::vector<int>& failed, Store& store) {
    try {
      merge_rank_set(store, revoke_key(), std::set<int>(failed.begin(), failed.end()));
    } catch (const Error& e) {
      SINEW_WARN(kFt, "group '{}': could not publish the revoke: {}", name(), e.what());
    }
  }

  // Store heartbeats between hosts: each rank bumps its key; a key that
  // stops changing for the heartbeat timeout means a stopped or hung peer.
  void watch_store() {
    // Its own connection: a rank blocked in a long wait on the job store
    // (which shares the client) must not stop heartbeating and be declared
    // failed by its peers.
    StorePtr hb = root_;
    try {
      if (StorePtr own = root_->clone()) hb = std::move(own);
    } catch (const Error& e) {
      SINEW_WARN(kFt, "group '{}': no separate store connection for heartbeats ({}); sharing one", name(), e.what());
    }
    const Millis interval(kStoreHeartbeatMs.get());
    const auto stall = Millis(kHeartbeatTimeoutMs.get());
    std::vector<std::string> last(size());
    std::vector<Clock::time_point> changed(size(), Clock::now());
    int64_t beat = 0;
    bool revoked = false;
    std::unique_lock<std::mutex> lk(watch_mu_);
    while (!watch_cv_.wait_for(lk, interval, [&] { return watch_stop_; })) {
      try {
        hb->set(fmt::format("ft/e{}/hb/{}", epoch_, rank()), std::to_string(++beat));
        if (revoked) continue;
        std::vector<int> failed;
        if (hb->check({revoke_key()})) {
          auto set = decode_rank_set(hb->get_string(revoke_key()));
          failed.assign(set.begin(), set.end());
        } else {
          const auto now = Clock::now();
          for (int r = 0; r < size(); ++r) {
            if (r == rank()) continue;
            const std::string k = fmt::format("ft/e{}/hb/{}", epoch_, r);
            std::string v = hb->check({k}) ? hb->get_string(k) : "";
            if (v != last[r]) {
              last[r] = v;
              changed[r] = now;
            } else if (now - changed[r] > stall && hb->check({fmt::format("ft/e{}/left/{}", epoch_, r)}) == false) {
              failed.push_back(r);
            }
          }
          if (!failed.empty()) publish_revoke(failed, *hb);
        }
        if (!failed.empty()) {
          SINEW_WARN(kFt, "group '{}' epoch {}: rank(s) {} failed; revoking", name(), epoch_, failed);
          trace_event(GroupEvent::kRevoke, fmt::format("rank(s) {} failed (store heartbeat or revoke record)", failed));
          note_failed(failed);
          net_->revoke(Status(ErrorCode::kPeerLost,
                              fmt::format("process group revoked: rank(s) {} failed; agree on the failed set and "
                                          "reconfigure() to continue with the survivors",
                                          failed),
                              failed));
          revoked = true;
        }
      } catch (const Error& e) {
        SINEW_WARN(kFt, "group '{}': store heartbeat failed: {}", name(), e.what());
      }
    }
  }

  // Heartbeat and liveness: revokes the group as soon as a peer dies or
  // stops, so survivors learn of it without waiting on that peer.
  void watch() {
    const Millis interval(kHeartbeatMs.get());
    const auto stall = Millis(kHeartbeatTimeoutMs.get());
    std::vector<uint64_t> last(size(), 0);
    std::vector<Clock::time_point> changed(size(), Clock::now());
    bool reported = false;
    std::unique_lock<std::mutex> lk(watch_mu_);
    while (!watch_cv_.wait_for(lk, interval, [&] { return watch_stop_; })) {
      shm_->beat();
      if (reported) continue;
      const auto now = Clock::now();
      std::vector<int> failed;
      for (int r = 0; r < size(); ++r) {
        if (r == rank() || shm_->departed(r)) continue;  // a clean exit is not a failure
        const uint64_t hb = shm_->heartbeat(r);
        if (hb != last[r]) {
          last[r] = hb;
          changed[r] = now;
        }
        // departed() again after a dead pid: a peer may depart and exit
        // between the first look and the liveness check.
        if ((!shm_->peer_alive(r) && !shm_->departed(r)) || now - changed[r] > stall) failed.push_back(r);
      }
      if (!failed.empty()) {
        SINEW_WARN(kFt, "group '{}' epoch {}: rank(s) {} failed (process gone or heartbeat stalled for {} ms); "
                   "revoking", name(), epoch_, failed, stall.count());
        trace_event(GroupEvent::kRevoke, fmt::format("rank(s) {} failed (process gone or heartbeat stalled)", failed));
        note_failed(failed);
        shm_->revoke(failed);
        reported = true;
      }
    }
  }

  void init() {
    try {
      init_engine();
    } catch (const PeerLostError& e) {
      note_failed(e.ranks());
      error_state_.store(ErrorState::kCommError);
      throw;
    }
  }

  void init_engine() {
    const Deadline deadline = Deadline::after(timeout());
    store_->set(fmt::format("pid/{}", rank()), my_hint());
    // Which ranks share this host?
    store_->set(fmt::format("host/{}", rank()), host_identity());
    std::vector<std::string> keys;
    for (int r = 0; r < size(); ++r) keys.push_back(fmt::format("host/{}", r));
    wait_keys_checked(*store_, keys, deadline, &aborted_, [this] { check_peers_during_setup(); });
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
      links_.reset();
      ShmEngine::Options o;
      o.slot_bytes = static_cast<size_t>(kShmSlotBytes.get());
      o.ring_bytes = static_cast<size_t>(kShmRingBytes.get());
      o.check_peers = [this] { check_peers_during_setup(); };
      shm_ = std::make_unique<ShmEngine>(store_, rank(), size(), o, deadline, &aborted_);
      shm_ready_.store(true);
      watchdog_ = std::thread([this] { watch(); });
    } else {
      // Lost ranks end the address rendezvous (before any endpoint exists).
      // A half-connected worker is never kept going without a lost peer:
      // that made a peer's UCX 1.13 assert in its progress (tcp_ep.c, a
      // refused connection); a rank lost during the wire-up fails it.
      net_ = make_ucx_transport(make_prefix_store("ucx", store_), rank(), size(), deadline,
                                [this] { check_peers_during_setup(); }, std::move(links_), epoch_);
      net_ready_.store(true);
      watchdog_ = std::thread([this] { watch_store(); });
    }
    SINEW_INFO(kInit, "group '{}' ready: rank {}/{} over {}", name(), rank(), size(), choice);
    drop_old_epoch_keys();
  }

  // A rank its launcher saw die before it joined would otherwise keep the
  // others waiting until the group timeout.
  void fail_if_launcher_lost_a_rank() {
    if (!lost_ranks_) return;
    const std::vector<int> lost = lost_ranks_();
    if (lost.empty()) return;
    note_failed(lost);
    error_state_.store(ErrorState::kCommError);
    throw PeerLostError(fmt::format("group '{}' (rank {} of {}): rank(s) {} died before the group was initialized "
                                    "(its launcher reported it lost); agree on the failed set and reconfigure() to "
                                    "continue with the survivors",
                                    name(), rank(), size(), lost),
                        lost);
  }

  // Every member of this epoch has rendezvoused, so all of them left epoch
  // e-1's agreement, and nobody reads epoch e-2's keys any more: the first
  // rank drops them, so a long run of reconfigures does not grow the store.
  void drop_old_epoch_keys() {
    if (rank() != 0 || epoch_ < 2) return;
    const uint64_t e = epoch_ - 2;
    try {
      // First the marker a left-behind rank checks (ft_agreement.h), then
      // the epoch's own keys: its rendezvous, engine, agreement and
      // admission records. Not the rest of "e<e>/": subgroups kept through
      // the reconfigures live there.
      root_->set(kCurrentEpochKey, std::to_string(epoch_));
      int64_t n = 0;
      for (const char* part : {"host/", "pid/", "shm/", "ucx/"}) n += root_->delete_prefix(fmt::format("e{}/{}", e, part));
      for (const auto& prefix : {fmt::format("ft/e{}/", e), fmt::format("join/e{}/", e)})
        n += root_->delete_prefix(prefix);
      SINEW_DEBUG(kFt, "group '{}' epoch {}: dropped {} store keys of epoch {}", name(), epoch_, n, e);
    } catch (const Error& err) {  // housekeeping only: the group works without it
      SINEW_WARN(kFt, "group '{}' epoch {}: could not drop epoch {}'s store keys: {}", name(), epoch_, e, err.what());
    }
  }

  TransportLinksPtr links_;  // until init: the previous epoch's connections
  std::function<std::vector<int>()> lost_ranks_;
  StorePtr root_;
  StorePtr store_;
  uint64_t epoch_;
  std::vector<std::string> hints_;  // immutable after construction
  std::mutex published_mu_;
  std::map<int, std::string> published_;  // hints read from the store ("pid/<rank>"), which never change
  std::string transport_choice_;
  std::atomic<bool> shm_ready_{false};
  std::atomic<bool> net_ready_{false};
  mutable std::mutex abort_mu_;
  std::string abort_message_;  // set by abort(), before aborted_
  std::mutex failed_mu_;
  std::set<int> known_failed_;
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool watch_stop_ = false;
  std::thread watchdog_;
  std::unique_ptr<ShmEngine> shm_;
  TransportPtr net_;
  OpQueue queue_;  // last: its worker must stop before the engines go
};

}  // namespace

ProcessGroupPtr join_native_process_group(const GroupOptions& o, Deadline deadline) {
  if (!o.store) throw InvalidArgument::make("store", "nullptr", "the job's store to join through");
  StorePtr root = make_prefix_store(o.name, o.store);
  std::random_device rd;
  const std::string id = fmt::format("{:08x}{:08x}-{}", rd(), rd(), my_hint());
  // Append to the pending list (";"-separated) with compare_set.
  Bytes cur = root->compare_set("join/pending", {}, to_bytes(";" + id));
  while (to_string(cur).find(";" + id) == std::string::npos) {
    Bytes next = to_bytes(to_string(cur) + ";" + id);
    cur = root->compare_set("join/pending", cur, next);
  }
  SINEW_INFO(kFt, "joiner {} waiting to be admitted to group '{}'", id, o.name);
  wait_keys(*root, {"join/admitted/" + id}, deadline, nullptr);
  std::istringstream in(root->get_string("join/admitted/" + id));
  root->delete_key("join/admitted/" + id);  // read once, by this joiner only
  uint64_t epoch = 0;
  int rank = -1, size = -1;
  std::string hints;
  in >> epoch >> rank >> size >> hints;
  if (!in || rank < 0 || rank >= size)
    throw IoError(fmt::format("corrupt admission record for joiner {} in group '{}'", id, o.name));
  return std::make_shared<NativeProcessGroup>(root, rank, size, o.name, o.timeout, o.transport, epoch,
                                              split_ids(hints));
}

ProcessGroupPtr make_native_process_group(const GroupOptions& o) {
  return std::make_shared<NativeProcessGroup>(make_prefix_store(o.name, o.store), o.rank, o.size, o.name,
                                              o.timeout, o.transport, 0, std::vector<std::string>{}, o.lost_ranks);
}

}  // namespace sinew::dist
