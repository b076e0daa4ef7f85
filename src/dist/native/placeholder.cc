#include "sinew/dist/process_group.h"
#include "sinew/core/error.h"
namespace sinew::dist {
ProcessGroupPtr make_native_process_group(const GroupOptions&) { throw InternalError("native backend not built yet"); }
}
