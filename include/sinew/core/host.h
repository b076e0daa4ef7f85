// The machine's host name, as gethostname(2) reports it.
#pragma once

#include <string>

namespace sinew {

// "unknown" when the name cannot be read.
std::string host_name();

}  // namespace sinew
