// backend/cuda: loom.graph/1 (graph.h) as CUDA graphs. capture runs the body once with the
// instance's stream in capture mode (thread-local: other threads' CUDA calls, a checkpoint
// writer's, are not refused), so the body's kernels, library calls (cuBLASLt, cuDNN) and
// copies are recorded, not run; the graph is instantiated once and each launch replays it
// with one call. The caching allocator keeps what the body frees for the graph (allocator.hpp),
// and the calls that wait for the device or copy host memory are refused while capturing
// (refuse_in_capture), so that a body which breaks the rules gets a message naming the call
// rather than CUDA's "operation not permitted when stream is capturing".
#include <cuda_runtime.h>

#include <string>

#include "allocator.hpp"
#include "cuda_backend.hpp"

namespace loom_cuda {
namespace {

struct Graph {
  cudaGraphExec_t exec = nullptr;
  uint64_t pool = 0;  // the allocator's pool of the capture
};

// Records the body into *graph; the body's own error wins over what its failure did to the
// capture.
loom_error* graph_capture(loom_backend* be, const loom_graph_capture_args* a,
                          void** graph) noexcept {
  loom_error* body_error = nullptr;
  loom_error* err = run_op(be, "capture", [&](loom_backend& b) {
    const std::string why = loom::graph_capture_refusal(a, graph);
    if (!why.empty()) fail("capture", why);
    if (b.capturing) fail("capture", loom::graph_nesting_refusal("capture"));
    *graph = nullptr;
    LOOM_CUDA_CHECK("capture", cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeThreadLocal));
    const uint64_t pool = b.alloc->begin_pool();
    b.capturing = true;
    body_error = a->body(a->user);
    b.capturing = false;
    b.alloc->end_pool();
    cudaGraph_t g = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(b.stream, &g);
    if (body_error != nullptr || ended != cudaSuccess) {
      if (g != nullptr) cudaGraphDestroy(g);
      (void)cudaGetLastError();
      b.alloc->release_pool(pool);
      if (body_error != nullptr) return;
      fail("capture",
           std::string("a call in the body broke the capture (cudaStreamEndCapture: ") +
               cudaGetErrorString(ended) + "): it waited for the device or used another stream " +
               "without an event from this one",
           LOOM_ERR_INTERNAL);
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t made = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    if (made != cudaSuccess) b.alloc->release_pool(pool);
    LOOM_CUDA_CHECK("capture", made);
    *graph = new Graph{exec, pool};
  });
  if (body_error == nullptr) return err;
  if (err != nullptr) be->host->error_free(err);
  return body_error;
}

loom_error* graph_launch(loom_backend* be, void* graph) noexcept {
  return run_op(be, "launch", [&](loom_backend& b) {
    if (graph == nullptr) fail("launch", "graph is NULL");
    if (b.capturing) fail("launch", loom::graph_nesting_refusal("launch"));
    LOOM_CUDA_CHECK("launch", cudaGraphLaunch(static_cast<Graph*>(graph)->exec, b.stream));
    g_counters.launches.fetch_add(1, std::memory_order_relaxed);  // one call, however many nodes
  });
}

// Waits for the replays enqueued so far: only then may the graph and its pool's memory go.
void graph_free(loom_backend* be, void* graph) noexcept {
  if (be == nullptr || graph == nullptr) return;
  auto* g = static_cast<Graph*>(graph);
  (void)cudaSetDevice(be->device);
  (void)stream_sync(be->stream);
  (void)cudaGraphExecDestroy(g->exec);
  be->alloc->release_pool(g->pool);
  delete g;
}

constexpr loom_graph_api kGraph = {
    {sizeof(loom_graph_api), LOOM_EXT_GRAPH, 0, nullptr}, graph_capture, graph_launch, graph_free};

}  // namespace

const loom_graph_api* graph_table() noexcept { return &kGraph; }

}  // namespace loom_cuda
