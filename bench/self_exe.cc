#include "self_exe.h"

#include <unistd.h>

#include "sinew/core/error.h"

namespace sinew::bench {

std::string self_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw IoError("cannot resolve /proc/self/exe");
  buf[n] = 0;
  return buf;
}

}  // namespace sinew::bench
