/* Loom SDK, ABI 2 — comm plugins: collectives and point-to-point over process groups.
 *
 * Every collective is COLLECTIVE over its group: all ranks of the group call it, in the
 * same order, with tensors of the same shape and dtype. Tensors live where the plugin can
 * reach them (CPU memory for "mpi" and "single", GPU memory for "nccl"). Processes are
 * started by the standard launcher (mpirun/srun); a comm plugin never starts processes
 * itself.
 *
 * Every call takes one loom_comm_args. Its `stream` says how the call completes:
 *  - NULL: the call blocks until this rank's part is done; its buffers may be read and
 *    reused when it returns;
 *  - a stream (the backend's, from loom.device-stream/1): the call is enqueued on it, after
 *    the work already there, and returns; work enqueued later on that stream sees the
 *    result, and the host must not touch the buffers until that stream has passed it
 *    (backend to_host does). No device-wide synchronisation. A plugin that works on host
 *    memory only (mpi, single) refuses a stream; the CPU backend's stream is NULL, so one
 *    caller serves both.
 * A comm refuses, naming the call, args that are NULL, older than its ABI (struct_size) or
 * that carry a required extension it does not know (loom/cpp/plugin.hpp's
 * ops_args_refusal). */
#ifndef LOOM_COMM_H
#define LOOM_COMM_H

#include "loom/host.h"
#include "loom/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_comm loom_comm;
typedef struct loom_comm_group loom_comm_group;
/* ABI 2.12: a collective in flight (start), completed by wait. Opaque; the plugin's. */
typedef struct loom_comm_request loom_comm_request;

/* ABI 2.12: the collectives start can run without waiting for them. ABI 2.20 adds the
 * point-to-point send (args as send takes: in, peer, tag; PAIR with the peer's recv, which
 * stays blocking): a pipeline schedule hands an activation on and computes while the peer
 * takes it. A plugin built for 2.12 to 2.19 refuses call 3; the caller then sends blocking. */
typedef enum loom_comm_call {
  LOOM_COMM_CALL_ALL_REDUCE = 0,
  LOOM_COMM_CALL_REDUCE_SCATTER = 1,
  LOOM_COMM_CALL_ALL_GATHER = 2,
  LOOM_COMM_CALL_SEND = 3
} loom_comm_call;

typedef enum loom_reduce_op {
  LOOM_REDUCE_SUM = 0,
  LOOM_REDUCE_MAX = 1,
  LOOM_REDUCE_MIN = 2,
  LOOM_REDUCE_AVG = 3
} loom_reduce_op;

/* The arguments of every collective and point-to-point call; each slot says which fields it
 * reads, and the others must be 0/NULL. Tensors are borrowed for the call (with a stream:
 * until the stream has passed the call). */
typedef struct loom_comm_args {
  size_t struct_size;
  loom_comm_group* group; /* NULL: the world */
  const DLTensor* in;     /* what this rank contributes, when it is not `out` */
  DLTensor* out;          /* the result; in place for all_reduce and broadcast */
  int32_t op;             /* a loom_reduce_op: all_reduce, reduce_scatter */
  int32_t peer;           /* broadcast: the root; send/recv: the other rank (group ranks) */
  int32_t tag;            /* send/recv: matched between the two ranks */
  void* stream;           /* NULL: blocking; else enqueue on it (see above) */
  const loom_ext* ext;    /* NULL */
} loom_comm_args;
#define LOOM_COMM_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_comm_args, ext)

/* group_create's arguments. Every rank passes the full partition of world ranks into groups;
 * this rank gets its own group. Group ranks follow world ranks. */
typedef struct loom_group_create_args {
  size_t struct_size;
  const int* colors;   /* world_size entries: colors[r] >= 0, the group of world rank r */
  const char* name;    /* what the group is for ("tensor", "data"), for messages; may be NULL */
  const loom_ext* ext; /* NULL */
} loom_group_create_args;
#define LOOM_GROUP_CREATE_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_group_create_args, ext)

/* Contract tags (common.h):
 *   create, destroy, group_create: owner, COLLECTIVE(world), blocks
 *   world_rank, world_size, group_destroy, group_rank, group_size: owner, local, blocks
 *   all_reduce, reduce_scatter, all_gather, broadcast, all_to_all, barrier, all_to_all_v:
 *      owner, COLLECTIVE(args.group), stream
 *   send, recv: owner, PAIR(args.group), stream
 *   start: owner, COLLECTIVE(args.group), starts
 *   wait: owner, local, stream
 *   test: owner, local, blocks
 *   abort: any, COLLECTIVE(world), blocks */
typedef struct loom_comm_api {
  size_t struct_size;
  loom_error* (*create)(const loom_host* host, const loom_config* cfg, loom_comm** out);
  void (*destroy)(loom_comm* c); /* accepts NULL; COLLECTIVE over the world */
  int (*world_rank)(loom_comm* c);
  int (*world_size)(loom_comm* c);
  /* *out (out; free it with group_destroy): this rank's group of args->colors. */
  loom_error* (*group_create)(loom_comm* c, const loom_group_create_args* args,
                              loom_comm_group** out);
  void (*group_destroy)(loom_comm* c, loom_comm_group* g); /* accepts NULL */
  int (*group_rank)(loom_comm* c, loom_comm_group* g);
  int (*group_size)(loom_comm* c, loom_comm_group* g);
  /* The calls, each with one loom_comm_args (fields read: group, and those listed).
   * COLLECTIVE over the group: */
  /* out(any shape) = the reduction (op) of every rank's out, in place */
  loom_error* (*all_reduce)(loom_comm* c, const loom_comm_args* args);
  /* in: group_size equal chunks along dim 0; out: this rank's reduced chunk (op) */
  loom_error* (*reduce_scatter)(loom_comm* c, const loom_comm_args* args);
  /* out: the ranks' `in` tensors concatenated along dim 0, in group-rank order */
  loom_error* (*all_gather)(loom_comm* c, const loom_comm_args* args);
  /* out = root's out, in place (peer = the root) */
  loom_error* (*broadcast)(loom_comm* c, const loom_comm_args* args);
  /* in and out: group_size chunks along dim 0; chunk j of in goes to rank j */
  loom_error* (*all_to_all)(loom_comm* c, const loom_comm_args* args);
  /* returns (or, with a stream, lets the stream go on) once every rank has entered it */
  loom_error* (*barrier)(loom_comm* c, const loom_comm_args* args);
  /* Point-to-point within a group: send `in` to peer, receive into `out` from peer. A
   * message matches a recv of the same peer and tag; a blocking send may wait for its recv,
   * so order the calls (even ranks send first, say) so that no ring of sends waits forever. */
  loom_error* (*send)(loom_comm* c, const loom_comm_args* args);
  loom_error* (*recv)(loom_comm* c, const loom_comm_args* args);
  /* --- ABI 2.0 ends here; append new slots below this line only. --- */
  /* ABI 2.5: all_to_all of uneven chunks (a mixture of experts' token dispatch). in holds
   * send_counts[j] rows (extents of dim 0) for group rank j, back to back in rank order; out
   * receives recv_counts[j] rows from rank j, in rank order. The counts are host memory,
   * group_size entries each; rank i's send_counts[j] must equal rank j's recv_counts[i], and
   * the rows' other extents are the same on every rank. in and out may not overlap. */
  loom_error* (*all_to_all_v)(loom_comm* c, const loom_comm_args* args, const int64_t* send_counts,
                              const int64_t* recv_counts);
  /* --- ABI 2.5 ends here; append new slots below this line only. --- */
  /* ABI 2.12: non-blocking collectives, so that communication overlaps compute (a gradient
   * bucket reduced while the backward pass goes on). start begins `call` (a loom_comm_call)
   * with the args that call takes, and returns at once with *out, the request. Every rank of
   * the group starts the group's calls, started or blocking, in one order. Until wait
   * returns, the tensors belong to the call: the caller neither reads nor writes them.
   *  - args.stream NULL: the call progresses in the background or inside this comm's later
   *    calls (MPI progresses a non-blocking collective inside its calls: test drives it);
   *  - a stream: the call runs after the work already on that stream, beside the work
   *    enqueued on it later (on a stream of the plugin's own).
   * A plugin without a way to run a call in the background may finish it inside start. */
  loom_error* (*start)(loom_comm* c, int32_t call, const loom_comm_args* args,
                       loom_comm_request** out);
  /* Completes and frees a request; every request is waited once, also after an error. Started
   * without a stream: returns when this rank's part is done. With one: work enqueued on that
   * stream after wait sees the result, and wait returns at once. */
  loom_error* (*wait)(loom_comm* c, loom_comm_request* req);
  /* *done = 1 when the call has completed (wait will not block), else 0; never frees req.
   * Drives the call's progress where the plugin needs that (MPI). */
  loom_error* (*test)(loom_comm* c, loom_comm_request* req, int* done);
  /* --- ABI 2.12 ends here; append new slots below this line only. --- */
  /* ABI 2.14: ends every rank of the job now with exit code `code` (comm/mpi: MPI_Abort).
   * The host calls it when this rank fails while others may be waiting for it in a
   * collective, after printing its error, instead of destroy (which is collective and
   * would wait for them forever). Never returns. NULL: the host ends this rank alone and
   * leaves the rest to the launcher. */
  void (*abort)(loom_comm* c, int code);
  /* --- ABI 2.14 ends here; append new slots below this line only. --- */
} loom_comm_api;
#define LOOM_COMM_API_SIZE_V2 LOOM_STRUCT_SIZE(loom_comm_api, recv)
#define LOOM_COMM_API_SIZE_V2_5 LOOM_STRUCT_SIZE(loom_comm_api, all_to_all_v)
#define LOOM_COMM_API_SIZE_V2_12 LOOM_STRUCT_SIZE(loom_comm_api, test)
#define LOOM_COMM_API_SIZE_V2_14 LOOM_STRUCT_SIZE(loom_comm_api, abort)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_COMM_H */
