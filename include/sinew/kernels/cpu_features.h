// The instruction sets the kernels layer can use on this CPU, detected once.
//
// SINEW_KERNELS_ISA caps the choice (generic, avx2, avx512) so that the
// narrower kernels can be exercised, or pinned, on a wider machine.
#pragma once

#include <cstdint>
#include <string>

namespace sinew::kernels {

// Ordered: each level implies the ones before it.
enum class Isa : uint8_t {
  kGeneric,  // portable C++
  kAvx2,     // AVX2 + FMA + F16C
  kAvx512,   // AVX-512 F/BW/DQ/VL + FMA + F16C
};

struct CpuFeatures {
  bool avx2 = false;         // with FMA (and so F16C)
  bool avx512 = false;       // F, BW, DQ and VL
  bool avx512_bf16 = false;  // vdpbf16ps
  bool avx512_fp16 = false;
  bool avx512_vnni = false;  // vpdpwssd
  bool clflushopt = false;   // the weakly ordered cache-line flush
  std::string vendor;        // "GenuineIntel", "AuthenticAMD", ...
  // The last-level cache's size (sysconf's L3, else L2, else 64 MiB): what
  // working sets must exceed to measure memory rather than cache.
  int64_t last_level_cache_bytes = 0;
};

// What the CPU reports (not capped by SINEW_KERNELS_ISA).
const CpuFeatures& cpu_features();

// The widest ISA both the CPU and SINEW_KERNELS_ISA allow.
Isa best_isa();
bool isa_available(Isa isa);
// Whether the native bf16 dot product may be used (AVX-512 BF16, and
// AVX-512 allowed by SINEW_KERNELS_ISA).
bool bf16_dot_available();

const char* isa_name(Isa isa);  // "generic", "avx2", "avx512"

}  // namespace sinew::kernels
