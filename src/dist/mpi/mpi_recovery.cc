#include "mpi_recovery.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "dist/process_identity.h"
#include "mpi_runtime.h"
#include "sinew/core/error.h"

namespace sinew::dist::mpi {
namespace {

// How often a wait checks whether the peers it waits for still live.
constexpr auto kLivenessPeriod = std::chrono::milliseconds(20);

// Needs the MPI lock. A cancelled receive is waited for (that is local), so
// MPI never writes into the buffer after it is gone.
void cancel_recvs(std::vector<MPI_Request>& recvs) {
  for (auto& r : recvs) {
    if (r == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
}

// Needs the MPI lock. Sends still in flight (to a dead or late peer) are
// freed; their buffer stays with the lineage.
void release_sends(Lineage& lineage, std::vector<MPI_Request>& sends, std::shared_ptr<std::vector<uint64_t>> buf) {
  int done = 0;
  MPI_Testall(static_cast<int>(sends.size()), sends.data(), &done, MPI_STATUSES_IGNORE);
  if (done) return;
  for (auto& s : sends)
    if (s != MPI_REQUEST_NULL) MPI_Request_free(&s);
  lineage.park(std::move(buf));
}

}  // namespace

Lineage::Lineage(MPI_Comm base, std::vector<pid_t> pids, const std::vector<uint64_t>& hosts)
    : base_(base), pids_(std::move(pids)) {
  {
    Lock lock;
    check(MPI_Comm_rank(base_, &world_rank_), "MPI_Comm_rank");
  }
  for (const uint64_t h : hosts) local_.push_back(h == hosts[world_rank_]);
}

Lineage::~Lineage() {
  try {
    Lock lock;
    MPI_Comm_free(&base_);
  } catch (const Error&) {
    // MPI is finalized: it already released the communicator.
  }
}

bool Lineage::dead(int world) const {
  return world != world_rank_ && local_[world] && !process_alive(pids_[world]);
}

bool Lineage::claim(const std::string& uuid) {
  std::lock_guard<std::mutex> g(mu_);
  return used_.insert(uuid).second;
}

void Lineage::park(std::shared_ptr<std::vector<uint64_t>> buffer) {
  std::lock_guard<std::mutex> g(mu_);
  parked_.push_back(std::move(buffer));
}

uint64_t hash_of(const std::string& s, uint64_t h) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

int rendezvous_tag(uint64_t seed) {
  const auto quarter = static_cast<uint64_t>(tag_upper_bound()) / 4 + 1;
  return static_cast<int>(seed % quarter) * 2;
}

int agreement_tag(uint64_t seed) {
  const auto half = static_cast<uint64_t>(tag_upper_bound()) / 2 + 1;
  return static_cast<int>(half + seed % (static_cast<uint64_t>(tag_upper_bound()) - half + 1));
}

Exchanged exchange(Lineage& lineage, const std::vector<int>& peers, int tag, const std::vector<uint64_t>& payload,
                   Deadline deadline, const std::string& what) {
  const int n = static_cast<int>(payload.size());
  auto out = std::make_shared<std::vector<uint64_t>>(payload);
  Exchanged x;
  x.got.assign(peers.size(), std::vector<uint64_t>(payload.size()));
  std::vector<MPI_Request> recvs(peers.size(), MPI_REQUEST_NULL), sends(peers.size(), MPI_REQUEST_NULL);
  {
    Lock lock;
    for (size_t i = 0; i < peers.size(); ++i)
      check(MPI_Irecv(x.got[i].data(), n, MPI_UINT64_T, peers[i], tag, lineage.base(), &recvs[i]), what);
    for (size_t i = 0; i < peers.size(); ++i)
      check(MPI_Isend(out->data(), n, MPI_UINT64_T, peers[i], tag, lineage.base(), &sends[i]), what);
  }
  auto missing = [&] {
    std::vector<int> m;
    for (size_t i = 0; i < peers.size(); ++i)
      if (recvs[i] != MPI_REQUEST_NULL) m.push_back(peers[i]);
    return m;
  };
  // One pass of progress; true when every receive is done.
  auto progress = [&] {
    Lock lock;
    for (auto& r : recvs) {
      if (r == MPI_REQUEST_NULL) continue;
      int flag = 0;
      check(MPI_Test(&r, &flag, MPI_STATUS_IGNORE), what);
    }
    return missing().empty();
  };
  auto give_up = [&] {
    Lock lock;
    cancel_recvs(recvs);
    release_sends(lineage, sends, out);
  };
  Backoff backoff;
  auto next_check = Clock::now() + kLivenessPeriod;
  while (!progress()) {
    if (deadline.expired()) {
      const auto waited_for = missing();
      give_up();
      throw TimeoutError(fmt::format("{}: world rank(s) {} did not arrive before the deadline", what, waited_for));
    }
    if (Clock::now() >= next_check) {
      next_check = Clock::now() + kLivenessPeriod;
      std::vector<int> dead;
      for (int w : missing())
        if (lineage.dead(w)) dead.push_back(w);
      // What a peer sent before it died is still delivered: look once more.
      if (!dead.empty() && !progress()) {
        for (int w : missing())
          if (lineage.dead(w)) x.dead.push_back(w);
        if (!x.dead.empty()) {
          give_up();
          return x;
        }
      }
    }
    backoff.pause();
  }
  Lock lock;
  release_sends(lineage, sends, out);
  return x;
}

MPI_Comm build_comm(Lineage& lineage, const std::vector<int>& members, uint64_t seed, Deadline deadline,
                    const std::string& what) {
  uint64_t list = hash_of(fmt::format("{}", members), seed);
  std::vector<int> peers;
  for (int w : members)
    if (w != lineage.world_rank()) peers.push_back(w);
  const int tag = rendezvous_tag(seed);
  auto x = exchange(lineage, peers, tag, {seed, list}, deadline, what);
  if (!x.dead.empty()) {
    std::vector<int> lost;
    for (int w : x.dead)
      lost.push_back(static_cast<int>(std::find(members.begin(), members.end(), w) - members.begin()));
    throw PeerLostError(fmt::format("{}: new rank(s) {} (world ranks {}) died before the communicator was built",
                                    what, lost, x.dead),
                        lost);
  }
  for (size_t i = 0; i < peers.size(); ++i) {
    if (x.got[i] != std::vector<uint64_t>{seed, list})
      throw InvalidArgument::make("handles", fmt::format("{} members (world ranks {})", members.size(), members),
                                  fmt::format("the same uuid and handle list on every member (world rank {} "
                                              "passed another; every member must get the same list)",
                                              peers[i]));
  }
  Lock lock;
  MPI_Group base = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
  MPI_Comm comm = MPI_COMM_NULL;
  check(MPI_Comm_group(lineage.base(), &base), "MPI_Comm_group");
  int rc = MPI_Group_incl(base, static_cast<int>(members.size()), members.data(), &group);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_create_group(lineage.base(), group, tag + 1, &comm);
  if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
  MPI_Group_free(&base);
  check(rc, fmt::format("{}: MPI_Comm_create_group over world ranks {}", what, members));
  check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  return comm;
}

}  // namespace sinew::dist::mpi
