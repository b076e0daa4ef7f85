#include "shm_engine.h"

#include "../fr/recorder.h"
#include "../process_identity.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <deque>
#include <fstream>
#include <new>
#include <random>
#include <thread>

#include "sinew/core/check.h"
#include "sinew/core/log.h"
#include "sinew/tensor/dtype.h"
#include "sinew/dist/reduce_op.h"

namespace sinew::dist {

namespace {
constexpr uint64_t kMagic = 0x73696e6577736d31ull;  // "sinewsm1"
constexpr size_t kAlign = 4096;
size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
}  // namespace

// One per step parity: the step number, the descriptor and a small payload
// share the first cache line.
struct alignas(128) Box {  // 128: the adjacent-line prefetcher pairs lines
  std::atomic<uint64_t> step;
  OpDesc desc;
  uint8_t data[ShmEngine::kInlineBytes];
};
static_assert(sizeof(Box) == 128, "fast box is two cache lines");
static_assert(offsetof(Box, data) + 16 <= 64, "step, descriptor and 16 payload bytes share a line");

struct ShmEngine::Header {
  uint64_t magic;
  int32_t pid;
  int32_t size;
  uint64_t slot_bytes;
  uint64_t ring_bytes;
  std::atomic<uint32_t> revoked;   // read-mostly: every wait glances at it
  std::atomic<uint32_t> departed;  // set once, when the rank destroys its group
  alignas(64) std::atomic<uint64_t> heartbeat;
  alignas(64) std::atomic<uint64_t> failed[ShmEngine::kMaxTrackedRanks / 64];
  Box box[2];
};

struct ShmEngine::Ring {
  alignas(64) std::atomic<uint64_t> head;  // bytes written by the producer
  alignas(64) std::atomic<uint64_t> tail;  // bytes consumed by the consumer
  alignas(64) uint8_t data[1];
};

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::kAllreduce: return "allreduce";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kReduce: return "reduce";
    case OpKind::kAllgather: return "allgather";
    case OpKind::kGather: return "gather";
    case OpKind::kScatter: return "scatter";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kAllToAll: return "all_to_all";
    case OpKind::kBarrier: return "barrier";
  }
  return "unknown";
}

OpDesc make_desc(uint64_t seq, OpKind kind, DType dtype, int64_t count, int root, ReduceKind redop) {
  OpDesc d;
  d.seq = seq;
  d.kind = static_cast<uint32_t>(kind);
  d.dtype = static_cast<uint32_t>(dtype);
  d.count = count;
  d.root = root;
  d.redop = static_cast<uint32_t>(redop);
  return d;
}

std::string describe(const OpDesc& d) {
  std::string s = fmt::format("{} seq {} dtype {} count {}", op_kind_name(static_cast<OpKind>(d.kind)), d.seq,
                              dtype_name(static_cast<DType>(d.dtype)), d.count);
  if (d.root >= 0) s += fmt::format(" root {}", d.root);
  auto k = static_cast<OpKind>(d.kind);
  if (k == OpKind::kAllreduce || k == OpKind::kReduce || k == OpKind::kReduceScatter)
    s += fmt::format(" op {}", reduce_kind_name(static_cast<ReduceKind>(d.redop)));
  return s;
}

// A wait that went through check_progress (whose clock reads the Flight
// Recorder stamps completions with) reads the clock once more as it ends:
// in its sleeping phase 64 polls last milliseconds.
static void note_wait_over() {
  fr::note_wait_clock(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

// Spin briefly, then yield (a no-op when nobody else wants the core, and the
// right thing when ranks outnumber cores), and only sleep after a long wait:
// sleeping early makes two waiting ranks wake each other at sleep
// granularity.
void Backoff::pause() {
  ++n_;
  if (n_ < 2000) {
    _mm_pause();
  } else if (n_ < 100000) {
    sched_yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// ---------------------------------------------------------------------------
// Point-to-point over the rings: ring(i, j) lives in rank i's segment and
// carries i -> j. Each message is a 16-byte frame {tag, bytes} + payload.
class ShmEngine::P2P final : public Transport {
 public:
  explicit P2P(ShmEngine* e) : e_(e), sends_(e->size_), recvs_(e->size_) {}

  std::string name() const override { return "shm"; }
  int rank() const override { return e_->rank_; }
  int size() const override { return e_->size_; }

  struct Req final : TransportRequest {
    bool is_send;
    int peer;
    uint64_t tag;
    uint8_t* data;
    size_t bytes;
    size_t done = 0;  // frame + payload bytes moved
    bool header_checked = false;
    bool finished = false;
    Status st;
    bool test() override { return finished; }
    Status status() const override { return st; }
  };

  RequestPtr isend(int peer, uint64_t tag, const void* data, size_t bytes) override {
    check_peer(peer);
    auto r = std::make_shared<Req>();
    r->is_send = true;
    r->peer = peer;
    r->tag = tag;
    r->data = const_cast<uint8_t*>(static_cast<const uint8_t*>(data));
    r->bytes = bytes;
    sends_[peer].push_back(r);
    return r;
  }

  RequestPtr irecv(int peer, uint64_t tag, void* data, size_t bytes) override {
    check_peer(peer);
    auto r = std::make_shared<Req>();
    r->is_send = false;
    r->peer = peer;
    r->tag = tag;
    r->data = static_cast<uint8_t*>(data);
    r->bytes = bytes;
    recvs_[peer].push_back(r);
    return r;
  }

  void wait(std::span<const RequestPtr> requests, Deadline deadline) override {
    Backoff backoff;
    bool checked = false;
    for (;;) {
      bool moved = progress();
      bool all = true;
      std::vector<int> awaited;
      for (const auto& r : requests) {
        auto* q = static_cast<Req*>(r.get());
        if (!q->finished) {
          all = false;
          awaited.push_back(q->peer);
        } else if (!q->st.is_ok()) {
          q->st.throw_if_error();
        }
      }
      if (all) {
        if (checked) note_wait_over();
        return;
      }
      if (moved) {
        backoff.reset();
        continue;
      }
      if ((backoff.rounds() & 63) == 0) {
        checked = true;
        try {
          e_->check_progress(deadline, awaited, "point-to-point", [&] {
            progress();
            std::vector<int> v;
            for (const auto& r : requests)
              if (auto* q = static_cast<Req*>(r.get()); !q->finished) v.push_back(q->peer);
            return v;
          });
        } catch (...) {
          fail_all(Status::from_current_exception());
          throw;
        }
      }
      backoff.pause();
    }
  }

  void abort() override {}  // the engine's abort flag is checked by wait()

 private:
  void check_peer(int peer) const {
    if (peer < 0 || peer >= e_->size_ || peer == e_->rank_)
      throw InvalidArgument::make("peer", std::to_string(peer),
                                  fmt::format("a rank in [0, {}) other than {}", e_->size_, e_->rank_));
  }

  void fail_all(const Status& s) {
    for (auto* qs : {&sends_, &recvs_})
      for (auto& q : *qs) {
        for (auto& r : q) {
          r->finished = true;
          r->st = s;
        }
        q.clear();
      }
  }

  // Moves as many bytes as the rings allow; true if anything moved.
  bool progress() {
    bool moved = false;
    const size_t cap = e_->ring_bytes_;
    for (int p = 0; p < e_->size_; ++p) {
      if (p == e_->rank_) continue;
      // Sends: ring(me, p).
      while (!sends_[p].empty()) {
        Req& r = *sends_[p].front();
        Ring* ring = e_->ring(e_->rank_, p);
        uint64_t head = ring->head.load(std::memory_order_relaxed);
        uint64_t tail = ring->tail.load(std::memory_order_acquire);
        size_t space = cap - static_cast<size_t>(head - tail);
        size_t total = 16 + r.bytes;
        size_t n = std::min(space, total - r.done);
        if (n == 0) break;
        uint64_t frame[2] = {r.tag, r.bytes};
        copy_into_ring(ring, head, cap, r, n, reinterpret_cast<const uint8_t*>(frame));
        ring->head.store(head + n, std::memory_order_release);
        r.done += n;
        moved = true;
        if (r.done == total) {
          r.finished = true;
          sends_[p].pop_front();
        } else {
          break;
        }
      }
      // Receives: ring(p, me).
      while (!recvs_[p].empty()) {
        Req& r = *recvs_[p].front();
        Ring* ring = e_->ring(p, e_->rank_);
        uint64_t tail = ring->tail.load(std::memory_order_relaxed);
        uint64_t head = ring->head.load(std::memory_order_acquire);
        size_t avail = static_cast<size_t>(head - tail);
        if (!r.header_checked) {
          if (avail < 16) break;
          uint64_t frame[2];
          copy_from_ring(ring, tail, cap, reinterpret_cast<uint8_t*>(frame), 16);
          if (frame[0] != r.tag || frame[1] != r.bytes) {
            r.st = Status(ErrorCode::kInvalidArgument,
                          fmt::format("recv from rank {} expected tag {} and {} bytes, but rank {} sent "
                                      "tag {} with {} bytes (sends and recvs between a pair must match "
                                      "in order, tag and size)",
                                      p, r.tag, r.bytes, p, frame[0], frame[1]));
            r.finished = true;
            recvs_[p].pop_front();
            moved = true;
            continue;
          }
          r.header_checked = true;
          r.done = 16;
          tail += 16;
          avail -= 16;
          ring->tail.store(tail, std::memory_order_release);
          moved = true;
        }
        size_t n = std::min(avail, 16 + r.bytes - r.done);
        if (n > 0) {
          copy_from_ring(ring, tail, cap, r.data + (r.done - 16), n);
          ring->tail.store(tail + n, std::memory_order_release);
          r.done += n;
          moved = true;
        }
        if (r.done == 16 + r.bytes) {
          r.finished = true;
          recvs_[p].pop_front();
        } else {
          break;
        }
      }
    }
    return moved;
  }

  static void ring_write(Ring* ring, uint64_t pos, size_t cap, const uint8_t* src, size_t n) {
    size_t off = static_cast<size_t>(pos % cap);
    size_t first = std::min(n, cap - off);
    std::memcpy(ring->data + off, src, first);
    if (n > first) std::memcpy(ring->data, src + first, n - first);
  }
  static void copy_from_ring(Ring* ring, uint64_t pos, size_t cap, uint8_t* dst, size_t n) {
    size_t off = static_cast<size_t>(pos % cap);
    size_t first = std::min(n, cap - off);
    std::memcpy(dst, ring->data + off, first);
    if (n > first) std::memcpy(dst + first, ring->data, n - first);
  }
  // Writes the next n bytes of (frame + payload) of r at ring position head.
  static void copy_into_ring(Ring* ring, uint64_t head, size_t cap, const Req& r, size_t n,
                             const uint8_t* frame) {
    size_t done = r.done;
    while (n > 0) {
      const uint8_t* src;
      size_t len;
      if (done < 16) {
        src = frame + done;
        len = std::min(n, 16 - done);
      } else {
        src = r.data + (done - 16);
        len = n;
      }
      ring_write(ring, head, cap, src, len);
      head += len;
      done += len;
      n -= len;
    }
  }

  ShmEngine* e_;
  std::vector<std::deque<std::shared_ptr<Req>>> sends_;
  std::vector<std::deque<std::shared_ptr<Req>>> recvs_;
};

// ---------------------------------------------------------------------------

void wait_keys_checked(Store& store, const std::vector<std::string>& keys, Deadline deadline,
                       const std::atomic<bool>* abort_flag, const std::function<void()>& check) {
  for (;;) {
    try {
      wait_keys(store, keys, check ? deadline.min(Deadline::after(Millis(50))) : deadline, abort_flag);
      return;
    } catch (const TimeoutError&) {
      if (deadline.expired() || !check) throw;
    }
    check();
  }
}

ShmEngine::ShmEngine(StorePtr store, int rank, int size, Options options, Deadline deadline,
                     const std::atomic<bool>* abort_flag)
    : rank_(rank),
      size_(size),
      slot_bytes_(round_up(options.slot_bytes, kAlign)),
      ring_bytes_(round_up(options.ring_bytes, kAlign)),
      abort_flag_(abort_flag) {
  std::string nonce;
  if (rank == 0) {
    std::random_device rd;
    nonce = fmt::format("{:08x}{:08x}-{}", rd(), rd(), ::getpid());
    store->set("shm/nonce", nonce);
  } else {
    wait_keys_checked(*store, {"shm/nonce"}, deadline, abort_flag, options.check_peers);
    nonce = store->get_string("shm/nonce");
  }
  const size_t ring_stride = round_up(sizeof(Ring) + ring_bytes_, 64);
  const size_t bytes = round_up(sizeof(Header), kAlign) + 2 * slot_bytes_ + size_ * ring_stride;
  auto name_of = [&](int r) { return fmt::format("/sinew-{}-r{}", nonce, r); };

  segments_.resize(size_);
  segments_[rank_] = ShmSegment::create(name_of(rank_), bytes);
  auto* h = new (segments_[rank_].data()) Header();
  h->magic = kMagic;
  h->pid = ::getpid();
  h->size = size_;
  h->slot_bytes = slot_bytes_;
  h->ring_bytes = ring_bytes_;
  for (auto& b : h->box) b.step.store(0);
  h->revoked.store(0);
  h->departed.store(0);
  h->heartbeat.store(0);
  for (auto& w : h->failed) w.store(0);
  for (int j = 0; j < size_; ++j) {
    auto* rg = new (static_cast<uint8_t*>(segments_[rank_].data()) + round_up(sizeof(Header), kAlign) +
                    2 * slot_bytes_ + j * ring_stride) Ring;
    rg->head.store(0);
    rg->tail.store(0);
  }
  // A peer that died during the rendezvous cannot unlink its segment: do it
  // for it (nothing is left in /dev/shm).
  auto rendezvous = [&](const std::vector<std::string>& keys) {
    try {
      wait_keys_checked(*store, keys, deadline, abort_flag, options.check_peers);
    } catch (const PeerLostError& e) {
      for (int r : e.ranks())
        if (r >= 0 && r < size_ && r != rank_) ::shm_unlink(name_of(r).c_str());
      throw;
    }
  };
  store->set(fmt::format("shm/created/{}", rank_), "1");
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(fmt::format("shm/created/{}", r));
  rendezvous(keys);
  pids_.resize(size_);
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) segments_[r] = ShmSegment::open(name_of(r));
    Header* hr = header(r);
    if (segments_[r].size() != bytes || hr->magic != kMagic || hr->size != size_ ||
        hr->slot_bytes != slot_bytes_ || hr->ring_bytes != ring_bytes_)
      throw InvalidArgument::make(
          "shared-memory settings", fmt::format("rank {}: slot {} ring {} size {}", r, hr->slot_bytes, hr->ring_bytes, hr->size),
          fmt::format("the same as rank {}: slot {} ring {} size {} (set SINEW_SHM_* alike on every rank)",
                      rank_, slot_bytes_, ring_bytes_, size_));
    pids_[r] = hr->pid;
  }
  store->set(fmt::format("shm/mapped/{}", rank_), "1");
  keys.clear();
  for (int r = 0; r < size_; ++r) keys.push_back(fmt::format("shm/mapped/{}", r));
  rendezvous(keys);
  // Everyone has mapped every segment: the names can go. Each rank unlinks
  // all of them, so one that dies before unlinking its own leaves nothing.
  segments_[rank_].unlink();
  for (int r = 0; r < size_; ++r)
    if (r != rank_) ::shm_unlink(name_of(r).c_str());
  p2p_ = std::make_unique<P2P>(this);
  SINEW_INFO(kShm, "shared-memory engine ready: {} ranks, {} KiB slots, {} KiB rings", size_, slot_bytes_ >> 10,
             ring_bytes_ >> 10);
}

ShmEngine::~ShmEngine() = default;

ShmEngine::Header* ShmEngine::header(int r) const {
  return static_cast<Header*>(segments_[r].data());
}

ShmEngine::Ring* ShmEngine::ring(int from, int to) const {
  const size_t ring_stride = round_up(sizeof(Ring) + ring_bytes_, 64);
  return reinterpret_cast<Ring*>(static_cast<uint8_t*>(segments_[from].data()) +
                                 round_up(sizeof(Header), kAlign) + 2 * slot_bytes_ + to * ring_stride);
}

uint8_t* ShmEngine::my_next_slot() {
  return static_cast<uint8_t*>(segments_[rank_].data()) + round_up(sizeof(Header), kAlign) +
         ((step_ + 1) & 1) * slot_bytes_;
}

OpDesc& ShmEngine::my_next_desc() { return header(rank_)->box[(step_ + 1) & 1].desc; }

uint8_t* ShmEngine::my_next_inline() { return header(rank_)->box[(step_ + 1) & 1].data; }

const uint8_t* ShmEngine::inline_data(int r) const { return header(r)->box[step_ & 1].data; }

const uint8_t* ShmEngine::slot(int r) const {
  return static_cast<const uint8_t*>(segments_[r].data()) + round_up(sizeof(Header), kAlign) +
         (step_ & 1) * slot_bytes_;
}

const OpDesc& ShmEngine::desc(int r) const { return header(r)->box[step_ & 1].desc; }

bool ShmEngine::peer_alive(int r) const { return process_alive(pids_[r]); }

void ShmEngine::revoke(const std::vector<int>& failed) {
  Header* h = header(rank_);
  for (int r : failed)
    if (r >= 0 && r < kMaxTrackedRanks) h->failed[r / 64].fetch_or(uint64_t{1} << (r % 64));
  h->revoked.store(1, std::memory_order_release);
}

std::vector<int> ShmEngine::revoked_failed_set() const {
  uint64_t bits[kMaxTrackedRanks / 64] = {};
  bool any = false;
  for (int r = 0; r < size_; ++r) {
    const Header* h = header(r);
    if (h->revoked.load(std::memory_order_acquire) == 0) continue;
    any = true;
    for (int w = 0; w < kMaxTrackedRanks / 64; ++w) bits[w] |= h->failed[w].load(std::memory_order_relaxed);
  }
  std::vector<int> out;
  if (!any) return out;
  for (int r = 0; r < std::min(size_, kMaxTrackedRanks); ++r)
    if (bits[r / 64] >> (r % 64) & 1) out.push_back(r);
  return out;
}

void ShmEngine::depart() { header(rank_)->departed.store(1, std::memory_order_release); }

bool ShmEngine::departed(int r) const { return header(r)->departed.load(std::memory_order_acquire) != 0; }

void ShmEngine::beat() { header(rank_)->heartbeat.fetch_add(1, std::memory_order_relaxed); }

uint64_t ShmEngine::heartbeat(int r) const { return header(r)->heartbeat.load(std::memory_order_relaxed); }

void ShmEngine::fail(Status s) {
  if (broken_.is_ok()) broken_ = std::move(s);
}

void ShmEngine::fail_if_revoked() {
  for (int r = 0; r < size_; ++r) {
    if (header(r)->revoked.load(std::memory_order_acquire) == 0) continue;
    auto failed = revoked_failed_set();
    fail(Status(ErrorCode::kPeerLost,
                fmt::format("process group revoked (first seen by rank {}): rank(s) {} failed; agree on the "
                            "failed set and reconfigure() to continue with the survivors",
                            r, failed),
                failed));
    broken_.throw_if_error();
  }
}

void ShmEngine::check_usable() {
  broken_.throw_if_error();
  fail_if_revoked();
}

void ShmEngine::check_progress(Deadline deadline, const std::vector<int>& awaited, const char* what,
                               const std::function<std::vector<int>()>& still_awaited) {
  // First, so that an op this check fails is stamped with it.
  const auto now = Clock::now();
  fr::note_wait_clock(std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count());
  if (abort_flag_ && abort_flag_->load(std::memory_order_relaxed)) {
    fail(Status(ErrorCode::kAborted, fmt::format("{} aborted (the group was aborted)", what)));
    broken_.throw_if_error();
  }
  fail_if_revoked();
  if (now >= next_liveness_check_) {
    next_liveness_check_ = now + Millis(10);
    fr::note_awaited(awaited);
    std::vector<int> dead, left;
    for (int r : awaited) {
      if (departed(r)) left.push_back(r);
      else if (!peer_alive(r)) (departed(r) ? left : dead).push_back(r);  // it may depart, then exit, in between
    }
    if ((!dead.empty() || !left.empty()) && still_awaited) {
      // `awaited` was read before the liveness check: a peer may have posted
      // what we wait for and then exited. A gone peer posts nothing more, so
      // one fresh look is conclusive.
      auto now_awaited = still_awaited();
      auto keep = [&](std::vector<int>& v) {
        std::erase_if(v, [&](int r) { return std::find(now_awaited.begin(), now_awaited.end(), r) == now_awaited.end(); });
      };
      keep(dead);
      keep(left);
    }
    if (!left.empty()) {  // a clean departure: our error, not a group failure
      fail(Status(ErrorCode::kPeerLost,
                  fmt::format("{}: rank(s) {} destroyed their process group while rank {} still waited on them "
                              "(every rank must issue the same collectives)",
                              what, left, rank_),
                  left));
      broken_.throw_if_error();
    }
    if (!dead.empty()) {
      revoke(dead);  // every survivor's wait fails now, not at its deadline
      fail(Status(ErrorCode::kPeerLost,
                  fmt::format("{}: rank(s) {} died (process gone) while rank {} waited on them", what, dead, rank_),
                  dead));
      broken_.throw_if_error();
    }
  }
  if (deadline.expired()) {
    fail(Status(ErrorCode::kTimeout,
                fmt::format("{} timed out on rank {} waiting for rank(s) {}; the group is unusable now "
                            "(abort it and create a new one)",
                            what, rank_, awaited),
                awaited));
    broken_.throw_if_error();
  }
}

void ShmEngine::step(Deadline deadline, const char* what) {
  broken_.throw_if_error();
  const uint64_t next = step_ + 1;
  const int parity = static_cast<int>(next & 1);
  // A peer is at most one step ahead, so its box of this parity holds either
  // the previous use (next - 2) or this step.
  header(rank_)->box[parity].step.store(next, std::memory_order_release);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    auto& peer_step = header(r)->box[parity].step;
    if (peer_step.load(std::memory_order_acquire) >= next) continue;
    Backoff backoff;
    while (peer_step.load(std::memory_order_acquire) < next) {
      if ((backoff.rounds() & 63) == 63) {
        auto lagging = [&] {
          std::vector<int> v;
          for (int q = r; q < size_; ++q)
            if (q != rank_ && header(q)->box[parity].step.load(std::memory_order_acquire) < next) v.push_back(q);
          return v;
        };
        check_progress(deadline, lagging(), what, lagging);
      }
      backoff.pause();
    }
    if (backoff.rounds() >= 63) note_wait_over();
  }
  step_ = next;
}

}  // namespace sinew::dist
