// Builds without UCX (SINEW_WITH_UCX=OFF) still link: asking for the UCX
// transport is then a clear error instead of a missing symbol.
#ifndef SINEW_HAVE_UCX
#include "sinew/core/error.h"
#include "sinew/dist/transport.h"

namespace sinew::dist {

TransportPtr make_ucx_transport(StorePtr, int, int, Deadline, std::function<void()>, TransportLinksPtr, uint64_t) {
  throw InvalidArgument::make("transport", "'ucx'",
                              "a sinew built with SINEW_WITH_UCX=ON (this build has no UCX; ranks on "
                              "several hosts need it)");
}

bool ucx_transport_available() { return false; }

}  // namespace sinew::dist
#endif
