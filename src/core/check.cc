#include "sinew/core/check.h"

namespace sinew::detail {

void check_failed(const char* file, int line, const std::string& what) {
  throw InternalError(fmt::format("{} at {}:{}", what, file, line));
}

}  // namespace sinew::detail
