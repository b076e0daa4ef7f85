// The environment the benchmarks' peers (OpenBLAS, BLIS) need for a fair run.
#pragma once

namespace sinew::bench {

// Re-executes this process (at most twice) with the environment the peers
// need: without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE (which pin OpenBLAS to
// a slower kernel on some machines), then, if OpenBLAS's own detection falls
// back to Prescott, with the OPENBLAS_CORETYPE the CPU's features call for;
// BLIS_ARCH_TYPE=skx (BLIS's auto-detection picks generic kernels on some
// of them). Returns only when the environment is already right or a re-exec
// failed (with a warning).
void ensure_peer_bench_env();

}  // namespace sinew::bench
