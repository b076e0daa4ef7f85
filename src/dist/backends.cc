// Registers the backends built into this library.
#include <mutex>

#include "sinew/dist/process_group.h"

namespace sinew::dist {

ProcessGroupPtr make_native_process_group(const GroupOptions& options);  // native/
#ifdef SINEW_HAVE_GLOO
ProcessGroupPtr make_gloo_process_group(const GroupOptions& options);  // gloo/
#endif
#ifdef SINEW_HAVE_MPI
ProcessGroupPtr make_mpi_process_group(const GroupOptions& options);  // mpi/
#endif

void register_builtin_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_backend("sinew", &make_native_process_group);
#ifdef SINEW_HAVE_GLOO
    register_backend("gloo", &make_gloo_process_group);
#endif
#ifdef SINEW_HAVE_MPI
    register_backend("mpi", &make_mpi_process_group);
#endif
  });
}

}  // namespace sinew::dist
