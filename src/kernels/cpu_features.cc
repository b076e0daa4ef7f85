#include "sinew/kernels/cpu_features.h"

#include <cpuid.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "sinew/core/env.h"
#include "sinew/core/error.h"

namespace sinew::kernels {
namespace {

inline const EnvParam<std::string> kIsaCap{"SINEW_KERNELS_ISA", "",
                                           "widest ISA the kernels may use: generic, avx2 or avx512 "
                                           "(default: all the CPU has)"};

int64_t last_level_cache_bytes() {
  for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE})
    if (const long bytes = ::sysconf(name); bytes > 0) return bytes;
  return int64_t{64} << 20;
}

CpuFeatures detect() {
  CpuFeatures f;
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
  f.avx512_fp16 = f.avx512 && __builtin_cpu_supports("avx512fp16");
  f.avx512_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) f.clflushopt = (ebx >> 23) & 1;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx)) {
    char v[13];
    std::memcpy(v, &ebx, 4);
    std::memcpy(v + 4, &edx, 4);
    std::memcpy(v + 8, &ecx, 4);
    v[12] = '\0';
    f.vendor = v;
  }
  f.last_level_cache_bytes = last_level_cache_bytes();
  return f;
}

Isa cap() {
  const std::string& v = kIsaCap.get();
  if (v.empty() || v == "avx512") return Isa::kAvx512;
  if (v == "avx2") return Isa::kAvx2;
  if (v == "generic") return Isa::kGeneric;
  throw InvalidArgument::make("SINEW_KERNELS_ISA", "'" + v + "'", "generic, avx2 or avx512");
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

bool isa_available(Isa isa) {
  static const Isa limit = cap();
  if (isa > limit) return false;
  switch (isa) {
    case Isa::kGeneric: return true;
    case Isa::kAvx2: return cpu_features().avx2;
    case Isa::kAvx512: return cpu_features().avx512;
  }
  return false;
}

Isa best_isa() {
  if (isa_available(Isa::kAvx512)) return Isa::kAvx512;
  if (isa_available(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kGeneric;
}

bool bf16_dot_available() { return isa_available(Isa::kAvx512) && cpu_features().avx512_bf16; }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kGeneric: return "generic";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "unknown";
}

}  // namespace sinew::kernels
