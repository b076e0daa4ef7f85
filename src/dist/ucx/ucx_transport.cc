// The UCX point-to-point transport (tag matching over one UCP worker).
//
// Wire format and tags: ucx_wire.h. Epochs (a reconfigured group's next
// transport keeps the worker and the connections both ends still hold):
// ucx_links.h; the new epoch takes the old epoch's unanswered messages off
// the worker's queue once it is wired up (drain_stale).
//
// Receives are not pre-posted: a receive probes for its (rank, sequence) tag
// and, once the message is there, learns its real length before accepting
// it. A message of the expected length lands directly in the user's buffer
// (header split off with an iov); any other length is drained into a scratch
// buffer so the receive can fail naming what was sent, and the sender still
// completes.
//
// Peer failure: endpoints use UCP_ERR_HANDLING_MODE_PEER and every pair
// exchanges a message while connecting, so each pair holds a live TCP
// connection. A peer process that dies (or destroys its transport) closes
// it, and its endpoint fails within milliseconds of our next progress; waits
// involving that peer then throw PeerLostError. A peer whose host vanishes
// without closing anything is caught by UCX's keepalive (UCX_KEEPALIVE_INTERVAL,
// 20 s by default; TCP keepalive UCX_TCP_KEEPIDLE/KEEPINTVL) or else by the
// caller's deadline.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <mutex>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <set>
#include <unordered_map>

#include "dist/ft_agreement.h"
#include "dist/ucx/ucx_context.h"
#include "dist/ucx/ucx_links.h"
#include "dist/ucx/ucx_wire.h"
#include "sinew/core/check.h"
#include "sinew/core/env.h"
#include "sinew/core/log.h"
#include "sinew/dist/transport.h"

namespace sinew::dist {
namespace {
const EnvParam<int64_t> kSpinUs{"SINEW_UCX_SPIN_US", 200,
                                "microseconds a UCX wait busy-polls before sleeping on the event fd"};
}  // namespace
namespace ucx {
namespace {

inline const EnvParam<bool> kKeepConnections{
    "SINEW_UCX_KEEP_CONNECTIONS", true,
    "a group's next epoch keeps the UCX worker and the connections between survivors (0: a fresh "
    "worker and connections every epoch)"};

// Upper bound on one blocking poll, so abort and deadlines are noticed.
constexpr int kPollSliceMs = 10;

}  // namespace

class UcxRequest final : public TransportRequest {
 public:
  enum class Kind { kSend, kRecv };

  UcxRequest(UcxTransport* owner, Kind kind, int peer, uint64_t tag, void* data, size_t bytes)
      : owner(owner), kind(kind), peer(peer), tag(tag), data(data), bytes(bytes) {}

  bool test() override { return done_.load(std::memory_order_acquire); }
  Status status() const override {
    return done_.load(std::memory_order_acquire) ? status_ : Status::ok();
  }

  // Called on the transport's thread only; the first outcome wins.
  void finish(Status s) {
    if (done_.load(std::memory_order_relaxed)) return;
    status_ = std::move(s);
    done_.store(true, std::memory_order_release);
  }

  std::string describe() const {
    return fmt::format("{} rank {} (tag {}, {} bytes)",
                       kind == Kind::kSend ? "send to" : "recv from", peer, tag, bytes);
  }

  UcxTransport* const owner;
  const Kind kind;
  const int peer;
  const uint64_t tag;
  void* const data;
  const size_t bytes;
  ucp_tag_t wire = 0;
  WireHeader header{};
  ucp_dt_iov_t iov[2]{};
  std::vector<uint8_t> scratch;  // a receive whose message has the wrong length
  bool length_mismatch = false;

 private:
  std::atomic<bool> done_{false};
  Status status_;
};

class UcxTransport final : public Transport {
 public:
  UcxTransport(StorePtr store, int rank, int size, Deadline deadline, const std::function<void()>& check_peers,
               std::shared_ptr<Links> links, uint64_t epoch)
      : rank_(rank), size_(size), epoch_(epoch), send_seq_(size, 0), recv_seq_(size, 0), lost_(size, UCS_OK) {
    if (!kKeepConnections.get()) links.reset();
    const bool inherited = links != nullptr;
    links_ = inherited ? std::move(links) : std::make_shared<Links>(static_cast<size_t>(size));
    worker_ = links_->worker.get();
    event_fd_ = links_->event_fd;
    try {
      connect(*store, deadline, check_peers);
      if (inherited) drain_stale(deadline);
    } catch (...) {
      release(/*force=*/true, Status(ErrorCode::kAborted, "UCX transport setup failed"));
      throw;
    }
  }

  ~UcxTransport() override {
    bool force = aborted_ || std::any_of(lost_.begin(), lost_.end(),
                                         [](ucs_status_t s) { return s != UCS_OK; });
    release(force,
            Status(ErrorCode::kAborted, "UCX transport destroyed before the request completed"));
  }

  std::string name() const override { return "ucx"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  RequestPtr isend(int peer, uint64_t tag, const void* data, size_t bytes) override {
    check_args(peer, data, bytes);
    auto r = std::make_shared<UcxRequest>(this, UcxRequest::Kind::kSend, peer, tag,
                                          const_cast<void*>(data), bytes);
    r->wire = wire_tag(epoch_, rank_, send_seq_[peer]++);
    if (abort_requested_.load(std::memory_order_acquire)) abort_all();
    if (aborted_) {
      r->finish(aborted_status());
      return r;
    }
    if (lost_[peer] != UCS_OK) {
      r->finish(peer_lost(peer, lost_[peer]));
      return r;
    }
    r->header = {tag, bytes};
    r->iov[0] = {&r->header, sizeof(WireHeader)};
    r->iov[1] = {r->data, bytes};
    ucp_request_param_t param = request_param(r.get(), ucp_dt_make_iov());
    param.cb.send = &on_send_done;
    ucs_status_ptr_t sp = ucp_tag_send_nbx(eps_[peer]->ep, r->iov, bytes ? 2 : 1, r->wire, &param);
    track(r, sp);
    return r;
  }

  RequestPtr irecv(int peer, uint64_t tag, void* data, size_t bytes) override {
    check_args(peer, data, bytes);
    auto r = std::make_shared<UcxRequest>(this, UcxRequest::Kind::kRecv, peer, tag, data, bytes);
    r->wire = wire_tag(epoch_, peer, recv_seq_[peer]++);
    if (abort_requested_.load(std::memory_order_acquire)) abort_all();
    if (aborted_) {
      r->finish(aborted_status());
      return r;
    }
    probing_.push_back(r);
    return r;
  }

  void wait(std::span<const RequestPtr> requests, Deadline deadline) override {
    std::vector<UcxRequest*> reqs;
    reqs.reserve(requests.size());
    for (const auto& rp : requests) {
      auto* r = dynamic_cast<UcxRequest*>(rp.get());
      SINEW_ARG_CHECK(r != nullptr && r->owner == this, "request",
                      rp ? "a request of another transport" : "nullptr",
                      "a request from this UCX transport's isend/irecv");
      reqs.push_back(r);
    }
    const auto start = Clock::now();
    const auto spin_until = start + std::chrono::microseconds(kSpinUs.get());
    while (true) {
      progress();
      bool all_done = true;
      for (auto* r : reqs) {
        if (!r->test()) {
          all_done = false;
        } else if (!r->status().is_ok()) {
          r->status().throw_if_error();
        }
      }
      if (all_done) return;
      if (deadline.expired()) throw_timeout(reqs, start);
      // Busy-poll first: a reply usually arrives within a loopback/NIC round
      // trip, far below the cost of arming the event fd and sleeping.
      if (Clock::now() < spin_until) continue;  // progress() also sees abort()
      idle_wait(deadline);
    }
  }

  void revoke(const Status& why) override {
    {
      std::lock_guard<std::mutex> g(revoke_mu_);
      if (revoke_status_.is_ok()) revoke_status_ = why;
    }
    abort();
  }

  void abort() override {
    abort_requested_.store(true, std::memory_order_release);
    std::lock_guard<std::mutex> g(links_mu_);
    if (worker_) ucp_worker_signal(worker_);  // thread-safe: wakes a waiter blocked in poll()
  }

  TransportLinksPtr hand_over() override {
    std::lock_guard<std::mutex> g(links_mu_);
    if (!links_) return nullptr;
    {
      std::lock_guard<std::mutex> r(revoke_mu_);
      if (revoke_status_.is_ok())
        revoke_status_ = Status(ErrorCode::kAborted,
                                fmt::format("UCX transport of rank {} handed its connections to the group's next "
                                            "epoch; use the group reconfigure() returned",
                                            rank_));
    }
    if (!aborted_) {
      aborted_ = true;
      quiesce(aborted_status());
    }
    for (Conn* c : eps_) {
      if (!c) continue;
      c->owner = nullptr;
      c->peer = -1;
    }
    eps_.assign(size_, nullptr);
    worker_ = nullptr;
    SINEW_DEBUG(kUcx, "rank {}: handing {} UCX endpoint(s) to the next epoch", rank_, links_->healthy().size());
    return std::move(links_);
  }

  std::vector<int> reused_peers() const override { return reused_; }

 private:
  static ucp_request_param_t request_param(UcxRequest* r, ucp_datatype_t datatype) {
    ucp_request_param_t p{};
    p.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
    p.datatype = datatype;
    p.user_data = r;
    return p;
  }

  void check_args(int peer, const void* data, size_t bytes) const {
    SINEW_ARG_CHECK(peer >= 0 && peer < size_, "peer", peer,
                    fmt::format("a rank in [0, {})", size_));
    SINEW_ARG_CHECK(data != nullptr || bytes == 0, "data", "nullptr",
                    fmt::format("a buffer of {} bytes", bytes));
  }

  // --- connection setup ---------------------------------------------------

  void connect(Store& store, Deadline deadline, const std::function<void()>& check_peers) {
    store.set(addr_key(rank_), encode_card({links_->address, links_->healthy()}));
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.push_back(addr_key(r));
    try {
      // check_peers between slices: a rank that died before publishing its
      // address ends the wait at once. No endpoint exists yet, so leaving
      // here disturbs no peer's wire-up.
      wait_keys(store, keys, deadline.is_never() ? Deadline::after(store.timeout()) : deadline, nullptr, check_peers);
    } catch (const TimeoutError&) {
      std::vector<int> missing;
      for (int r = 0; r < size_; ++r)
        if (!store.check({addr_key(r)})) missing.push_back(r);
      throw TimeoutError(fmt::format(
          "UCX rendezvous timed out: ranks {} did not publish their worker address (store key "
          "ucx/addr/<rank>) before the deadline; are they running?",
          missing));
    }
    std::vector<Bytes> records = store.multi_get(keys);
    std::vector<Card> cards;
    for (int p = 0; p < size_; ++p) cards.push_back(decode_card(records[p], p));

    // Both ends decide from the same records: a pair keeps its endpoints
    // when each end announced holding a healthy one to the other.
    const uint64_t me = address_hash(links_->address);
    eps_.assign(size_, nullptr);
    for (int p = 0; p < size_; ++p) {
      auto kept = std::find_if(links_->conns.begin(), links_->conns.end(), [&](const Conn& c) {
        return c.ep && c.owner == nullptr && c.status == UCS_OK && c.remote == cards[p].address;
      });
      if (kept != links_->conns.end() && cards[p].holds.contains(me)) {
        stale_from_.emplace_back(kept->epoch, kept->peer);
        kept->owner = this;
        kept->peer = p;
        kept->epoch = epoch_;
        eps_[p] = &*kept;
        reused_.push_back(p);
        continue;
      }
      Conn& c = links_->conns.emplace_back();
      c.remote = cards[p].address;
      c.owner = this;
      c.peer = p;
      c.epoch = epoch_;
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.address = reinterpret_cast<const ucp_address_t*>(c.remote.data());
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = &on_ep_error;
      ep.err_handler.arg = &c;
      ucs_status_t st = ucp_ep_create(worker_, &ep, &c.ep);
      if (st != UCS_OK) {
        links_->conns.pop_back();
        // A peer that died after publishing its address is unreachable.
        if (is_connection_error(st)) give_up(store, {p}, peer_lost(p, st).message());
        throw IoError(
            fmt::format("UCX cannot create an endpoint to rank {}: {}", p, ucs_status_string(st)));
      }
      eps_[p] = &c;
    }
    // Endpoints of the previous epoch that this one does not keep; their
    // other ends did not keep them either.
    links_->close_if([](const Conn& c) { return c.owner == nullptr; }, deadline);

    // Wire up every pair now, so a peer that dies later is noticed through
    // its broken connection rather than only when a message is due.
    std::vector<RequestPtr> hello;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      hello.push_back(isend(p, kHelloTag, nullptr, 0));
      hello.push_back(irecv(p, kHelloTag, nullptr, 0));
    }
    try {
      wait(hello, deadline);
    } catch (const TimeoutError& e) {
      throw TimeoutError(fmt::format("UCX connect: {}", e.what()));
    } catch (const PeerLostError& e) {
      give_up(store, e.ranks(), e.what());
    }
    SINEW_INFO(kUcx, "rank {}/{} connected over UCX (TLS '{}'; {} of {} connections kept from the last epoch)",
               rank_, size_, effective_settings().tls, reused_.size(), size_);
    if (log_enabled(LogLevel::kDebug, LogSubsys::kUcx)) log_endpoints();
  }

  // Ends a setup that lost `seen` (the ranks whose connections failed).
  // A peer whose own setup failed closes its endpoints, which reads here
  // exactly like its death: blaming it would make the agreement drop a live
  // rank. So each rank that gives up records whom it lost before it closes
  // anything; a peer with such a record is alive, and the ranks it names
  // are the lost ones.
  [[noreturn]] void give_up(Store& store, const std::vector<int>& seen, const std::string& why) {
    std::set<int> lost;
    for (int r : seen) {
      const std::string key = failed_key(r);
      if (r != rank_ && store.check({key})) {
        for (int x : decode_rank_set(store.get_string(key)))
          if (x != rank_) lost.insert(x);
      } else {
        lost.insert(r);
      }
    }
    if (lost.empty()) lost.insert(seen.begin(), seen.end());
    store.set(failed_key(rank_), encode_rank_set(lost));
    const std::vector<int> ranks(lost.begin(), lost.end());
    throw PeerLostError(fmt::format("UCX connect: rank(s) {} lost while connecting ({})", ranks, why), ranks);
  }

  static std::string addr_key(int r) { return fmt::format("ucx/addr/{}", r); }
  static std::string failed_key(int r) { return fmt::format("ucx/setup_failed/{}", r); }

  void log_endpoints() {
    for (int p = 0; p < size_; ++p) {
      char* text = nullptr;
      size_t len = 0;
      FILE* f = open_memstream(&text, &len);
      if (!f) return;
      ucp_ep_print_info(eps_[p]->ep, f);
      std::fclose(f);
      SINEW_DEBUG(kUcx, "endpoint to rank {}:\n{}", p, std::string(text, len));
      std::free(text);
    }
  }

  // --- progress -------------------------------------------------------------

  void progress() {
    if (abort_requested_.load(std::memory_order_acquire)) abort_all();
    if (aborted_) return;
    while (ucp_worker_progress(worker_) != 0) {
    }
    service_probes();
  }

  void service_probes() {
    for (auto it = probing_.begin(); it != probing_.end();) {
      UcxRequest& r = **it;
      ucp_tag_recv_info_t info{};
      ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, r.wire, kFullMask, 1, &info);
      if (msg != nullptr) {
        std::shared_ptr<UcxRequest> req = std::move(*it);
        it = probing_.erase(it);
        start_recv(req, msg, info.length);
      } else if (lost_[r.peer] != UCS_OK) {
        r.finish(peer_lost(r.peer, lost_[r.peer]));
        it = probing_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void start_recv(const std::shared_ptr<UcxRequest>& r, ucp_tag_message_h msg, size_t length) {
    void* buffer;
    size_t count;
    ucp_datatype_t dt;
    if (length == sizeof(WireHeader) + r->bytes) {
      r->iov[0] = {&r->header, sizeof(WireHeader)};
      r->iov[1] = {r->data, r->bytes};
      buffer = r->iov;
      count = r->bytes ? 2 : 1;
      dt = ucp_dt_make_iov();
    } else {
      r->length_mismatch = true;
      r->scratch.resize(length);
      buffer = r->scratch.data();
      count = length;
      dt = ucp_dt_make_contig(1);
    }
    ucp_request_param_t param = request_param(r.get(), dt);
    param.cb.recv = &on_recv_done;
    track(r, ucp_tag_msg_recv_nbx(worker_, buffer, count, msg, &param));
  }

  // Keeps `r` alive while UCX owns an operation on it, or completes it now.
  void track(const std::shared_ptr<UcxRequest>& r, ucs_status_ptr_t sp) {
    if (UCS_PTR_IS_PTR(sp)) {
      inflight_.emplace(r.get(), InFlight{r, sp});
    } else {
      complete(*r, UCS_PTR_STATUS(sp));
    }
  }

  static void on_send_done(void* request, ucs_status_t status, void* user_data) {
    auto* r = static_cast<UcxRequest*>(user_data);
    r->owner->complete_from_callback(r, request, status);
  }

  static void on_recv_done(void* request, ucs_status_t status, const ucp_tag_recv_info_t*,
                           void* user_data) {
    auto* r = static_cast<UcxRequest*>(user_data);
    r->owner->complete_from_callback(r, request, status);
  }

  void complete_from_callback(UcxRequest* r, void* ucx_request, ucs_status_t status) {
    ucp_request_free(ucx_request);
    complete(*r, status);
    inflight_.erase(r);  // may drop the last reference to *r
  }

  void complete(UcxRequest& r, ucs_status_t status) {
    if (status == UCS_ERR_CANCELED) {
      r.finish(aborted_                  ? aborted_status()
               : lost_[r.peer] != UCS_OK ? peer_lost(r.peer, lost_[r.peer])
                                         : closed_status());
    } else if (status != UCS_OK) {
      if (lost_[r.peer] != UCS_OK || is_connection_error(status)) {
        r.finish(peer_lost(r.peer, lost_[r.peer] != UCS_OK ? lost_[r.peer] : status));
      } else {
        r.finish(Status(ErrorCode::kIoError,
                        fmt::format("UCX {} failed: {}", r.describe(), ucs_status_string(status))));
      }
    } else if (r.kind == UcxRequest::Kind::kRecv) {
      r.finish(check_match(r));
    } else {
      r.finish(Status::ok());
    }
  }

  static Status check_match(UcxRequest& r) {
    size_t got_bytes = r.bytes;
    if (r.length_mismatch) {
      if (r.scratch.size() < sizeof(WireHeader))
        return Status(ErrorCode::kInternal,
                      fmt::format("UCX {}: got a {}-byte message, shorter than sinew's header",
                                  r.describe(), r.scratch.size()));
      std::memcpy(&r.header, r.scratch.data(), sizeof(WireHeader));
      got_bytes = r.scratch.size() - sizeof(WireHeader);
      r.scratch = {};
    }
    if (!r.length_mismatch && r.header.tag == r.tag) return Status::ok();
    InvalidArgument e = InvalidArgument::make(
        fmt::format("recv from rank {}", r.peer),
        fmt::format("tag {} with {} bytes (the next message rank {} sent)", r.header.tag, got_bytes,
                    r.peer),
        fmt::format("tag {} with {} bytes: sends and receives between a pair must match in order",
                    r.tag, r.bytes));
    return Status(ErrorCode::kInvalidArgument, e.what());
  }

  static void on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* c = static_cast<Conn*>(arg);
    c->status = status;
    if (!c->owner) return;  // an endpoint between epochs: its next owner sees the status
    c->owner->lost_[c->peer] = status;
    // Also how a peer's normal exit looks; requests that needed it report it.
    SINEW_INFO(kUcx, "rank {}: UCX connection to rank {} ended: {}", c->owner->rank_, c->peer,
               ucs_status_string(status));
  }

  void idle_wait(Deadline deadline) {
    ucs_status_t st = ucp_worker_arm(worker_);
    if (st == UCS_ERR_BUSY) return;  // events arrived since the last progress
    check_ucs(st, "ucp_worker_arm");
    int ms = kPollSliceMs;
    int left = deadline.remaining_ms_for_poll();
    if (left >= 0) ms = std::clamp(left, 1, kPollSliceMs);
    pollfd pfd{event_fd_, POLLIN, 0};
    ::poll(&pfd, 1, ms);
  }

  [[noreturn]] void throw_timeout(const std::vector<UcxRequest*>& reqs, Clock::time_point start) {
    constexpr size_t kListed = 8;
    std::vector<int> peers;
    std::vector<std::string> pending;
    size_t npending = 0;
    for (auto* r : reqs) {
      if (r->test()) continue;
      if (std::find(peers.begin(), peers.end(), r->peer) == peers.end()) peers.push_back(r->peer);
      if (npending++ < kListed) pending.push_back(r->describe());
    }
    std::sort(peers.begin(), peers.end());
    auto waited = std::chrono::duration_cast<Millis>(Clock::now() - start).count();
    throw TimeoutError(fmt::format(
        "UCX wait on rank {} timed out after {} ms, still awaiting ranks {}: {}{}", rank_, waited,
        peers, fmt::join(pending, "; "), npending > kListed ? "; ..." : ""), peers);
  }

  // --- abort and teardown ---------------------------------------------------

  Status aborted_status() const {
    {
      std::lock_guard<std::mutex> g(revoke_mu_);
      if (!revoke_status_.is_ok()) return revoke_status_;
    }
    return Status(ErrorCode::kAborted, fmt::format("UCX transport of rank {} was aborted", rank_));
  }
  Status closed_status() const {
    return Status(ErrorCode::kAborted, fmt::format("UCX transport of rank {} was closed", rank_));
  }

  // Runs on the transport's thread once abort() was requested.
  void abort_all() {
    if (aborted_) return;
    aborted_ = true;
    SINEW_INFO(kUcx, "rank {}: aborting UCX transport", rank_);
    quiesce(aborted_status());
  }

  // Ends every UCX operation, so no user buffer is touched after its
  // request failed with `why`, and closes the endpoints that cannot carry
  // on: to lost peers, and to peers with a send in flight (UCX owns its
  // buffer until the receiver takes it or the endpoint closes). The others
  // stay open for hand_over(); peers waiting on this rank learn of the
  // revoke from the group, not from a broken connection that would make a
  // live rank look dead.
  void quiesce(const Status& why) {
    if (!worker_) return;
    for (auto& r : probing_) r->finish(why);
    probing_.clear();
    std::set<int> broken;
    for (int p = 0; p < size_; ++p)
      if (lost_[p] != UCS_OK) broken.insert(p);
    std::vector<void*> ops;
    for (auto& [r, op] : inflight_) {
      if (r->kind == UcxRequest::Kind::kRecv) ops.push_back(op.ucx);
      else broken.insert(r->peer);
    }
    for (void* ucx : ops) ucp_request_cancel(worker_, ucx);
    const Deadline until = Deadline::after(Millis(kCloseTimeoutMs.get()));
    links_->close_if([&](const Conn& c) { return c.owner == this && broken.contains(c.peer); }, until);
    for (int p : broken) eps_[p] = nullptr;
    std::vector<void*> none;
    drain(none, until);
    for (auto& [r, op] : inflight_) r->finish(why);
  }

  // Takes the old epoch's unanswered messages from the peers whose
  // connections were kept off the worker's queue: they never match this
  // epoch's tags, and would stay there. After the wire-up, because a kept
  // connection delivers them before the peer's hello. A message from a peer
  // whose connection was not kept (it died, or its endpoint broke) is left
  // there, unmatched (the epoch bits keep it from every receive; it costs
  // its bytes until the worker goes): receiving one that came by rendezvous
  // makes UCX connect back to the sender's worker, and when that process is
  // gone, UCX 1.13's TCP transport can fail an assertion on the refused
  // connect (tcp_ep.c:478, ucp_request.c:684) instead of the request.
  void drain_stale(Deadline until) {
    std::vector<void*> reqs;
    std::list<std::vector<uint8_t>> buffers;
    const uint64_t current = epoch_ % kEpochs;
    for (const auto& [old_epoch, old_rank] : stale_from_) {
      const uint64_t e = old_epoch % kEpochs;
      if (e == current || old_rank < 0) continue;
      const ucp_tag_t source = source_tag(e, old_rank);
      ucp_tag_recv_info_t info{};
      while (ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, source, kSourceMask, 1, &info)) {
        auto& b = buffers.emplace_back(info.length);
        ucp_request_param_t p{};
        p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
        p.datatype = ucp_dt_make_contig(1);
        ucs_status_ptr_t sp = ucp_tag_msg_recv_nbx(worker_, b.data(), b.size(), msg, &p);
        if (UCS_PTR_IS_PTR(sp)) reqs.push_back(sp);
      }
    }
    if (buffers.empty()) return;
    SINEW_DEBUG(kUcx, "rank {}: dropping {} message(s) of earlier epochs", rank_, buffers.size());
    // A buffer UCX may still write into is kept until the worker goes.
    if (!drain(reqs, until)) links_->orphans.splice(links_->orphans.end(), buffers);
  }

  // Fails what is pending with `why`, closes this transport's endpoints
  // (flushing them unless `force`) with a bounded wait, and completes every
  // UCX operation.
  void shut_down(bool force, const Status& why) {
    if (!worker_) return;
    for (auto& r : probing_) r->finish(why);
    probing_.clear();
    std::vector<std::pair<UcxRequest*, void*>> ops;
    for (auto& [r, op] : inflight_) ops.emplace_back(r, op.ucx);
    for (auto& [r, ucx] : ops)
      if (r->kind == UcxRequest::Kind::kRecv) ucp_request_cancel(worker_, ucx);
    // A send still in flight waits for its receiver; only a forced close ends it.
    close_endpoints(force || !inflight_.empty());
    for (auto& [r, op] : inflight_) r->finish(why);
  }

  // Ends everything, then destroys the worker while this object (which UCX
  // callbacks reach through their requests) is still whole.
  void release(bool force, const Status& why) {
    shut_down(force, why);
    std::lock_guard<std::mutex> g(links_mu_);
    worker_ = nullptr;
    links_.reset();
  }

  // Unless `force`, a worker flush first puts what was sent on the wire.
  void close_endpoints(bool force) {
    Deadline until = Deadline::after(Millis(kCloseTimeoutMs.get()));
    if (!force) {
      ucp_request_param_t p{};
      std::vector<void*> flushing;
      ucs_status_ptr_t sp = ucp_worker_flush_nbx(worker_, &p);
      if (UCS_PTR_IS_PTR(sp)) flushing.push_back(sp);
      if (!drain(flushing, until))
        SINEW_WARN(kUcx, "rank {}: UCX sends did not flush within {} ms; closing anyway", rank_,
                   kCloseTimeoutMs.get());
      // Take in what peers sent: a TCP socket closed with unread bytes
      // resets the connection, and the reset drops what the kernel still
      // holds of our sends, which the flush counted as gone.
      while (ucp_worker_progress(worker_) != 0) {
      }
    }
    links_->close_if([](const Conn&) { return true; }, Deadline::after(Millis(kCloseTimeoutMs.get())));
    eps_.assign(size_, nullptr);
    std::vector<void*> none;
    if (!drain(none, Deadline::after(Millis(kCloseTimeoutMs.get()))))
      SINEW_WARN(kUcx, "rank {}: UCX endpoints did not close within {} ms", rank_,
                 kCloseTimeoutMs.get());
  }

  // Progresses until `reqs` (UCX requests without callbacks) and every
  // tracked operation complete, or `until`; frees `reqs` either way.
  bool drain(std::vector<void*>& reqs, Deadline until) {
    while (!reqs.empty() || !inflight_.empty()) {
      while (ucp_worker_progress(worker_) != 0) {
      }
      std::erase_if(reqs, [](void* req) {
        if (ucp_request_check_status(req) == UCS_INPROGRESS) return false;
        ucp_request_free(req);
        return true;
      });
      if (reqs.empty() && inflight_.empty()) break;
      if (until.expired()) break;
      idle_wait(until);
    }
    bool done = reqs.empty() && inflight_.empty();
    for (void* req : reqs) ucp_request_free(req);  // UCX releases it once it completes
    reqs.clear();
    return done;
  }

  struct InFlight {
    std::shared_ptr<UcxRequest> request;
    void* ucx;
  };

  const int rank_;
  const int size_;
  const uint64_t epoch_;
  std::shared_ptr<Links> links_;  // null once handed over
  mutable std::mutex links_mu_;    // abort() and hand_over() against each other
  ucp_worker_h worker_ = nullptr;  // links_'s worker, while this transport holds it
  int event_fd_ = -1;
  std::vector<Conn*> eps_;  // per peer; null once closed
  std::vector<int> reused_;
  // The last epoch and rank of each kept connection's peer: whose old
  // messages drain_stale takes off the queue.
  std::vector<std::pair<uint64_t, int>> stale_from_;
  std::vector<uint64_t> send_seq_;
  std::vector<uint64_t> recv_seq_;
  std::vector<ucs_status_t> lost_;                  // UCS_OK while the peer's endpoint is healthy
  std::list<std::shared_ptr<UcxRequest>> probing_;  // receives waiting for their message
  std::unordered_map<UcxRequest*, InFlight> inflight_;
  std::atomic<bool> abort_requested_{false};
  mutable std::mutex revoke_mu_;
  Status revoke_status_;  // set by revoke(): what requests fail with instead of Aborted
  bool aborted_ = false;
};

}  // namespace ucx

TransportPtr make_ucx_transport(StorePtr store, int rank, int size, Deadline deadline,
                                std::function<void()> check_peers, TransportLinksPtr links, uint64_t epoch) {
  if (!store) throw InvalidArgument::make("store", "nullptr", "a store to rendezvous through");
  SINEW_ARG_CHECK(size >= 1 && size <= ucx::kMaxRanks, "size", size,
                  fmt::format("1 to {} ranks", ucx::kMaxRanks));
  SINEW_ARG_CHECK(rank >= 0 && rank < size, "rank", rank, fmt::format("a rank in [0, {})", size));
  auto own = std::dynamic_pointer_cast<ucx::Links>(links);
  if (links && !own)
    throw InvalidArgument::make("links", "another transport's connections", "links from a UCX transport's hand_over()");
  return std::make_unique<ucx::UcxTransport>(std::move(store), rank, size, deadline, check_peers, std::move(own),
                                             epoch);
}

bool ucx_transport_available() {
  static const bool available = [] {
    try {
      ucx::make_context(1);
      return true;
    } catch (const Error& e) {
      SINEW_INFO(kUcx, "UCX transport unavailable: {}", e.what());
      return false;
    }
  }();
  return available;
}

}  // namespace sinew::dist
