// What the mpi backend's revoke and reconfigure need beyond one group's
// communicator. Internal.
//
// New communicators are built with MPI_Comm_create_group on a private
// duplicate of MPI_COMM_WORLD: it is collective over the new members only,
// so excluded or dead ranks take no part, and no user op ever runs on it, so
// a collective left pending by a timeout or abort cannot get in its way.
//
// MPI_Comm_create_group blocks and cannot be interrupted, so it is only
// entered after a non-blocking rendezvous (Isend/Irecv polled under the
// deadline) in which every member has shown it is about to enter it with the
// same member list. What remains unbounded (MPI cannot interrupt it, and
// OpenMPI 4.1 has no ULFM): a member that dies, or gives up at its deadline,
// in the instant between finishing the rendezvous and entering
// MPI_Comm_create_group leaves the others blocked in it.
#pragma once

#include <mpi.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "sinew/core/deadline.h"

namespace sinew::dist::mpi {

// Shared by a world group and every group made from it (subgroups and
// reconfigured groups): the job's processes and the communicator new
// groups are built from.
class Lineage {
 public:
  // `base` is a duplicate of MPI_COMM_WORLD (owned from now on); pids[w] and
  // hosts[w] describe world rank w.
  Lineage(MPI_Comm base, std::vector<pid_t> pids, const std::vector<uint64_t>& hosts);
  ~Lineage();
  Lineage(const Lineage&) = delete;
  Lineage& operator=(const Lineage&) = delete;

  MPI_Comm base() const { return base_; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return static_cast<int>(pids_.size()); }
  pid_t pid(int world) const { return pids_[world]; }
  // True when world rank w runs on this host and its process is gone. Ranks
  // on other hosts are never reported: without ULFM nothing tells their death.
  bool dead(int world) const;
  // False when this process already used `uuid` (for any group of this lineage).
  bool claim(const std::string& uuid);
  // Keeps a send buffer alive that MPI may still read after its request was freed.
  void park(std::shared_ptr<std::vector<uint64_t>> buffer);

 private:
  MPI_Comm base_;
  int world_rank_ = -1;
  std::vector<pid_t> pids_;
  std::vector<bool> local_;
  std::mutex mu_;
  std::set<std::string> used_;
  std::vector<std::shared_ptr<std::vector<uint64_t>>> parked_;
};

// Stable hash (FNV-1a) for tags and rendezvous payloads.
uint64_t hash_of(const std::string& s, uint64_t h = 1469598103934665603ull);

// Tags on the base communicator: reconfigure rendezvous use the lower half
// (even: the rendezvous, odd: MPI_Comm_create_group), the failure agreement
// the upper half.
int rendezvous_tag(uint64_t seed);
int agreement_tag(uint64_t seed);

struct Exchanged {
  std::vector<std::vector<uint64_t>> got;  // got[i] from peers[i]
  std::vector<int> dead;                   // world ranks that died before sending (got is then partial)
};

// Sends `payload` to every world rank in `peers` and receives one payload of
// the same length from each, on the base communicator with `tag`. Stops
// early when an awaited peer on this host is dead (Exchanged::dead). Throws
// TimeoutError at the deadline naming the ranks it still waited for.
Exchanged exchange(Lineage& lineage, const std::vector<int>& peers, int tag, const std::vector<uint64_t>& payload,
                   Deadline deadline, const std::string& what);

// Builds the communicator of `members` (world ranks; the new rank is the
// index) after a rendezvous that checks every member passes the same
// `seed` and list. Throws InvalidArgument when members disagree on them,
// PeerLostError (ranks: indices in `members`) when one died, TimeoutError
// at the deadline.
MPI_Comm build_comm(Lineage& lineage, const std::vector<int>& members, uint64_t seed, Deadline deadline,
                    const std::string& what);

}  // namespace sinew::dist::mpi
