#include "dist/ucx/ucx_links.h"

#include <fmt/format.h>

#include "dist/ucx/ucx_wire.h"

namespace sinew::dist::ucx {

bool is_connection_error(ucs_status_t s) {
  switch (s) {
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_IO_ERROR:
      return true;
    default:
      return false;
  }
}

Status peer_lost(int peer, ucs_status_t why) {
  return Status(ErrorCode::kPeerLost,
                fmt::format("UCX connection to rank {} lost ({}): the peer exited or its network "
                            "failed; re-create the group without it or restart the job",
                            peer, ucs_status_string(why)),
                {peer});
}

bool progress_until_done(ucp_worker_h worker, std::vector<void*>& reqs, Deadline until) {
  while (!reqs.empty()) {
    while (ucp_worker_progress(worker) != 0) {
    }
    std::erase_if(reqs, [](void* req) {
      if (ucp_request_check_status(req) == UCS_INPROGRESS) return false;
      ucp_request_free(req);
      return true;
    });
    if (until.expired()) break;
  }
  bool done = reqs.empty();
  for (void* req : reqs) ucp_request_free(req);  // UCX releases it once it completes
  reqs.clear();
  return done;
}

std::vector<void*> start_closing(const std::vector<ucp_ep_h>& eps) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  std::vector<void*> closing;
  for (ucp_ep_h ep : eps) {
    ucs_status_ptr_t sp = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(sp)) closing.push_back(sp);
  }
  return closing;
}

Links::Links(size_t estimated_eps)
    : context(make_context(estimated_eps)),
      orphans(),
      worker(make_worker(context.get())),
      event_fd(worker_event_fd(worker.get())),
      address(worker_address(worker.get())) {}

Links::~Links() { close_if([](const Conn&) { return true; }, Deadline::after(Millis(kCloseTimeoutMs.get()))); }

std::set<uint64_t> Links::healthy() const {
  std::set<uint64_t> out;
  for (const auto& c : conns)
    if (c.ep && c.status == UCS_OK) out.insert(address_hash(c.remote));
  return out;
}

}  // namespace sinew::dist::ucx
