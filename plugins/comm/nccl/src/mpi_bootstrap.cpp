// The MPI half of comm/nccl's bootstrap (see mpi_bootstrap.h): world and split
// communicators, rank 0's ncclUniqueId broadcast, the agreement on devices, and the headers
// that go ahead of NCCL's untagged point-to-point messages. Built as its own library so that
// comm/nccl itself never links MPI.
#include "mpi_bootstrap.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

struct loom_nccl_mpi_group {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
};

namespace {

bool we_initialised = false;  // MPI_Init_thread was ours: finalize_if_ours may finalise
int live_groups = 0;

// Writes "CALL failed: MPI's text" into err and returns non-zero, or returns 0 on success.
int check(int code, const char* call, char* err) {
  if (code == MPI_SUCCESS) return 0;
  char text[MPI_MAX_ERROR_STRING + 1] = {0};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) std::strcpy(text, "unknown MPI error");
  std::snprintf(err, LOOM_NCCL_MPI_ERR_LEN, "%s failed: %s", call, text);
  return 1;
}

// Takes ownership of comm: a group that answers rank and size, or comm freed and an error.
int adopt(MPI_Comm comm, loom_nccl_mpi_group** out, char* err) {
  auto* g = new loom_nccl_mpi_group;
  g->comm = comm;
  ++live_groups;
  int rc = check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", err);
  if (rc == 0) rc = check(MPI_Comm_rank(comm, &g->rank), "MPI_Comm_rank", err);
  if (rc == 0) rc = check(MPI_Comm_size(comm, &g->size), "MPI_Comm_size", err);
  if (rc != 0) {
    MPI_Comm_free(&g->comm);
    --live_groups;
    delete g;
    return rc;
  }
  *out = g;
  return 0;
}

int init(char* err) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    std::snprintf(err, LOOM_NCCL_MPI_ERR_LEN,
                  "MPI is already finalised in this process and cannot be initialised again "
                  "(keep one comm/nccl instance for the whole run)");
    return 1;
  }
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised) return 0;
  // FUNNELED: every call comes from the thread that created the comm.
  int provided = MPI_THREAD_SINGLE;
  if (check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread",
            err) != 0)
    return 1;
  we_initialised = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return 0;
}

void finalize_if_ours() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (live_groups == 0 && we_initialised && !finalized) {
    MPI_Finalize();
    we_initialised = false;
  }
}

int world(loom_nccl_mpi_group** out, char* err) {
  MPI_Comm comm = MPI_COMM_NULL;
  if (check(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup", err) != 0) return 1;
  return adopt(comm, out, err);
}

int split(loom_nccl_mpi_group* g, int color, int key, loom_nccl_mpi_group** out, char* err) {
  MPI_Comm comm = MPI_COMM_NULL;
  if (check(MPI_Comm_split(g->comm, color, key, &comm), "MPI_Comm_split", err) != 0) return 1;
  return adopt(comm, out, err);
}

void free_group(loom_nccl_mpi_group* g) {
  if (g == nullptr) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g->comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&g->comm);
  --live_groups;
  delete g;
}

int rank(const loom_nccl_mpi_group* g) { return g->rank; }
int size(const loom_nccl_mpi_group* g) { return g->size; }

int local_rank(loom_nccl_mpi_group* g, int* out, char* err) {
  MPI_Comm node = MPI_COMM_NULL;
  if (check(MPI_Comm_split_type(g->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type", err) != 0)
    return 1;
  MPI_Comm_rank(node, out);
  MPI_Comm_free(&node);
  return 0;
}

int broadcast(loom_nccl_mpi_group* g, void* data, size_t bytes, int root, char* err) {
  return check(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, g->comm), "MPI_Bcast", err);
}

int min_int(loom_nccl_mpi_group* g, int* value, char* err) {
  return check(MPI_Allreduce(MPI_IN_PLACE, value, 1, MPI_INT, MPI_MIN, g->comm), "MPI_Allreduce",
               err);
}

int send(loom_nccl_mpi_group* g, const void* data, size_t bytes, int peer, char* err) {
  return check(MPI_Send(data, static_cast<int>(bytes), MPI_BYTE, peer, 0, g->comm), "MPI_Send",
               err);
}

int recv(loom_nccl_mpi_group* g, void* data, size_t bytes, int peer, char* err) {
  return check(
      MPI_Recv(data, static_cast<int>(bytes), MPI_BYTE, peer, 0, g->comm, MPI_STATUS_IGNORE),
      "MPI_Recv", err);
}

const loom_nccl_mpi_api kApi = {sizeof(loom_nccl_mpi_api),
                                init,
                                finalize_if_ours,
                                world,
                                split,
                                free_group,
                                rank,
                                size,
                                local_rank,
                                broadcast,
                                min_int,
                                send,
                                recv};

}  // namespace

extern "C" __attribute__((visibility("default"))) const loom_nccl_mpi_api*
loom_nccl_mpi_bootstrap() {
  return &kApi;
}
