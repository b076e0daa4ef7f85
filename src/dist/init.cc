#include "sinew/dist/init.h"

#include "sinew/dist/flight_recorder.h"

#include <fmt/format.h>

#include <unistd.h>

#include <charconv>
#include <mutex>

#include "sinew/core/check.h"
#include "sinew/core/env.h"
#include "sinew/core/error.h"
#include "sinew/core/host.h"
#include "sinew/core/log.h"
#include "sinew/dist/launch_protocol.h"
#include "sinew/dist/tcp_store.h"
#ifdef SINEW_HAVE_MPI
#include "dist/mpi/mpi_runtime.h"
#endif

namespace sinew::dist {
namespace {

namespace env_names = launch::env;
namespace keys = launch::keys;

int parse_int_env(const char* name, const std::string& text) {
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size())
    throw InvalidArgument::make(name, fmt::format("'{}'", text), "an integer");
  return v;
}

std::optional<int> int_env(const char* name) {
  auto text = launch::env::read(name);
  if (!text) return std::nullopt;
  return parse_int_env(name, *text);
}

int int_env_or(const char* name, int fallback) { return int_env(name).value_or(fallback); }

// SLURM_TASKS_PER_NODE lists counts per node in node order, compressed as
// "2(x3),1": the count for `node` (or the first count if the list is short).
int slurm_tasks_on_node(const std::string& text, int node) {
  std::vector<int> counts;
  for (std::string item : launch::split_list(text)) {
    int repeat = 1;
    if (auto paren = item.find("(x"); paren != std::string::npos && item.back() == ')') {
      repeat = parse_int_env(env_names::kSlurmTasksPerNode,
                             item.substr(paren + 2, item.size() - paren - 3));
      item.resize(paren);
    }
    int n = parse_int_env(env_names::kSlurmTasksPerNode, item);
    for (int i = 0; i < repeat && counts.size() < 65536; ++i) counts.push_back(n);
  }
  if (node >= 0 && node < static_cast<int>(counts.size())) return counts[node];
  return counts.front();
}

// The first host of a SLURM node list in its simple forms: "a,b" and
// "prefix[01-04,07]suffix" -> "prefix01suffix".
std::string first_slurm_host(const std::string& list) {
  size_t bracket = list.find('[');
  size_t comma = list.find(',');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket))
    return list.substr(0, comma);
  size_t close = list.find(']', bracket);
  if (close == std::string::npos)
    throw InvalidArgument::make(env_names::kSlurmJobNodelist, fmt::format("'{}'", list),
                                "a node list such as 'node[01-04]' or 'a,b'");
  std::string inner = list.substr(bracket + 1, close - bracket - 1);
  std::string first = inner.substr(0, inner.find_first_of(",-"));
  std::string suffix = list.substr(close + 1);
  suffix = suffix.substr(0, suffix.find(','));
  return list.substr(0, bracket) + first + suffix;
}

void validate(LaunchEnv& env, const char* rank_var, const char* size_var) {
  if (env.world_size < 1)
    throw InvalidArgument::make(size_var, std::to_string(env.world_size), "at least 1");
  if (env.rank < 0 || env.rank >= env.world_size)
    throw InvalidArgument::make(
        rank_var, std::to_string(env.rank),
        fmt::format("0 <= {} < {} ({})", rank_var, size_var, env.world_size));
  if (env.local_world_size < 1) env.local_world_size = 1;
  if (env.master_port < 0 || env.master_port > 65535)
    throw InvalidArgument::make(env_names::kMasterPort, std::to_string(env.master_port),
                                "a TCP port (1-65535)");
}

void read_common(LaunchEnv& env) {
  env.master_addr = launch::env::read(env_names::kMasterAddr).value_or(env.master_addr);
  env.master_port = int_env_or(env_names::kMasterPort, env.master_port);
  env.token = launch::env::read(env_names::kStoreToken).value_or("");
}

// Each launcher's spelling of the rank, the world size and the local rank.
struct RankVars {
  const char* rank;
  const char* size;
  const char* local_rank;
  bool present() const { return launch::env::read(rank) && launch::env::read(size); }
};

constexpr RankVars kTorchrunVars{env_names::kRank, env_names::kWorldSize, env_names::kLocalRank};
constexpr RankVars kOmpiVars{env_names::kOmpiRank, env_names::kOmpiSize, env_names::kOmpiLocalRank};
constexpr RankVars kSlurmVars{env_names::kSlurmProcId, env_names::kSlurmNtasks,
                              env_names::kSlurmLocalId};

void read_ranks(LaunchEnv& env, const char* launcher, const RankVars& v) {
  env.launcher = launcher;
  env.rank = *int_env(v.rank);
  env.world_size = *int_env(v.size);
  env.local_rank = int_env_or(v.local_rank, 0);
}

bool is_one(const char* name) { return launch::env::read(name).value_or("") == "1"; }

struct InitState {
  std::mutex mu;
  StorePtr job_store;
  // Rank 0 hosts the store when no launcher does; it must outlive every
  // group created from it, so it lives as long as the process.
  std::unique_ptr<TcpStoreServer> hosted;
};

InitState& state() {
  static InitState s;
  return s;
}

StorePtr connect_store(const LaunchEnv& env, const InitOptions& options) {
  if (env.launcher == "single") return make_memory_store();
  TcpStoreOptions o;
  o.host = env.master_addr;
  o.port = env.master_port;
  o.token = env.token;
  o.timeout = options.timeout;
  o.connect_timeout = options.timeout;
  if (env.store_hosted) {
    // Every attempt gets a clean key space, as torchrun's agent store does
    // for its workers ("/worker/attempt_<n>"). The run attempt, not the
    // worker's restart count: a respawned joiner has a higher count than the
    // members it joins but must meet them in their key space.
    return make_prefix_store(keys::attempt_space(env.run_attempt), make_tcp_store(o));
  }
  // torchrun's own c10d store already listens on MASTER_PORT when workers
  // are told to use the agent store; ours takes the next port.
  if (launch::env::read(env_names::kUseAgentStore).value_or("") == "True") ++o.port;
  if (env.rank == 0) {
    auto& s = state();
    std::lock_guard<std::mutex> g(s.mu);
    if (!s.hosted || s.hosted->port() != o.port) {
      s.hosted.reset();
      s.hosted = std::make_unique<TcpStoreServer>(o.host, o.port, env.token);
      SINEW_INFO(kInit, "rank 0 hosts the job store at {}:{} (launcher {})", o.host, o.port,
                 env.launcher);
    }
  }
  return make_tcp_store(o);
}

// The mpi backend's job store (for what a program keeps beside its groups,
// and the Flight Recorder's dump requests): rank 0 hosts it on a free port
// and MPI tells the others where, so mpirun needs no MASTER_PORT.
StorePtr mpi_job_store(const LaunchEnv& env, const InitOptions& options) {
#ifdef SINEW_HAVE_MPI
  const Deadline deadline = Deadline::after(options.timeout);
  std::string where;
  if (env.rank == 0) {
    // MASTER_ADDR when given; loopback when every rank is on this host;
    // else every interface, announced by host name.
    const auto given = launch::env::read(env_names::kMasterAddr);
    const bool one_host = env.local_world_size >= env.world_size;
    const std::string bind = given ? *given : one_host ? "127.0.0.1" : "0.0.0.0";
    const std::string announce = given || one_host ? bind : host_name();
    auto& s = state();
    std::lock_guard<std::mutex> g(s.mu);
    const std::string token = make_job_token();
    s.hosted.reset();
    s.hosted = std::make_unique<TcpStoreServer>(bind, 0, token);
    where = fmt::format("{} {} {}", announce, s.hosted->port(), token);
    SINEW_INFO(kInit, "rank 0 hosts the job store at {}:{} (launcher {}, backend mpi)", announce,
               s.hosted->port(), env.launcher);
  }
  where = mpi::share_from_rank0(where, deadline);
  TcpStoreOptions o;
  const size_t a = where.find(' '), b = where.find(' ', a + 1);
  if (a == std::string::npos || b == std::string::npos)
    throw InternalError(fmt::format("mpi: malformed job store address from rank 0: '{}'", where));
  o.host = where.substr(0, a);
  o.port = parse_int_env("job store port", where.substr(a + 1, b - a - 1));
  o.token = where.substr(b + 1);
  o.timeout = options.timeout;
  o.connect_timeout = std::chrono::duration_cast<Millis>(deadline.remaining());
  return make_tcp_store(o);
#else
  (void)env;
  (void)options;
  return nullptr;
#endif
}

}  // namespace

LaunchEnv read_launch_env() {
  namespace e = env_names;
  LaunchEnv env;
  if (kTorchrunVars.present()) {
    env.store_hosted = is_one(e::kStoreHosted);
    read_ranks(env, env.store_hosted ? "sinew" : "torchrun", kTorchrunVars);
    env.local_world_size = int_env_or(e::kLocalWorldSize, 1);
    env.node_rank = int_env_or(e::kGroupRank, 0);
    env.restart_count = int_env_or(e::kRestartCount, 0);
    env.run_attempt = int_env_or(e::kRunAttempt, env.restart_count);
    env.join = is_one(e::kJoin);
    env.run_id = launch::env::read(e::kRunId).value_or("");
    read_common(env);
    validate(env, e::kRank, e::kWorldSize);
  } else if (kOmpiVars.present()) {
    read_ranks(env, "mpirun", kOmpiVars);
    env.local_world_size = int_env_or(e::kOmpiLocalSize, 1);
    read_common(env);
    validate(env, e::kOmpiRank, e::kOmpiSize);
    // Open MPI exports no node index; this holds for its default by-slot mapping.
    env.node_rank = env.rank / env.local_world_size;
  } else if (kSlurmVars.present()) {
    read_ranks(env, "srun", kSlurmVars);
    env.node_rank = int_env_or(e::kSlurmNodeId, 0);
    if (auto n = int_env(e::kSlurmNtasksPerNode)) {
      env.local_world_size = *n;
    } else if (auto t = launch::env::read(e::kSlurmTasksPerNode)) {
      env.local_world_size = slurm_tasks_on_node(*t, env.node_rank);
    }
    read_common(env);
    if (!launch::env::read(e::kMasterAddr)) {
      // Rank 0 runs on the first node of the step.
      auto list = launch::env::read(e::kSlurmStepNodelist);
      if (!list) list = launch::env::read(e::kSlurmJobNodelist);
      if (list) env.master_addr = first_slurm_host(*list);
    }
    validate(env, e::kSlurmProcId, e::kSlurmNtasks);
  } else {
    env.launcher = "single";
    env.token = launch::env::read(e::kStoreToken).value_or("");
  }
  return env;
}

ProcessGroupPtr init_process_group(const InitOptions& options) {
  LaunchEnv env = read_launch_env();
  set_log_rank(env.rank);
  GroupOptions g;
  g.backend =
      !options.backend.empty() ? options.backend : launch::env::read(env_names::kBackend).value_or("sinew");
  g.rank = env.rank;
  g.size = env.world_size;
  g.name = keys::kDefaultGroup;
  g.timeout = options.timeout;
  g.transport = options.transport;
  if (env.join) {
    SINEW_ARG_CHECK(g.backend == "sinew", env_names::kJoin, "1",
                    fmt::format("the sinew backend, which can grow (backend is '{}')", g.backend));
    SINEW_INFO(kInit, "joining the running group (slot of rank {}, launcher {}, attempt {})",
               env.rank, env.launcher, env.run_attempt);
  } else {
    SINEW_INFO(kInit, "joining as rank {} of {} (launcher {}, backend {})", env.rank,
               env.world_size, env.launcher, g.backend);
  }
  StorePtr store;
  if (g.backend != "mpi") {
    store = connect_store(env, options);
    g.store = make_prefix_store(keys::kDefaultGroup, store);
  } else {
    store = env.launcher == "single" ? make_memory_store() : mpi_job_store(env, options);
  }
  if (store && env.launcher == "sinew") {
    // sinew run --fault-tolerant records each worker it lost (run_job.cc).
    g.lost_ranks = [store, world = env.world_size] {
      std::vector<int> lost;
      if (store->add(keys::kLostCount, 0) == 0) return lost;
      for (int r = 0; r < world; ++r)
        if (store->check({keys::lost(r)})) lost.push_back(r);
      return lost;
    };
  }
  ProcessGroupPtr group;
  if (env.join) {
    g.rank = g.size = -1;
    group = join_process_group(g, Deadline::after(options.timeout));
    set_log_rank(group->rank());
    SINEW_INFO(kInit, "admitted as rank {} of {} in epoch {}", group->rank(), group->size(),
               group->epoch());
  } else {
    group = create_process_group(g);
  }
  std::lock_guard<std::mutex> lock(state().mu);
  state().job_store = store;
  if (!store) return group;
  watch_flight_recorder_requests(store);
  try {
    if (auto offset = store->clock_offset_ns()) set_flight_recorder_clock_offset(*offset);
  } catch (const Error& e) {
    SINEW_DEBUG(kInit, "could not measure the clock offset to the store host: {}", e.what());
  }
  return group;
}

StorePtr job_store() {
  std::lock_guard<std::mutex> lock(state().mu);
  if (!state().job_store)
    throw InvalidArgument::make("job_store()", "no store", "init_process_group() called first");
  return state().job_store;
}

}  // namespace sinew::dist
