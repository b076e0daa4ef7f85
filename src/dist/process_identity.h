// Which processes share a host, and whether a local process still lives.
// Used by the shared-memory engine and by the backends' failure detection.
// Internal to dist.
#pragma once

#include <sys/types.h>

#include <string>

namespace sinew::dist {

// Ranks share memory when they share a hostname, a kernel boot and a pid
// namespace: "host|boot_id|pidns".
std::string host_identity();

// False once `pid` is gone or a zombie (a killed child its parent has not
// reaped yet still answers kill(pid, 0)).
bool process_alive(pid_t pid);

}  // namespace sinew::dist
