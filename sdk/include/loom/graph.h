/* Loom SDK, ABI 2 — loom.graph/1 (ABI 2.31): the device work of a piece of host code, recorded
 * once and replayed as one launch (CUDA graphs: PyTorch's torch.cuda.graph, Megatron's
 * --cuda-graph-impl). A training step of a few thousand kernels then costs the host one call
 * instead of one per kernel, and nothing of the host's pace shows between kernels.
 *
 * The recorded code is a callback, `body`, that calls the backend's ops (and plugins' own
 * device work on loom.device-stream/1's stream) as it would eagerly. The rules while it runs
 * under capture, the same on every backend that lists the id:
 *  - the work must not depend on host values that change between launches: what a launch
 *    must see anew (a batch's token ids, the learning rate) goes into device tensors the
 *    caller writes before each launch (from_host, outside the body);
 *  - nothing that makes the host wait or copies to or from host memory: to_host, from_host,
 *    synchronize, sum_squares without loom.sum-squares-total/1, and loom.device-stream/1's
 *    event_sync, timer_record, timer_elapsed, read_start and read_finish are refused with an
 *    error naming the call and this extension; a capture cannot nest;
 *  - tensors allocated inside the body may be freed inside it: their memory then belongs to
 *    the graph until graph_free, so no later allocation outside it can take memory a replay
 *    still writes. Every tensor the recorded work touches, whoever allocated it, must stay
 *    allocated until graph_free.
 * A backend with real graphs (backend/cuda) runs the body once, at capture, enqueuing
 * nothing: a launch replays what the body enqueued then. One without (backend/cpu) keeps the
 * body and runs it at each launch under the same rules, so that a host which obeys them gets
 * the same numbers either way and one which breaks them is told so on any backend. So a body
 * must expect to run once or many times, and to have its work done only by launches; an
 * error of the body is answered at capture or at the first launch.
 *
 * Reached through the backend table's get_ext; the backend lists the id in its descriptor's
 * capabilities. */
#ifndef LOOM_GRAPH_H
#define LOOM_GRAPH_H

#include "loom/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_backend loom_backend; /* backend.h's opaque instance */

#define LOOM_EXT_GRAPH "loom.graph/1"

/* What to record: body(user) enqueues the work. A non-NULL error from it ends the capture
 * (capture or launch returns that error; no graph is kept). */
/* Contract tags (common.h):
 *   body: owner, local, stream */
typedef struct loom_graph_capture_args {
  size_t struct_size;
  loom_error* (*body)(void* user);
  void* user;
  const loom_ext* ext; /* NULL */
} loom_graph_capture_args;
#define LOOM_GRAPH_CAPTURE_ARGS_SIZE_V2_31 LOOM_STRUCT_SIZE(loom_graph_capture_args, ext)

/* Contract tags (common.h):
 *   capture, graph_free: owner, local, blocks
 *   launch: owner, local, stream */
typedef struct loom_graph_api {
  loom_ext base; /* id LOOM_EXT_GRAPH; base.struct_size = sizeof the whole table */
  /* *graph (out; free it with graph_free): the work body enqueues, not yet done. */
  loom_error* (*capture)(loom_backend* be, const loom_graph_capture_args* args, void** graph);
  /* Enqueues the recorded work once more on the instance's stream; the host does not wait. */
  loom_error* (*launch)(loom_backend* be, void* graph);
  /* Frees the graph once the work enqueued before this call is done (accepts NULL); its
   * memory (above) goes back to the instance. */
  void (*graph_free)(loom_backend* be, void* graph);
  /* --- loom.graph/1 ends here; append new slots below this line only. --- */
} loom_graph_api;
#define LOOM_GRAPH_API_SIZE_V1 LOOM_STRUCT_SIZE(loom_graph_api, graph_free)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_GRAPH_H */
