// `sinew run`: the torchrun-compatible launcher's command line. The job
// itself is run_job.cc; worker processes are run_workers.cc.
#include <fmt/format.h>
#include <sched.h>
#include <stdlib.h>

#include <cctype>
#include <charconv>
#include <cstdio>
#include <memory>
#include <optional>
#include <limits>
#include <set>

#include "sinew/core/env.h"
#include "sinew/core/error.h"
#include "sinew/dist/launch_protocol.h"
#include "sinew/dist/tcp_store.h"
#include "tools/sinew/cli_parse.h"
#include "tools/sinew/commands.h"
#include "tools/sinew/run_job.h"

namespace sinew::cli {
namespace {

constexpr const char* kFooter = R"(
Everything after PROGRAM is passed to it. PROGRAM is executed directly (like
torchrun --no-python): use `sinew run ... python3 train.py` for a script.
Every option may also come from the environment as PET_<OPTION> (e.g.
PET_NPROC_PER_NODE=4), as with torchrun; the command line wins.

Rendezvous: the launcher (never a rank) hosts the job's TCP store and workers
connect to it. --standalone hosts it on 127.0.0.1 at a free port. A single
node without --standalone hosts it at --rdzv-endpoint (or --master-addr /
--master-port), at a free port on 127.0.0.1 if none is given. With --nnodes N
> 1, node 0's launcher hosts it at --rdzv-endpoint and the others connect;
every node must pass the same --rdzv-id and --store-token (or
SINEW_STORE_TOKEN); a single node generates a token itself.

Worker environment (as torchrun sets it): RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE,
ROLE_NAME=default, MASTER_ADDR, MASTER_PORT (the store), TORCHELASTIC_RESTART_COUNT,
TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID, TORCHELASTIC_USE_AGENT_STORE=False,
OMP_NUM_THREADS=1 (only if unset and more than one worker per node), plus
SINEW_STORE_TOKEN, SINEW_STORE_HOSTED=1 and SINEW_BACKEND (with --backend).

Output: each line of a worker's stdout/stderr is shown on the launcher's
stdout/stderr prefixed with "[host:rank]" (--local-ranks-filter limits which
local ranks are shown). With --log-dir every stream is also written to
<log-dir>/<run-id>/attempt_<n>/<local_rank>/{stdout,stderr}.log; --tee and
--redirects (0 none, 1 stdout, 2 stderr, 3 both, or per local rank as
"0:3,1:1") choose which streams are copied to files or only written there.

Processes and signals: each worker runs in its own process group and is
killed if the launcher dies. SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded
to every worker's process group; workers still running after
SINEW_RUN_KILL_GRACE_S seconds (default 5) get SIGKILL (a second signal to the
launcher sends it at once).

Failures: when a worker fails and restarts remain (--max-restarts), all
workers (on every node) are stopped and started again with
TORCHELASTIC_RESTART_COUNT and the attempt number raised. Otherwise the others
are stopped and the launcher exits with the first failing worker's exit code
(128 + signal number if it was killed). Each attempt ends with a per-rank table
on stderr: rank, local rank, pid, exit code or signal, elapsed time.

--fault-tolerant (or PET_FAULT_TOLERANT=1 / SINEW_RUN_FAULT_TOLERANT=1): for
programs that survive the loss of a rank (ProcessGroup::reconfigure()). A
worker killed by a signal is recorded as lost and the others keep running;
the launcher waits for them. The job exits 0 if every worker on this node
that was not lost exits 0 (and at least one was not lost); a worker that
exits with a non-zero code still fails the job as above.

--fault-tolerant with --max-restarts N > 0: instead of restarting every
worker, a worker lost to a signal is respawned alone in its local rank's slot
as a joiner (at most N respawns and restarts for the whole job; the final
table counts them). The respawn gets SINEW_JOIN=1, its slot's RANK (for
logging only), TORCHELASTIC_RESTART_COUNT raised by one, and the same
SINEW_RUN_ATTEMPT (the store key space of the running group) as the others;
init_process_group() then joins the running group (join_process_group) and
returns once the members admit it at their next reconfigure(), in the next
epoch. The program must call reconfigure() now and then (also without a
failure) and hand the joiner its state (broadcast_state), see
examples/fault_tolerant_loop.cc. A joiner never admitted fails when its init
timeout passes. Every worker also gets SINEW_RUN_ATTEMPT.)";

// The launcher's view of the command line before it is checked.
struct RunArgs {
  std::string nproc = "1";
  std::string nnodes = "1";
  int node_rank = 0;
  std::string rdzv_endpoint;
  std::string rdzv_id;
  std::string rdzv_backend = "static";
  bool standalone = false;
  int max_restarts = 0;
  bool fault_tolerant = false;
  double monitor_interval = 0.1;
  std::string log_dir;
  std::string tee;
  std::string redirects;
  std::string local_ranks_filter;
  std::string master_addr;
  int master_port = 29500;
  bool master_port_given = false;
  bool no_python = false;
  std::string backend;
  std::string store_token;
  std::vector<std::string> command;
};

const EnvParam<bool> kFaultTolerant{"SINEW_RUN_FAULT_TOLERANT", false,
                                    "sinew run --fault-tolerant: a worker killed by a signal does not "
                                    "stop the others"};

int parse_int(const std::string& option, const std::string& text, int lo, const std::string& expected) {
  return static_cast<int>(cli::parse_int(option, text, lo, std::numeric_limits<int>::max(), expected));
}

int cpu_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return 1;
}

int parse_nproc(const std::string& text) {
  if (text == "auto" || text == "cpu") return cpu_count();
  return parse_int("--nproc-per-node", text, 1, "a positive integer, 'auto' or 'cpu'");
}

int parse_nnodes(const std::string& text) {
  static const std::string kExpected =
      "N or N:N (a fixed number of nodes; elastic MIN:MAX is not supported)";
  auto colon = text.find(':');
  if (colon == std::string::npos) return parse_int("--nnodes", text, 1, kExpected);
  int lo = parse_int("--nnodes", text.substr(0, colon), 1, kExpected);
  int hi = parse_int("--nnodes", text.substr(colon + 1), 1, kExpected);
  if (lo != hi) throw InvalidArgument::make("--nnodes", fmt::format("'{}'", text), kExpected);
  return lo;
}

// "host", "host:port" or "[v6addr]:port".
std::pair<std::string, std::optional<int>> parse_endpoint(const std::string& text) {
  static const std::string kExpected = "HOST:PORT";
  std::string host = text;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos)
      throw InvalidArgument::make("--rdzv-endpoint", fmt::format("'{}'", text), kExpected);
    host = text.substr(1, close - 1);
    if (close + 1 < text.size() && text[close + 1] == ':') port = text.substr(close + 2);
  } else if (auto colon = text.rfind(':'); colon != std::string::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (host.empty())
    throw InvalidArgument::make("--rdzv-endpoint", fmt::format("'{}'", text), kExpected);
  if (port.empty()) return {host, std::nullopt};
  int p = parse_int("--rdzv-endpoint", port, 0, "HOST:PORT with a port in 0-65535");
  if (p > 65535)
    throw InvalidArgument::make("--rdzv-endpoint", fmt::format("'{}'", text), kExpected);
  return {host, p};
}

std::set<int> parse_rank_list(const std::string& text) {
  std::set<int> out;
  for (int r : parse_int_list32("--local-ranks-filter", text, 0, std::numeric_limits<int>::max(),
                                "a comma list of local ranks, e.g. 0,2"))
    out.insert(r);
  return out;
}

RunConfig make_config(const RunArgs& a) {
  RunConfig c;
  const auto& command = a.command;
  if (command.empty())
    throw InvalidArgument::make(
        "PROGRAM", "(missing)",
        "the program to launch, e.g. `sinew run --nproc-per-node 2 ./train`");
  c.program = command.front();
  c.args.assign(command.begin() + 1, command.end());

  c.nproc_per_node = parse_nproc(a.nproc);
  c.nnodes = parse_nnodes(a.nnodes);
  if (a.node_rank < 0 || a.node_rank >= c.nnodes)
    throw InvalidArgument::make("--node-rank", std::to_string(a.node_rank),
                                fmt::format("0 <= node rank < --nnodes ({})", c.nnodes));
  c.node_rank = a.node_rank;
  if (a.rdzv_backend != "static" && a.rdzv_backend != "c10d")
    throw InvalidArgument::make("--rdzv-backend", fmt::format("'{}'", a.rdzv_backend),
                                "'static' or 'c10d' (both mean sinew's launcher-hosted TCP store)");
  if (a.max_restarts < 0)
    throw InvalidArgument::make("--max-restarts", std::to_string(a.max_restarts), "0 or more");
  c.max_restarts = a.max_restarts;
  c.fault_tolerant = a.fault_tolerant || kFaultTolerant.get();
  if (!(a.monitor_interval > 0))
    throw InvalidArgument::make("--monitor-interval", fmt::format("{}", a.monitor_interval),
                                "a positive number of seconds");
  c.monitor_interval_s = a.monitor_interval;
  if (a.master_port < 0 || a.master_port > 65535)
    throw InvalidArgument::make("--master-port", std::to_string(a.master_port),
                                "a port in 0-65535");
  c.backend = a.backend;
  c.token = a.store_token;
  if (!a.rdzv_id.empty()) c.run_id = a.rdzv_id;

  std::optional<std::pair<std::string, std::optional<int>>> endpoint;
  if (!a.rdzv_endpoint.empty()) endpoint = parse_endpoint(a.rdzv_endpoint);
  if (a.standalone) {
    if (c.nnodes != 1)
      throw InvalidArgument::make("--nnodes", std::to_string(c.nnodes), "1 with --standalone");
    c.standalone = true;
    c.store_host = "127.0.0.1";
    c.store_port = 0;
    if (a.rdzv_id.empty()) c.run_id = dist::make_job_token().substr(0, 12);
  } else if (c.nnodes == 1) {
    c.store_host = endpoint ? endpoint->first : a.master_addr.empty() ? "127.0.0.1" : a.master_addr;
    c.store_port = endpoint && endpoint->second ? *endpoint->second
                   : a.master_port_given        ? a.master_port
                                                : 0;
  } else {
    if (!endpoint && a.master_addr.empty())
      throw InvalidArgument::make("--rdzv-endpoint", "(unset)",
                                  fmt::format("HOST:PORT of node 0's launcher, which hosts the "
                                              "job store, when --nnodes is {} (or --master-addr "
                                              "and --master-port)",
                                              c.nnodes));
    c.store_host = endpoint ? endpoint->first : a.master_addr;
    c.store_port = endpoint ? endpoint->second.value_or(29400) : a.master_port;
    if (c.store_port == 0)
      throw InvalidArgument::make("--rdzv-endpoint", a.rdzv_endpoint,
                                  "a fixed port when --nnodes > 1 (the other nodes must know it)");
    if (c.token.empty())
      throw InvalidArgument::make(
          "--store-token", "(unset)",
          fmt::format("the same secret on every node when --nnodes is {}: the store refuses "
                      "clients without the job's token, and node 0 cannot hand a generated one "
                      "to the others. Set e.g. SINEW_STORE_TOKEN=$(openssl rand -hex 16) on "
                      "every node",
                      c.nnodes));
  }

  c.output.tee = StreamMask::parse("--tee", a.tee);
  c.output.redirects = StreamMask::parse("--redirects", a.redirects);
  if (!a.local_ranks_filter.empty()) c.output.console_ranks = parse_rank_list(a.local_ranks_filter);
  c.output.log_dir = a.log_dir;
  if (c.output.log_dir.empty() && !(c.output.tee.empty() && c.output.redirects.empty())) {
    // Like torchrun, --tee / --redirects without --log-dir write to a fresh temporary directory.
    std::string tmpl = "/tmp/sinew_run_XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr)
      throw IoError(fmt::format("sinew run: cannot create a log directory {}", tmpl));
    c.output.log_dir = tmpl;
    std::fprintf(stderr, "sinew run: worker logs in %s\n", tmpl.c_str());
  }
  return c;
}

// torchrun's environment spelling of an option, PET_<OPTION>: --nproc-per-node
// reads PET_NPROC_PER_NODE.
CLI::Option* pet(CLI::Option* option) {
  std::string name = option->get_lnames().front();
  for (char& ch : name) ch = ch == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return option->envname("PET_" + name);
}

}  // namespace

void add_run_command(CLI::App& app, int& rc) {
  auto* cmd = app.add_subcommand("run",
                                 "Launch PROGRAM as workers on this node (torchrun-compatible): "
                                 "sinew run [options] PROGRAM [ARGS...]");
  auto a = std::make_shared<RunArgs>();
  pet(cmd->add_option("--nproc-per-node,--nproc_per_node", a->nproc,
                  "Workers on this node: a number, or 'auto'/'cpu' for the number of CPUs"))
      ->capture_default_str();
  pet(cmd->add_option("--nnodes", a->nnodes, "Number of nodes: N (or N:N)"))
      ->capture_default_str();
  pet(cmd->add_option("--node-rank,--node_rank", a->node_rank, "This node's rank, 0 .. nnodes-1"))
      ->capture_default_str();
  pet(cmd->add_option("--rdzv-endpoint,--rdzv_endpoint", a->rdzv_endpoint,
                  "HOST:PORT where node 0's launcher hosts the job store"));
  pet(cmd->add_option("--rdzv-id,--rdzv_id", a->rdzv_id,
                      "Run id, the same on every node (default 'none'; random with --standalone)"));
  pet(cmd->add_option("--rdzv-backend,--rdzv_backend", a->rdzv_backend,
                      "static or c10d; both mean sinew's launcher-hosted TCP store"))
      ->capture_default_str();
  pet(cmd->add_flag("--standalone", a->standalone,
                "Single node: host the store on 127.0.0.1 at a free port, with a random run id"));
  pet(cmd->add_option("--max-restarts,--max_restarts", a->max_restarts,
                  "Restart all workers up to this many times after a failure (with "
                  "--fault-tolerant: respawn a killed worker as a joiner)"))
      ->capture_default_str();
  pet(cmd->add_flag("--fault-tolerant,--fault_tolerant", a->fault_tolerant,
                    "A worker killed by a signal does not stop the others; exit 0 if the rest "
                    "exit 0 (also SINEW_RUN_FAULT_TOLERANT)"));
  pet(cmd->add_option("--monitor-interval,--monitor_interval", a->monitor_interval,
                  "Seconds between checks of the other nodes' state"))
      ->capture_default_str();
  pet(cmd->add_option("--log-dir,--log_dir", a->log_dir,
                  "Write each worker's stdout/stderr under this directory"));
  pet(cmd->add_option(
         "-t,--tee", a->tee,
         "Copy streams to the log files as well as the console: 1 stdout, 2 stderr, 3 both"));
  pet(cmd->add_option("-r,--redirects", a->redirects,
                  "Send streams only to the log files: 1 stdout, 2 stderr, 3 both"));
  pet(cmd->add_option("--local-ranks-filter,--local_ranks_filter", a->local_ranks_filter,
                  "Show only these local ranks' output on the console, e.g. 0,2"));
  pet(cmd->add_option("--master-addr,--master_addr", a->master_addr,
                  "Store host for --rdzv-backend static when no --rdzv-endpoint is given"));
  auto* port = pet(cmd->add_option("--master-port,--master_port", a->master_port,
                               "Store port for --rdzv-backend static (default 29500 with "
                               "--nnodes > 1, a free port on one node)"));
  pet(cmd->add_flag("--no-python,--no_python", a->no_python,
                    "Accepted for torchrun compatibility; PROGRAM is always executed directly"));
  cmd->add_option("--backend", a->backend,
                  "Collective backend for the workers (exported as SINEW_BACKEND)");
  cmd->add_option("--store-token", a->store_token,
                  "The job's store token (required, the same on every node, with --nnodes > 1)")
      ->envname("SINEW_STORE_TOKEN");
  cmd->add_option("command", a->command, "PROGRAM [ARGS...]: the program each worker runs");
  // Everything from PROGRAM on is the program's, options included.
  cmd->positionals_at_end();
  cmd->footer(kFooter);
  cmd->callback([cmd, a, port, &rc] {
    a->master_port_given = port->count() > 0;
    rc = run_job(make_config(*a));
  });
}

}  // namespace sinew::cli
