#include "dist/ucx/ucx_context.h"

#include <fmt/format.h>

#include "sinew/core/error.h"
#include "sinew/core/log.h"

namespace sinew::dist::ucx {
namespace {

struct ConfigDeleter {
  void operator()(ucp_config_t* c) const { ucp_config_release(c); }
};
using ConfigPtr = std::unique_ptr<ucp_config_t, ConfigDeleter>;

// A sinew variable wins when set; otherwise the UCX variable (read by UCX
// itself); otherwise sinew's default, if it has one.
std::string choose(const EnvParam<std::string>& param, const EnvParam<std::string>& ucx_var) {
  if (param.is_set()) return param.get();
  if (auto v = ucx_var.read()) return *v;
  return param.get();
}

}  // namespace

void check_ucs(ucs_status_t status, const char* what) {
  if (status != UCS_OK)
    throw IoError(fmt::format("UCX {} failed: {}", what, ucs_status_string(status)));
}

UcxSettings effective_settings() {
  return {choose(kUcxTls, kUcxOwnTls), choose(kUcxNetDevices, kUcxOwnNetDevices)};
}

ContextPtr make_context(size_t estimated_eps) {
  ucp_config_t* raw = nullptr;
  check_ucs(ucp_config_read(nullptr, nullptr, &raw), "ucp_config_read");
  ConfigPtr config(raw);
  UcxSettings s = effective_settings();
  if (!s.tls.empty())
    check_ucs(ucp_config_modify(config.get(), "TLS", s.tls.c_str()), "setting TLS");
  if (!s.net_devices.empty())
    check_ucs(ucp_config_modify(config.get(), "NET_DEVICES", s.net_devices.c_str()),
              "setting NET_DEVICES");

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                      UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  params.estimated_num_eps = estimated_eps;
  ucp_context_h context = nullptr;
  ucs_status_t st = ucp_init(&params, config.get(), &context);
  if (st != UCS_OK)
    throw IoError(
        fmt::format("UCX ucp_init failed: {} (TLS '{}', NET_DEVICES '{}'); set "
                    "SINEW_UCX_TLS / SINEW_UCX_NET_DEVICES to transports and devices "
                    "this host has (see `ucx_info -d`)",
                    ucs_status_string(st), s.tls, s.net_devices.empty() ? "all" : s.net_devices));
  SINEW_DEBUG(kUcx, "UCX {} context: TLS '{}', NET_DEVICES '{}'", ucp_get_version_string(), s.tls,
              s.net_devices.empty() ? "all" : s.net_devices);
  return ContextPtr(context);
}

WorkerPtr make_worker(ucp_context_h context) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  check_ucs(ucp_worker_create(context, &params, &worker), "ucp_worker_create");
  return WorkerPtr(worker);
}

std::vector<uint8_t> worker_address(ucp_worker_h worker) {
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  check_ucs(ucp_worker_get_address(worker, &addr, &len), "ucp_worker_get_address");
  const auto* p = reinterpret_cast<const uint8_t*>(addr);
  std::vector<uint8_t> out(p, p + len);
  ucp_worker_release_address(worker, addr);
  return out;
}

int worker_event_fd(ucp_worker_h worker) {
  int fd = -1;
  check_ucs(ucp_worker_get_efd(worker, &fd), "ucp_worker_get_efd");
  return fd;
}

}  // namespace sinew::dist::ucx
