// The world of a test run under mpirun: a test host with backend/cpu and comm/mpi loaded, and
// this rank's place in it. MPI is initialised once per process, so a test keeps one for the
// whole process (a function-local static).
#pragma once

#include "test_host.hpp"

namespace loomtest {

struct MpiWorld {
  TestHost host;
  loom_comm_ref comm;
  int rank = 0, size = 1;
  MpiWorld() {
    host.load_backend("cpu");
    comm = host.load_comm("mpi");
    rank = comm.api->world_rank(comm.self);
    size = comm.api->world_size(comm.self);
  }
};

}  // namespace loomtest
