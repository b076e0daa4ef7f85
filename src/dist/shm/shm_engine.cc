#include "dist/shm/shm_engine.h"

#include "dist/shm/shm_layout.h"

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
}  // namespace

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
void note_wait_over() {
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
  p2p_ = make_p2p(this);
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
