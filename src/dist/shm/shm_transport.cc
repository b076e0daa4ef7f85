// The shared-memory point-to-point transport (Transport "shm"): one byte
// ring per ordered pair of ranks in the segments the step engine maps.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "dist/shm/shm_engine.h"
#include "dist/shm/shm_layout.h"

namespace sinew::dist {

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

std::unique_ptr<Transport> ShmEngine::make_p2p(ShmEngine* e) { return std::make_unique<P2P>(e); }

}  // namespace sinew::dist
