// Process-group hooks: every backend's operations pass through the
// ProcessGroup base class, which calls these at enqueue, start, completion,
// error and abort, and on group events. The Flight Recorder is one set of
// hooks; a user's tracer or a custom backend gets the same calls.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sinew/core/error.h"
#include "sinew/tensor/tensor_view.h"

namespace sinew::dist {

class Work;

// What hooks know about a group; fixed for the group's life.
struct GroupInfo {
  std::string pg_id;   // "<name>@e<epoch>": the same on every member
  std::string name;
  std::string desc;    // "default_pg", "split of default color 1", "reconfigure of default", ...
  std::string backend;
  uint64_t epoch = 0;
  int rank = 0;        // this process's rank in the group
  int size = 1;
  std::vector<int> ranks;  // members' ranks in the job, where known (else empty)
  int64_t timeout_ms = 0;
};

enum class GroupEvent { kCreate, kSplit, kReconfigure, kAbort, kRevoke };
const char* group_event_name(GroupEvent e);

class ProcessGroupHooks {
 public:
  virtual ~ProcessGroupHooks() = default;
  // Before the backend sees the op; `work` carries op name and sequence
  // number. p2p ops have peer >= 0 when there is a single peer.
  virtual void on_enqueue(Work& work, bool is_p2p, int peer, std::span<const TensorView> inputs,
                          std::span<const TensorView> outputs) {}
  // The backend starts executing the op (on the thread that runs it).
  virtual void on_start(Work& work) {}
  virtual void on_complete(Work& work) {}
  // The op failed. A hook may add to the message (e.g. where a trace was
  // dumped) before any waiter sees it.
  virtual void on_error(Work& work, Status& status) {}
  // A waiter's deadline passed while the op still runs (the op itself may
  // fail later, or never). Hooks may add to the waiter's message.
  virtual void on_wait_timeout(Work& work, Status& status) {}
  virtual void on_abort(const std::string& reason) {}
  virtual void on_event(GroupEvent event, const std::string& detail) {}
};

// Makes the hooks for a new group; called once per group at its first use.
using HooksFactory = std::function<std::shared_ptr<ProcessGroupHooks>(const GroupInfo&)>;
// Every group created after this call gets hooks from `factory` (the
// Flight Recorder registers itself this way).
void register_hooks_factory(HooksFactory factory);

// A group's hooks, shared by the group and its in-flight works.
struct HookSet {
  GroupInfo group;
  std::vector<std::shared_ptr<ProcessGroupHooks>> hooks;
};

}  // namespace sinew::dist
