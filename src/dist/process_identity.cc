#include "process_identity.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

#include "sinew/core/host.h"

namespace sinew::dist {

std::string host_identity() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat st {};
  ::stat("/proc/self/ns/pid", &st);
  return fmt::format("{}|{}|{}", host_name(), boot, static_cast<uint64_t>(st.st_ino));
}

bool process_alive(pid_t pid) {
  if (pid == ::getpid()) return true;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string id, comm, state;
  if (f >> id >> comm >> state) return state != "Z" && state != "X";
  return true;
}

}  // namespace sinew::dist
