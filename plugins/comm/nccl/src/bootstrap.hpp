// How the ranks of a comm/nccl world find each other before NCCL can: who they are, how
// rank 0's ncclUniqueId reaches the others, how a group is split off, and the small headers
// sent ahead of NCCL's untagged point-to-point messages.
//  - Over MPI when an MPI launcher (mpirun, srun) started the process, through the helper
//    library nccl-bootstrap/libloom-nccl-mpi.so beside the plugin, which alone links MPI.
//  - Otherwise one rank on its own: world size 1, its own unique id, no MPI at all. That is
//    how comm/nccl runs on a machine that has no MPI.
//  - LOOM_NCCL_BOOTSTRAP=mpi|single overrides the choice.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace comm_nccl {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The rank among the processes on this node (the launcher's variable when it sets one).
  virtual int local_rank(const char* fn) = 0;
  // Rank 0's `bytes` at `data` on every rank. Collective.
  virtual void broadcast(void* data, size_t bytes, const char* fn) = 0;
  // The minimum of every rank's `value`. Collective.
  virtual int min(int value, const char* fn) = 0;
  // The ranks with the same `color`, in world order. Collective.
  virtual std::unique_ptr<Bootstrap> split(int color, const char* fn) = 0;
  virtual void send(const void* data, size_t bytes, int peer, const char* fn) = 0;
  virtual void recv(void* data, size_t bytes, int peer, const char* fn) = 0;
};

// The world's bootstrap, chosen as above; `how` says which and why, for the log.
std::unique_ptr<Bootstrap> world_bootstrap(std::string& how);
// After the last world is gone: finalises MPI if the bootstrap initialised it.
void bootstrap_release();

}  // namespace comm_nccl
