// AVX2 f64 FMA kernels.
#include <iterator>

#include "kernels/avx2/vec.h"
#include "kernels/tile/block.h"
#include "kernels/tile/pack.h"

namespace sinew::kernels::tile {
namespace {

template <int MR, int NV>
constexpr TileKernel kernel(const char* name) {
  using K = FmaKernel<avx2::F64, MR, NV>;
  return make_kernel<K>(name, Isa::kAvx2, &pack_a<K>, &pack_b<K>);
}

constexpr TileKernel kKernels[] = {
    kernel<6, 2>("f64/6x8"),
    kernel<4, 3>("f64/4x12"),
};

}  // namespace

KernelList avx2_f64_kernels() { return {kKernels, static_cast<int>(std::size(kKernels))}; }

}  // namespace sinew::kernels::tile
