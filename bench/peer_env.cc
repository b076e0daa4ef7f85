#include "peer_env.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gemm_peers.h"
#include "self_exe.h"
#include "sinew/core/env.h"
#include "sinew/kernels/cpu_features.h"

namespace sinew::bench {
namespace {

// The benchmark re-executes itself with the peers' environment; this marks
// how far that has gone, so that it happens once.
const EnvParam<std::string> kPeerEnvStage{"SINEW_BENCH_PEER_ENV", "",
                                          "internal: stage of `sinew bench`'s re-execution with the peers' "
                                          "environment (1: set, 2: OpenBLAS core pinned)"};

}  // namespace

void ensure_peer_bench_env() {
  const auto stage = kPeerEnvStage.read();
  if (!stage) {
    ::unsetenv("OPENBLAS_CORETYPE");
    ::unsetenv("OPENBLAS_L2_SIZE");
    if (kernels::cpu_features().avx512) ::setenv("BLIS_ARCH_TYPE", "skx", 1);
    // BLIS's OpenMP threads otherwise spin in barriers, which on a shared
    // (oversubscribed) machine costs it most of its speed at 2 threads.
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
    ::setenv("SINEW_BENCH_PEER_ENV", "1", 1);
  } else if (*stage == "1" && openblas_fallback_core()) {
    // With nothing pinned OpenBLAS did not recognize the CPU.
    ::setenv("OPENBLAS_CORETYPE", openblas_fallback_core(), 1);
    ::setenv("SINEW_BENCH_PEER_ENV", "2", 1);
  } else {
    return;
  }
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string a;
  while (std::getline(in, a, '\0')) args.push_back(a);
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  if (!args.empty()) ::execv(self_exe().c_str(), argv.data());
  fmt::print(stderr,
             "warning: could not re-execute {} for the benchmark environment; OpenBLAS keeps the inherited one\n",
             self_exe());
}

}  // namespace sinew::bench
