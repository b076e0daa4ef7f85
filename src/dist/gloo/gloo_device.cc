#include "gloo_device.h"

#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "sinew/core/env.h"
#include "sinew/core/error.h"
#include "sinew/core/host.h"
#include "sinew/core/log.h"

namespace sinew::dist {
namespace {

inline const EnvParam<std::string> kGlooIface{
    "SINEW_GLOO_IFACE", "", "network interface the gloo backend binds (e.g. eth0, lo)"};
inline const EnvParam<std::string> kGlooHostname{
    "SINEW_GLOO_HOSTNAME", "",
    "address or host name the gloo backend binds (default: this host's name if usable, else 127.0.0.1)"};

// True when `host` resolves to an address a socket can bind here: a name
// that resolves to another machine's address (stale /etc/hosts) is not usable.
bool bindable(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  bool ok = false;
  for (addrinfo* a = res; a && !ok; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    ok = bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    close(fd);
  }
  freeaddrinfo(res);
  return ok;
}

std::string default_host() {
  const std::string name = host_name();
  if (bindable(name)) return name;
  SINEW_WARN(kInit, "gloo: host name '{}' does not resolve to a bindable address; using 127.0.0.1 "
             "(set SINEW_GLOO_IFACE or SINEW_GLOO_HOSTNAME for multi-host jobs)", name);
  return "127.0.0.1";
}

}  // namespace

std::shared_ptr<gloo::transport::Device> make_gloo_device() {
  gloo::transport::tcp::attr attr;
  if (!kGlooIface.get().empty()) {
    attr.iface = kGlooIface.get();
  } else if (!kGlooHostname.get().empty()) {
    attr.hostname = kGlooHostname.get();
  } else {
    attr.hostname = default_host();
  }
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw IoError(fmt::format("gloo: cannot create a TCP device on {} '{}': {} (check {} / {})",
                              attr.iface.empty() ? "host" : "interface",
                              attr.iface.empty() ? attr.hostname : attr.iface, e.what(),
                              kGlooIface.name(), kGlooHostname.name()));
  }
}

}  // namespace sinew::dist
