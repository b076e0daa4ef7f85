// Portable kernels, for CPUs without AVX2 (and SINEW_KERNELS_ISA=generic).
// Compiled with the build's baseline flags.
#include <iterator>

#include "kernels/tile/block.h"
#include "kernels/tile/generic_vec.h"
#include "kernels/tile/pack.h"

namespace sinew::kernels::tile {
namespace {

template <class V, int MR, int NV>
constexpr TileKernel kernel(const char* name) {
  using K = FmaKernel<V, MR, NV>;
  return make_kernel<K>(name, Isa::kGeneric, &pack_a<K>, &pack_b<K>);
}

constexpr TileKernel kKernels[] = {
    kernel<generic::F32, 4, 2>("f32/4x16"),
    kernel<generic::F64, 4, 2>("f64/4x8"),
};

}  // namespace

KernelList generic_kernels() { return {kKernels, static_cast<int>(std::size(kKernels))}; }

}  // namespace sinew::kernels::tile
