#include "sinew/core/host.h"

#include <unistd.h>

namespace sinew {

std::string host_name() {
  // HOST_NAME_MAX is 64 on Linux; 256 also holds a longer name elsewhere.
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "unknown";
  return buf;
}

}  // namespace sinew
