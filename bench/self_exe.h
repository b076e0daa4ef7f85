// The running `sinew` binary, which the suites start again as their ranks.
#pragma once

#include <string>

namespace sinew::bench {

std::string self_exe();

}  // namespace sinew::bench
