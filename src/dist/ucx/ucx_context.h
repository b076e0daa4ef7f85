// Owning handles for a UCP context and its worker, and the configuration
// sinew gives UCX when the user has not chosen one.
#pragma once

#include <ucp/api/ucp.h>

#include <memory>
#include <string>
#include <vector>

#include "sinew/core/env.h"

namespace sinew::dist::ucx {

// sinew's own transports cover ranks on one host (shm), so UCX carries the
// traffic between hosts; TCP works everywhere, so it is the default. A user
// who sets UCX_TLS keeps it unless SINEW_UCX_TLS is set too.
inline const EnvParam<std::string> kUcxTls{
    "SINEW_UCX_TLS", "tcp,self",
    "UCX transports (UCX_TLS syntax) when UCX_TLS is not set; set it to override UCX_TLS"};
// Empty leaves UCX's choice (every device). A user who sets UCX_NET_DEVICES
// keeps it unless SINEW_UCX_NET_DEVICES is set too.
inline const EnvParam<std::string> kUcxNetDevices{
    "SINEW_UCX_NET_DEVICES", "",
    "UCX network devices (UCX_NET_DEVICES syntax, e.g. 'lo' or 'eth0'); empty: UCX's default"};

// UCX's own variables, which UCX reads; sinew reads them to know whether the
// user chose (and to report the effective settings).
inline const EnvParam<std::string> kUcxOwnTls{"UCX_TLS", "", "UCX's transport list; used when SINEW_UCX_TLS is unset",
                                              EnvSource::kLauncher};
inline const EnvParam<std::string> kUcxOwnNetDevices{
    "UCX_NET_DEVICES", "", "UCX's device list; used when SINEW_UCX_NET_DEVICES is unset", EnvSource::kLauncher};

// Throws IoError naming `what` and the UCX status when `status` is an error.
void check_ucs(ucs_status_t status, const char* what);

struct ContextDeleter {
  void operator()(ucp_context_h c) const { ucp_cleanup(c); }
};
struct WorkerDeleter {
  void operator()(ucp_worker_h w) const { ucp_worker_destroy(w); }
};
using ContextPtr = std::unique_ptr<std::remove_pointer_t<ucp_context_h>, ContextDeleter>;
using WorkerPtr = std::unique_ptr<std::remove_pointer_t<ucp_worker_h>, WorkerDeleter>;

// The transports and devices in effect for contexts sinew creates.
struct UcxSettings {
  std::string tls;
  std::string net_devices;
};
UcxSettings effective_settings();

// A context with the tag-matching and wakeup features, sized for
// `estimated_eps` endpoints.
ContextPtr make_context(size_t estimated_eps);
// A worker used by one thread at a time (its event fd wakes the waiter).
WorkerPtr make_worker(ucp_context_h context);

// The worker's address, as bytes to publish through the store.
std::vector<uint8_t> worker_address(ucp_worker_h worker);

// The worker's event file descriptor, for poll(2).
int worker_event_fd(ucp_worker_h worker);

}  // namespace sinew::dist::ucx
