// A UCX worker and its endpoints, which outlive one epoch's transport.
//
// A group that reconfigures hands its worker and healthy endpoints to the
// next epoch's transport (Transport::hand_over). Each rank publishes, with
// its worker address, which peer workers it still holds a healthy endpoint
// to; a pair keeps its connection only when both ends hold it, so neither
// end closes what the other keeps.
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <list>
#include <set>
#include <vector>

#include "dist/ucx/ucx_context.h"
#include "sinew/core/deadline.h"
#include "sinew/core/env.h"
#include "sinew/core/error.h"
#include "sinew/dist/transport.h"

namespace sinew::dist::ucx {

inline const EnvParam<int64_t> kCloseTimeoutMs{"SINEW_UCX_CLOSE_TIMEOUT_MS", 2000,
                                               "how long destroying a UCX transport waits for "
                                               "sends to flush, and then for endpoints to close"};

// Whether `s` says the connection to the peer is gone (rather than a local failure).
bool is_connection_error(ucs_status_t s);
Status peer_lost(int peer, ucs_status_t why);

class UcxTransport;

// One endpoint to a peer's worker. It lives at a stable address because it
// is the endpoint error handler's argument, and it may outlive the
// transport that made it when it passes to the next epoch.
struct Conn {
  std::vector<uint8_t> remote;    // the peer worker's address
  ucp_ep_h ep = nullptr;
  ucs_status_t status = UCS_OK;   // the endpoint's error, once it failed
  UcxTransport* owner = nullptr;  // null while the endpoint waits for the next epoch
  int peer = -1;                  // the owner's rank for it
  uint64_t epoch = 0;             // the owner's epoch (its messages' tags carry it)
};

// Progresses `worker` until `reqs` (UCX requests without callbacks) are
// done or `until`; frees them either way. True when all completed.
bool progress_until_done(ucp_worker_h worker, std::vector<void*>& reqs, Deadline until);

// Closes endpoints without UCX's disconnect handshake, which would wait for
// every peer to progress; the peers see the connection end.
std::vector<void*> start_closing(const std::vector<ucp_ep_h>& eps);

// A worker and its endpoints: what one epoch's transport hands to the
// next. Used by one thread at a time, whoever holds the transport.
class Links final : public TransportLinks {
 public:
  explicit Links(size_t estimated_eps);
  ~Links() override;

  // The hashes of the peer workers this worker holds a healthy endpoint to.
  std::set<uint64_t> healthy() const;

  // Closes and forgets the endpoints `close` selects, within `until`.
  template <class Pred>
  void close_if(Pred close, Deadline until) {
    std::vector<ucp_ep_h> eps;
    for (auto& c : conns)
      if (c.ep && close(c)) {
        eps.push_back(c.ep);
        c.ep = nullptr;
      }
    if (eps.empty()) return;
    std::vector<void*> closing = start_closing(eps);
    // The closed endpoints' handler arguments stay until no callback can come.
    if (progress_until_done(worker.get(), closing, until))
      conns.remove_if([](const Conn& c) { return c.ep == nullptr; });
  }

  ContextPtr context;
  std::list<std::vector<uint8_t>> orphans;  // receive buffers UCX may still fill
  WorkerPtr worker;  // after the context and the buffers: destroyed first
  int event_fd;
  std::vector<uint8_t> address;
  std::list<Conn> conns;
};

}  // namespace sinew::dist::ucx
