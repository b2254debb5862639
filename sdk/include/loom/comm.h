/* Loom SDK, ABI 2 — comm plugins: collectives and point-to-point over process groups.
 *
 * Every collective is COLLECTIVE over its group: all ranks of the group call it, in the
 * same order, with tensors of the same shape and dtype; it blocks until this rank's part
 * is done. Tensors live where the plugin can reach them (CPU memory for "mpi" and
 * "single", GPU memory for "nccl"). Processes are started by the standard launcher
 * (mpirun/srun); a comm plugin never starts processes itself. A NULL group means the
 * world. */
#ifndef LOOM_COMM_H
#define LOOM_COMM_H

#include "loom/host.h"
#include "loom/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_comm loom_comm;
typedef struct loom_comm_group loom_comm_group;

typedef enum loom_reduce_op {
  LOOM_REDUCE_SUM = 0,
  LOOM_REDUCE_MAX = 1,
  LOOM_REDUCE_MIN = 2,
  LOOM_REDUCE_AVG = 3
} loom_reduce_op;

typedef struct loom_comm_api {
  size_t struct_size;
  loom_error* (*create)(const loom_host* host, const loom_config* cfg, loom_comm** out);
  void (*destroy)(loom_comm* c); /* accepts NULL; COLLECTIVE over the world */
  int (*world_rank)(loom_comm* c);
  int (*world_size)(loom_comm* c);
  /* COLLECTIVE over the world: every rank passes the full partition of world ranks into
   * groups (`colors[r]` = group of rank r); this rank gets its own group. */
  loom_error* (*group_create)(loom_comm* c, const int* colors, loom_comm_group** out);
  void (*group_destroy)(loom_comm* c, loom_comm_group* g); /* accepts NULL */
  int (*group_rank)(loom_comm* c, loom_comm_group* g);
  int (*group_size)(loom_comm* c, loom_comm_group* g);
  loom_error* (*all_reduce)(loom_comm* c, loom_comm_group* g, DLTensor* t, loom_reduce_op op);
  /* in: group_size equal chunks along dim 0; out: this rank's reduced chunk */
  loom_error* (*reduce_scatter)(loom_comm* c, loom_comm_group* g, const DLTensor* in, DLTensor* out,
                                loom_reduce_op op);
  /* out: the ranks' `in` tensors concatenated along dim 0, in group-rank order */
  loom_error* (*all_gather)(loom_comm* c, loom_comm_group* g, const DLTensor* in, DLTensor* out);
  loom_error* (*broadcast)(loom_comm* c, loom_comm_group* g, DLTensor* t, int root);
  /* in and out: group_size chunks along dim 0; chunk j of in goes to rank j */
  loom_error* (*all_to_all)(loom_comm* c, loom_comm_group* g, const DLTensor* in, DLTensor* out);
  loom_error* (*barrier)(loom_comm* c, loom_comm_group* g);
  /* point-to-point within a group; blocking */
  loom_error* (*send)(loom_comm* c, loom_comm_group* g, const DLTensor* t, int peer, int tag);
  loom_error* (*recv)(loom_comm* c, loom_comm_group* g, DLTensor* t, int peer, int tag);
  /* --- ABI 2.0 ends here; append new slots below this line only. --- */
} loom_comm_api;
#define LOOM_COMM_API_SIZE_V2 LOOM_STRUCT_SIZE(loom_comm_api, recv)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_COMM_H */
