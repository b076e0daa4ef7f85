// What the f32 GEMM microkernel itself can do on this CPU: its FMA rate with
// both packed panels resident in L1, so that only the kernel's instruction
// mix (FMAs plus the loads and broadcasts that feed them) limits it.
// `sinew bench peak` reports it beside the register-only FMA peak; the gap
// between the two is what no cache blocking can recover.
#pragma once

#include <cstdint>

namespace sinew::kernels {

// Runs the AVX-512 f32 12x32 tile `reps` times over 256 K steps of
// L1-resident panels; returns the FLOPs done, 0 where the CPU (or
// SINEW_KERNELS_ISA) rules AVX-512 out.
double microkernel_f32_l1_flops(int64_t reps);

}  // namespace sinew::kernels
