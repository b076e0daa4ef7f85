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
TransportPtr make_ucx_transport(StorePtr store, int rank, int size, Deadline deadline,
                                std::function<void()> check_peers = {});
bool ucx_transport_available();

}  // namespace sinew::dist
