// The shared-memory engine for groups whose ranks share one host.
//
// Each rank owns one segment holding (a) a step counter and an operation
// descriptor, (b) two data slots used alternately by consecutive steps and
// (c) one byte ring per peer for point-to-point messages (the "shm"
// Transport, shm_transport.cc; the layout is in shm_layout.h).
//
// A collective is a sequence of steps. In a step every rank fills its slot,
// publishes the step number, waits until every peer has published it, then
// reads what it needs straight from the peers' slots. Two slots suffice: a
// rank only publishes step s+1 after it finished reading step s, so when all
// peers have published s+1 nobody reads the slot of step s-1 any more.
// Every step carries the descriptor (op, dtype, count, root, sequence), so
// argument mismatches are seen by every rank in the first step at no cost.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sinew/core/deadline.h"
#include "sinew/core/error.h"
#include "sinew/dist/reduce_op.h"
#include "sinew/dist/store.h"
#include "sinew/dist/transport.h"
#include "dist/shm/shm_segment.h"

namespace sinew::dist {

struct OpDesc {
  uint64_t seq = 0;
  uint32_t kind = 0;   // OpKind
  uint32_t dtype = 0;  // DType
  int64_t count = 0;
  int32_t root = -1;
  uint32_t redop = 0;  // ReduceKind
  int64_t more = 0;    // bytes this rank still has to move (all_to_all_v)
};

enum class OpKind : uint32_t {
  kAllreduce = 1,
  kBroadcast,
  kReduce,
  kAllgather,
  kGather,
  kScatter,
  kReduceScatter,
  kAllToAll,
  kBarrier,
};
const char* op_kind_name(OpKind k);
// The descriptor of one collective, as both engines exchange it.
OpDesc make_desc(uint64_t seq, OpKind kind, DType dtype, int64_t count, int root, ReduceKind redop);
std::string describe(const OpDesc& d);

// Spins, then yields, then sleeps; checks the deadline, the abort flag and
// peer liveness between rounds. Shared by the step sync and p2p progress.
class Backoff {
 public:
  void pause();
  void reset() { n_ = 0; }
  uint64_t rounds() const { return n_; }

 private:
  uint64_t n_ = 0;
};

// wait_keys() that calls `check` between slices of at most 50 ms.
void wait_keys_checked(Store& store, const std::vector<std::string>& keys, Deadline deadline,
                       const std::atomic<bool>* abort_flag, const std::function<void()>& check);

class ShmEngine {
 public:
  struct Options {
    size_t slot_bytes = 1 << 20;
    size_t ring_bytes = 256 << 10;
    // Called while the rendezvous waits; throws (PeerLostError) when a peer
    // is known to have died, so a death during setup does not wait out the deadline.
    std::function<void()> check_peers;
  };
  // Rendezvous through `store`; blocks until every rank has mapped every
  // segment, then unlinks the names (nothing is left in /dev/shm after a
  // crash). `abort_flag` is the group's; setting it fails waits promptly.
  ShmEngine(StorePtr store, int rank, int size, Options options, Deadline deadline,
            const std::atomic<bool>* abort_flag);
  ~ShmEngine();

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t slot_bytes() const { return slot_bytes_; }

  // Slot and descriptor this rank fills for the next step.
  uint8_t* my_next_slot();
  OpDesc& my_next_desc();
  // Small payloads travel in the same cache lines as the step counter and
  // descriptor ("fast box"): one cache-line transfer per peer and step.
  static constexpr size_t kInlineBytes = 80;
  uint8_t* my_next_inline();
  const uint8_t* inline_data(int r) const;
  // Publishes the next step and waits for every peer to publish it. Throws
  // TimeoutError / PeerLostError / AbortedError; after that the engine is
  // broken and every later call fails with the same error.
  void step(Deadline deadline, const char* what);
  // The current (last synced) step's slot and descriptor of rank r.
  const uint8_t* slot(int r) const;
  const OpDesc& desc(int r) const;

  // Point-to-point over the per-pair rings.
  Transport& p2p() { return *p2p_; }

  // --- failure detection and revoke (thread-safe: atomics in shared memory) -
  // Marks the group revoked with `failed` as the failed ranks; every rank's
  // next wait (and next op) fails with PeerLostError naming them.
  void revoke(const std::vector<int>& failed);
  // The union of the failed sets of every rank that revoked (empty if none).
  std::vector<int> revoked_failed_set() const;
  bool peer_alive(int r) const;
  // Marks this rank as having left the group cleanly (its group object is
  // being destroyed): peers stop watching it instead of declaring it failed.
  void depart();
  bool departed(int r) const;
  // The watchdog's heartbeat: a stopped (SIGSTOP) or hung process stops beating.
  void beat();
  uint64_t heartbeat(int r) const;
  static constexpr int kMaxTrackedRanks = 1024;

  // Ok, or why the engine can no longer be used.
  const Status& broken() const { return broken_; }
  // Throws the engine's error, or PeerLostError if the group was revoked.
  void check_usable();
  // Throws if a peer died, the deadline passed or abort was requested.
  // `awaited` are the ranks being waited on, for the message.
  // Fails (throws) on abort, revoke, a dead or departed awaited peer, or the
  // deadline. `still_awaited` re-reads who is awaited after a peer is seen
  // gone, so a peer that posted and then exited is not blamed.
  void check_progress(Deadline deadline, const std::vector<int>& awaited, const char* what,
                      const std::function<std::vector<int>()>& still_awaited = {});

 private:
  struct Header;
  struct Ring;
  class P2P;
  static std::unique_ptr<Transport> make_p2p(ShmEngine* e);  // shm_transport.cc
  Header* header(int r) const;
  Ring* ring(int from, int to) const;
  void fail(Status s);
  void fail_if_revoked();

  int rank_;
  int size_;
  size_t slot_bytes_;
  size_t ring_bytes_;
  std::vector<ShmSegment> segments_;
  std::vector<int> pids_;
  uint64_t step_ = 0;
  const std::atomic<bool>* abort_flag_;
  Status broken_;
  std::unique_ptr<Transport> p2p_;
  Clock::time_point next_liveness_check_{};
};

}  // namespace sinew::dist
