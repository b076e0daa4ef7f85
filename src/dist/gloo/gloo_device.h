// The TCP device a gloo group listens on. Internal to the gloo backend.
#pragma once

#include <gloo/transport/device.h>

#include <memory>

namespace sinew::dist {

// SINEW_GLOO_IFACE names an interface, SINEW_GLOO_HOSTNAME an address or host
// name. With neither, this host's name if it resolves to an address we can
// bind (as PyTorch does), else 127.0.0.1 (single-host jobs still work).
std::shared_ptr<gloo::transport::Device> make_gloo_device();

}  // namespace sinew::dist
