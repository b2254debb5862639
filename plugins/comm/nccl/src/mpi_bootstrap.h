/* comm/nccl's MPI bootstrap, a C table between loom-comm-nccl.so and the helper library
 * nccl-bootstrap/libloom-nccl-mpi.so, which alone links MPI. The plugin dlopens the helper
 * only when an MPI launcher started the process, so comm/nccl loads and runs at world size 1
 * on a machine without MPI (a GPU box that got Loom as a bundle, say).
 * Internal to comm/nccl: built with it, never installed as an SDK header. C, so that no C++
 * exception or type crosses the dlopen boundary: a call returns 0, or non-zero with a
 * one-line message in `err` (LOOM_NCCL_MPI_ERR_LEN bytes). */
#ifndef LOOM_COMM_NCCL_MPI_BOOTSTRAP_H
#define LOOM_COMM_NCCL_MPI_BOOTSTRAP_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_NCCL_MPI_ERR_LEN 512
#define LOOM_NCCL_MPI_API_SYMBOL "loom_nccl_mpi_bootstrap"

typedef struct loom_nccl_mpi_group loom_nccl_mpi_group; /* one MPI communicator */

typedef struct loom_nccl_mpi_api {
  size_t struct_size;
  /* MPI_Init_thread(FUNNELED) unless MPI is initialised already; refuses after finalise. */
  int (*init)(char* err);
  /* Finalises MPI if init started it and no group is left. */
  void (*finalize_if_ours)(void);
  /* A duplicate of MPI_COMM_WORLD. */
  int (*world)(loom_nccl_mpi_group** out, char* err);
  /* MPI_Comm_split(g, color, key). Collective over g. */
  int (*split)(loom_nccl_mpi_group* g, int color, int key, loom_nccl_mpi_group** out, char* err);
  void (*free_group)(loom_nccl_mpi_group* g);
  int (*rank)(const loom_nccl_mpi_group* g);
  int (*size)(const loom_nccl_mpi_group* g);
  /* The rank among the processes of g that share this node's memory. */
  int (*local_rank)(loom_nccl_mpi_group* g, int* out, char* err);
  int (*broadcast)(loom_nccl_mpi_group* g, void* data, size_t bytes, int root, char* err);
  /* *value becomes the minimum of every rank's *value. */
  int (*min_int)(loom_nccl_mpi_group* g, int* value, char* err);
  int (*send)(loom_nccl_mpi_group* g, const void* data, size_t bytes, int peer, char* err);
  int (*recv)(loom_nccl_mpi_group* g, void* data, size_t bytes, int peer, char* err);
} loom_nccl_mpi_api;

typedef const loom_nccl_mpi_api* (*loom_nccl_mpi_api_fn)(void);

#ifdef __cplusplus
}
#endif

#endif
