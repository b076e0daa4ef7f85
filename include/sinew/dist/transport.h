// Point-to-point byte transport between the ranks of one group. Two
// implementations sit side by side: shared memory (ranks on one host) and
// UCX (between hosts). Collective algorithms are written against this.
//
// Semantics: messages between an ordered pair (src, dst) are delivered in
// the order they were posted; each receive must match the next message from
// that peer in tag and size, otherwise the request fails with
// InvalidArgument naming both sides. Requests are progressed by wait().
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sinew/core/deadline.h"
#include "sinew/core/error.h"
#include "sinew/dist/store.h"

namespace sinew::dist {

class TransportRequest {
 public:
  virtual ~TransportRequest() = default;
  // Non-blocking: true once done (successfully or not).
  virtual bool test() = 0;
  // Ok, or the error that ended it.
  virtual Status status() const = 0;
};
using RequestPtr = std::shared_ptr<TransportRequest>;

// A transport's process-local connection state, handed from one epoch of a
// group to the next so survivors keep their connections (opaque; only the
// transport kind that made it can use it).
class TransportLinks {
 public:
  virtual ~TransportLinks() = default;
};
using TransportLinksPtr = std::shared_ptr<TransportLinks>;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string name() const = 0;  // "shm", "ucx", "mixed"
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Post a send/receive of `bytes` bytes; buffers must stay valid until the
  // request completes.
  virtual RequestPtr isend(int peer, uint64_t tag, const void* data, size_t bytes) = 0;
  virtual RequestPtr irecv(int peer, uint64_t tag, void* data, size_t bytes) = 0;

  // Progresses until every request completes. Throws the first error:
  // PeerLostError (peer gone, names it), TimeoutError (deadline passed,
  // names the peers still awaited), AbortedError (abort() was called),
  // InvalidArgument (tag or size mismatch).
  virtual void wait(std::span<const RequestPtr> requests, Deadline deadline) = 0;

  // Fails every pending and later request with AbortedError; callable from
  // any thread; wakes a blocked wait() within 100 ms.
  virtual void abort() = 0;

  // Like abort(), but pending and later requests fail with `why` (e.g. a
  // PeerLost naming the failed ranks once the group was revoked).
  virtual void revoke(const Status& why) { (void)why; abort(); }

  // Ends this transport (pending and later requests fail with AbortedError)
  // and gives up its connections for the next epoch's transport, or null if
  // it keeps none. Connections to healthy peers stay open; the peers'
  // successors decide together which of them to keep. The caller must make
  // sure no other thread is inside isend/irecv/wait.
  virtual TransportLinksPtr hand_over() { return nullptr; }

  // The peers (ranks of this transport) whose connection came from the
  // previous epoch's transport instead of being made anew.
  virtual std::vector<int> reused_peers() const { return {}; }

  // Convenience: blocking send/recv.
  void send(int peer, uint64_t tag, const void* data, size_t bytes, Deadline d) {
    RequestPtr r = isend(peer, tag, data, bytes);
    wait({&r, 1}, d);
  }
  void recv(int peer, uint64_t tag, void* data, size_t bytes, Deadline d) {
    RequestPtr r = irecv(peer, tag, data, bytes);
    wait({&r, 1}, d);
  }
};

using TransportPtr = std::unique_ptr<Transport>;

// Rendezvous through `store` (keys under the store's namespace) and connect
// every pair. Blocking until `deadline`. While peers' addresses are awaited,
// `check_peers` (when given) runs every 100 ms and may throw to end the wait
// (PeerLostError for a rank known dead). A rank lost during the wire-up
// fails it with PeerLostError naming the lost rank, also at the peers that
// only saw this rank give up.
//
// `links` (from the previous epoch's hand_over(), may be null) lends its
// worker and the connections that both ends still hold; `epoch` keeps the
// epochs' messages apart (it must be the same on every rank, and differ
// from the previous epoch's when `links` is given).
TransportPtr make_ucx_transport(StorePtr store, int rank, int size, Deadline deadline,
                                std::function<void()> check_peers = {}, TransportLinksPtr links = nullptr,
                                uint64_t epoch = 0);
bool ucx_transport_available();

}  // namespace sinew::dist
