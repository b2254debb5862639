// comm/nccl: collectives and point-to-point over NCCL, on compact tensors in GPU memory
// (kDLCUDA, on this rank's device).
//  - One GPU per rank: the device is the local rank (OMPI_COMM_WORLD_LOCAL_RANK,
//    MPI_LOCALRANKID, SLURM_LOCALID, else the rank among the processes sharing this node's
//    memory) modulo the visible device count. create makes it the calling thread's current
//    device, so a GPU backend created afterwards finds it; every call restores the caller's
//    current device when it returns.
//  - MPI is only the bootstrap, and only under an MPI launcher (bootstrap.hpp): create
//    initialises it like comm/mpi does (and the last destroy finalises it if it was ours),
//    rank 0 of each group makes an ncclUniqueId and MPI_Bcast hands it to the others.
//    group_create is MPI_Comm_split(world, colors[rank], key = world rank), so group ranks
//    follow world order, plus one NCCL communicator per group. A NULL group means the world.
//    Started without a launcher, the world is this one rank and MPI is never loaded.
//  - Given a stream (loom_comm_args.stream: the backend's, from loom.device-stream/1), a call
//    is enqueued on it, after the work already there, and returns at once: no wait, no device
//    synchronisation. Scratch memory is then stream-ordered (cudaMallocAsync/cudaFreeAsync).
//  - Without one, a call runs on the communicator's own CUDA stream, created blocking, so
//    work the caller queued on the legacy default stream runs first; work on other streams
//    must be finished (or synchronised) by the caller. It blocks until that stream is done,
//    watching ncclCommGetAsyncError meanwhile: a communicator that fails asynchronously is
//    aborted and every later call on it says so instead of hanging. (An enqueued call's
//    asynchronous error surfaces at the group's next blocking call.)
//  - ABI 2.12's start runs all_reduce, reduce_scatter and all_gather on a stream of the
//    group's own that first waits for the caller's stream, and returns; wait hands the
//    result back to the caller's stream with an event (or blocks on it without one).
//  - AVG is ncclAvg, on floating-point tensors only: NCCL's integer average (a post-division)
//    is defined for unsigned types alone, so integer AVG is refused rather than rounded one
//    way here and another in comm/mpi.
//  - send/recv: NCCL has no tags; messages between two ranks of a group match in call
//    order. A 16-byte header (size, tag) over the bootstrap goes ahead of each message so the
//    receiver can name a size or tag mismatch (draining the message, so the sender is not left
//    waiting) rather than corrupt memory. A blocking send waits for the matching recv: order the
//    calls (e.g. even ranks send first) so no ring of sends waits forever.
//  - Argument errors (dtype, shape, device, op, root, peer) are found before any NCCL call;
//    they are the same on every rank when every rank passes matching tensors, so no rank is
//    left waiting in a collective the others skipped.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "bootstrap.hpp"
#include "loom/comm.h"
#include "loom/cpp/comm_args.hpp"
#include "loom/cpp/comm_plugin.hpp"
#include "loom/cpp/cuda_device.hpp"
#include "loom/cpp/plugin.hpp"
#include "nccl_support.hpp"

using comm_nccl::DeviceBuffer;
using comm_nccl::DeviceGuard;

// One process group: its bootstrap (ranks, unique id, p2p headers) and its NCCL
// communicator with the stream its work runs on. The world is one too.
struct loom_comm_group {
  std::unique_ptr<comm_nccl::Bootstrap> boot;
  ncclComm_t nccl = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;
  int rank = 0;
  int size = 1;
  std::unique_ptr<DeviceBuffer> flag;  // barrier's all-reduced integer
  std::string aborted;                 // why NCCL was aborted; empty while usable
  cudaStream_t side = nullptr;         // started calls run here (ABI 2.12), made on first use

  ~loom_comm_group() {
    DeviceGuard on(device, false);
    if (nccl != nullptr) ncclCommDestroy(nccl);  // every call already waited: nothing pending
    flag.reset();
    if (stream != nullptr) cudaStreamDestroy(stream);
    if (side != nullptr) cudaStreamDestroy(side);
  }
};

namespace {

using namespace comm_nccl;

// Takes the group's bootstrap and makes its NCCL communicator over its ranks. COLLECTIVE
// over the bootstrap's ranks.
std::unique_ptr<loom_comm_group> make_group(std::unique_ptr<Bootstrap> bootstrap, int device,
                                            const char* fn) {
  auto g = std::make_unique<loom_comm_group>();
  g->boot = std::move(bootstrap);
  g->device = device;
  g->rank = g->boot->rank();
  g->size = g->boot->size();
  DeviceGuard on(device);
  // Rank 0's result travels with the id, so when ncclGetUniqueId fails every rank says so
  // instead of the others waiting in ncclCommInitRank for a root that never comes.
  struct {
    ncclResult_t made;
    ncclUniqueId id;
  } boot{ncclSuccess, {}};
  if (g->rank == 0) boot.made = ncclGetUniqueId(&boot.id);
  g->boot->broadcast(&boot, sizeof boot, fn);
  nccl_check(boot.made, fn, "ncclGetUniqueId on group rank 0");
  nccl_check(ncclCommInitRank(&g->nccl, g->size, boot.id, g->rank), fn, "ncclCommInitRank");
  cuda_check(cudaStreamCreate(&g->stream), fn, "cudaStreamCreate");
  g->flag = std::make_unique<DeviceBuffer>(sizeof(int32_t), fn);
  cuda_check(cudaMemset(g->flag->get(), 0, sizeof(int32_t)), fn, "cudaMemset");
  return g;
}

// Blocks until `query` (a cudaStreamQuery or cudaEventQuery of the group's work) says done,
// failing (and aborting the communicator) when NCCL reports an asynchronous error, e.g. a
// peer that died.
template <class Query>
void wait_until(loom_comm_group& g, const char* fn, Query&& query) {
  for (;;) {
    const cudaError_t e = query();
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) cuda_check(e, fn, "cudaStreamQuery");
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(g.nccl, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      const char* last = ncclGetLastError(g.nccl);
      g.aborted =
          std::string(ncclGetErrorString(async)) + (last && *last ? ": " : "") + (last ? last : "");
      ncclCommAbort(g.nccl);
      g.nccl = nullptr;
      fail(LOOM_ERR_INTERNAL, fn, "NCCL failed asynchronously (" + g.aborted + ")");
    }
    std::this_thread::yield();
  }
}
// Blocks until the group's stream is idle.
void wait_idle(loom_comm_group& g, const char* fn) {
  wait_until(g, fn, [&] { return cudaStreamQuery(g.stream); });
}

// Enqueues one NCCL call (or a group of them) on `s`; waits for it when `s` is the group's
// own stream (the caller gave none), and returns at once on the caller's.
template <class Enqueue>
void run(loom_comm_group& g, cudaStream_t s, const char* fn, const char* call, Enqueue&& enqueue) {
  if (!g.aborted.empty())
    fail(LOOM_ERR_INTERNAL, fn,
         "the communicator was aborted after an earlier error (" + g.aborted +
             "); recreate the comm");
  DeviceGuard on(g.device);
  nccl_check(enqueue(), fn, call, g.nccl);
  if (s == g.stream) wait_idle(g, fn);
}

// The stream a call runs on: the caller's, else the group's own.
cudaStream_t stream_of(const loom_comm_group& g, void* stream) {
  return stream != nullptr ? static_cast<cudaStream_t>(stream) : g.stream;
}

// A tensor NCCL can read as one contiguous run of `count` elements of `type`; `nbytes`
// covers it. Reductions pass their element type; data movement goes as bytes.
struct Buf {
  char* ptr;
  size_t count;
  ncclDataType_t type;
  size_t nbytes;
};

Buf check_tensor(const loom_comm_group& g, const DLTensor* t, const char* fn, const char* what,
                 bool reduce) {
  const std::string name = what;
  loom::comm_tensor(std::string(kPrefix) + fn, what, t);
  const int64_t n = loom_tensor_numel(t);
  if (t->device.device_type != kDLCUDA)
    fail(LOOM_ERR_INVALID_ARGUMENT, fn,
         name + " is on " + device_str(t->device) +
             "; comm/nccl reaches GPU memory only (kDLCUDA; use comm \"mpi\" for CPU tensors)");
  if (t->device.device_id != g.device)
    fail(LOOM_ERR_INVALID_ARGUMENT, fn,
         name + " is on " + device_str(t->device) + " but this rank's communicator uses cuda:" +
             std::to_string(g.device) + " (the local rank modulo the device count)");
  char* ptr = static_cast<char*>(t->data) + t->byte_offset;
  if (n > 0) {
    // A host pointer labelled kDLCUDA would make NCCL fault on the GPU; name it here.
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) cudaGetLastError();
    if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
      fail(LOOM_ERR_INVALID_ARGUMENT, fn,
           name + " says " + device_str(t->device) + " but its data is not GPU memory");
  }
  const size_t nbytes = static_cast<size_t>(n) * loom_dtype_bytes(t->dtype);
  if (reduce) return Buf{ptr, static_cast<size_t>(n), reduce_type(t->dtype, fn), nbytes};
  return Buf{ptr, nbytes, ncclUint8, nbytes};
}

bool is_float(DLDataType d) { return d.code == kDLFloat || d.code == kDLBfloat; }

void check_avg(ncclRedOp_t op, DLDataType d, const char* fn) {
  if (op == ncclAvg && !is_float(d))
    fail(LOOM_ERR_UNIMPLEMENTED, fn,
         "AVG of " + dtype_str(d) + " is not supported (floating-point dtypes only; use SUM)");
}

void check_same_dtype(const DLTensor* in, const DLTensor* out, const char* fn) {
  loom::comm_same_dtype(std::string(kPrefix) + fn, in, out);
}

bool overlap(const Buf& a, const Buf& b) {
  return a.nbytes > 0 && b.nbytes > 0 && a.ptr < b.ptr + b.nbytes && b.ptr < a.ptr + a.nbytes;
}

// `in`'s bytes, copied aside on the group's stream when they share memory with `out` in a
// way NCCL does not allow (`allowed`: NCCL's own in-place layout, if the call has one).
const char* source(loom_comm_group& g, cudaStream_t s, const Buf& in, const Buf& out, bool allowed,
                   std::unique_ptr<DeviceBuffer>& scratch, const char* fn) {
  if (allowed || !overlap(in, out)) return in.ptr;
  DeviceGuard on(g.device);
  scratch = std::make_unique<DeviceBuffer>(in.nbytes, fn, s == g.stream ? nullptr : s);
  cuda_check(cudaMemcpyAsync(scratch->get(), in.ptr, in.nbytes, cudaMemcpyDeviceToDevice, s), fn,
             "cudaMemcpyAsync");
  return scratch->get();
}

int live_instances = 0;  // comm/nccl instances in this process

class NcclComm {
 public:
  explicit NcclComm(const loom_host* host) : host_(host) {
    // Asked before the bootstrap so the reason survives; agreed over it so every rank fails
    // together.
    const std::string no_device = loom::cuda_unavailable();
    int count = 0;
    if (no_device.empty()) cuda_check(cudaGetDeviceCount(&count), "create", "cudaGetDeviceCount");
    ++live_instances;  // from here on, the destructor's work is the catch's
    try {
      std::string how;
      std::unique_ptr<Bootstrap> world = world_bootstrap(how);
      const int rank = world->rank(), size = world->size();
      const int first_without = world->min(no_device.empty() ? size : rank, "create");
      if (!no_device.empty())
        fail(LOOM_ERR_INVALID_ARGUMENT, "create",
             no_device + " on world rank " + std::to_string(rank) +
                 "; comm/nccl needs one GPU per rank (comm \"mpi\" or \"single\" run on CPUs)");
      if (first_without < size)
        fail(LOOM_ERR_INVALID_ARGUMENT, "create",
             "world rank " + std::to_string(first_without) +
                 " has no CUDA device; comm/nccl needs one GPU per rank");
      device_ = world->local_rank("create") % count;
      cuda_check(cudaSetDevice(device_), "create", "cudaSetDevice");
      world_ = make_group(std::move(world), device_, "create");
      if (rank == 0) loom::log(host_, LOOM_LOG_INFO, "comm/nccl: ranks start as " + how);
    } catch (...) {
      world_.reset();
      if (--live_instances == 0) bootstrap_release();
      throw;
    }
  }
  ~NcclComm() {
    world_.reset();
    if (--live_instances == 0) bootstrap_release();
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  const loom_host* host() const { return host_; }
  int device() const { return device_; }
  loom_comm_group& group(loom_comm_group* g) const { return g ? *g : *world_; }

 private:
  const loom_host* host_;
  int device_ = 0;
  std::unique_ptr<loom_comm_group> world_;
};

NcclComm* cast(loom_comm* c) { return reinterpret_cast<NcclComm*>(c); }

loom_error* create(const loom_host* host, const loom_config*, loom_comm** out) {
  return loom::guard(host, [&] { *out = reinterpret_cast<loom_comm*>(new NcclComm(host)); });
}
void destroy(loom_comm* c) { delete cast(c); }
int world_rank(loom_comm* c) { return cast(c)->group(nullptr).rank; }
int world_size(loom_comm* c) { return cast(c)->group(nullptr).size; }

loom_error* group_create(loom_comm* c, const int* colors, const char* name, loom_comm_group** out) {
  NcclComm* m = cast(c);
  return loom::guard(m->host(), [&] {
    loom_comm_group& w = m->group(nullptr);
    const std::string what = loom::group_create_what(name);
    *out = make_group(w.boot->split(colors[w.rank], what.c_str()), m->device(), what.c_str())
               .release();
  });
}
void group_destroy(loom_comm*, loom_comm_group* g) { delete g; }
int group_rank(loom_comm* c, loom_comm_group* g) { return cast(c)->group(g).rank; }
int group_size(loom_comm* c, loom_comm_group* g) { return cast(c)->group(g).size; }

const loom_host* host_of(loom_comm* c) { return cast(c)->host(); }

loom_error* all_reduce(loom_comm* c, loom_comm_group* g, DLTensor* t, int32_t op, void* stream) {
  NcclComm* m = cast(c);
  return loom::guard(m->host(), [&] {
    const ncclRedOp_t o = nccl_op(op, "all_reduce");
    loom_comm_group& G = m->group(g);
    const cudaStream_t s = stream_of(G, stream);
    const Buf b = check_tensor(G, t, "all_reduce", "tensor", true);
    check_avg(o, t->dtype, "all_reduce");
    run(G, s, "all_reduce", "ncclAllReduce",
        [&] { return ncclAllReduce(b.ptr, b.ptr, b.count, b.type, o, G.nccl, s); });
  });
}

loom_error* reduce_scatter(loom_comm* c, loom_comm_group* g, const DLTensor* in, DLTensor* out,
                           int32_t op, void* stream) {
  NcclComm* m = cast(c);
  return loom::guard(m->host(), [&] {
    const ncclRedOp_t o = nccl_op(op, "reduce_scatter");
    loom_comm_group& G = m->group(g);
    const cudaStream_t s = stream_of(G, stream);
    const Buf bi = check_tensor(G, in, "reduce_scatter", "in", true);
    const Buf bo = check_tensor(G, out, "reduce_scatter", "out", true);
    check_same_dtype(in, out, "reduce_scatter");
    check_avg(o, in->dtype, "reduce_scatter");
    if (bo.count * G.size != bi.count)
      fail(LOOM_ERR_INVALID_ARGUMENT, "reduce_scatter",
           "in " + shape_str(in) + " must hold group size (" + std::to_string(G.size) +
               ") times out's " + std::to_string(bo.count) + " elements, but holds " +
               std::to_string(bi.count));
    std::unique_ptr<DeviceBuffer> scratch;
    const bool in_place = bo.ptr == bi.ptr + G.rank * bo.nbytes;  // NCCL's in-place layout
    const char* src = source(G, s, bi, bo, in_place, scratch, "reduce_scatter");
    run(G, s, "reduce_scatter", "ncclReduceScatter",
        [&] { return ncclReduceScatter(src, bo.ptr, bo.count, bo.type, o, G.nccl, s); });
  });
}

loom_error* all_gather(loom_comm* c, loom_comm_group* g, const DLTensor* in, DLTensor* out,
                       void* stream) {
  NcclComm* m = cast(c);
  return loom::guard(m->host(), [&] {
    loom_comm_group& G = m->group(g);
    const cudaStream_t s = stream_of(G, stream);
    const Buf bi = check_tensor(G, in, "all_gather", "in", false);
    const Buf bo = check_tensor(G, out, "all_gather", "out", false);
    check_same_dtype(in, out, "all_gather");
    const size_t esize = loom_dtype_bytes(in->dtype);
    if (bi.nbytes * G.size != bo.nbytes)
      fail(LOOM_ERR_INVALID_ARGUMENT, "all_gather",
           "out " + shape_str(out) + " must hold group size (" + std::to_string(G.size) +
               ") times in's " + std::to_string(bi.nbytes / esize) + " elements, but holds " +
               std::to_string(bo.nbytes / esize));
    std::unique_ptr<DeviceBuffer> scratch;
    const bool in_place = bi.ptr == bo.ptr + G.rank * bi.nbytes;  // NCCL's in-place layout
    const char* src = source(G, s, bi, bo, in_place, scratch, "all_gather");
    run(G, s, "all_gather", "ncclAllGather",
        [&] { return ncclAllGather(src, bo.ptr, bi.count, ncclUint8, G.nccl, s); });
  });
}

loom_error* broadcast(loom_comm* c, loom_comm_group* g, DLTensor* t, int root, void* stream) {
  NcclComm* m = cast(c);
  return loom::guard(m->host(), [&] {
    loom_comm_group& G = m->group(g);
    const cudaStream_t s = stream_of(G, stream);
    const Buf b = check_tensor(G, t, "broadcast", "tensor", false);
    loom::comm_rank(std::string(kPrefix) + "broadcast", "root", root, G.size);
    run(G, s, "broadcast", "ncclBroadcast",
        [&] { return ncclBroadcast(b.ptr, b.ptr, b.count, ncclUint8, root, G.nccl, s); });
  });
}

loom_error* all_to_all(loom_comm* c, loom_comm_group* g, const DLTensor* in, DLTensor* out,
                       void* stream) {
  NcclComm* m = cast(c);
  return loom::guard(m->host(), [&] {
    loom_comm_group& G = m->group(g);
    const cudaStream_t s = stream_of(G, stream);
    const Buf bi = check_tensor(G, in, "all_to_all", "in", false);
    const Buf bo = check_tensor(G, out, "all_to_all", "out", false);
    check_same_dtype(in, out, "all_to_all");
    for (const DLTensor* t : {in, static_cast<const DLTensor*>(out)})
      if (t->ndim < 1 || t->shape[0] % G.size != 0)
        fail(LOOM_ERR_INVALID_ARGUMENT, "all_to_all",
             std::string(t == in ? "in " : "out ") + shape_str(t) +
                 " must split into group size (" + std::to_string(G.size) +
                 ") equal chunks along dim 0");
    if (bi.nbytes != bo.nbytes)
      fail(
          LOOM_ERR_INVALID_ARGUMENT, "all_to_all",
          "in " + shape_str(in) + " and out " + shape_str(out) + " must have equal element counts");
    std::unique_ptr<DeviceBuffer> scratch;
    const char* src = source(G, s, bi, bo, false, scratch, "all_to_all");
    const size_t chunk = bi.nbytes / G.size;
    run(G, s, "all_to_all", "ncclSend/ncclRecv", [&] {
      ncclResult_t r = ncclGroupStart();
      for (int j = 0; j < G.size && r == ncclSuccess; ++j) {
        r = ncclSend(src + j * chunk, chunk, ncclUint8, j, G.nccl, s);
        if (r == ncclSuccess) r = ncclRecv(bo.ptr + j * chunk, chunk, ncclUint8, j, G.nccl, s);
      }
      const ncclResult_t end = ncclGroupEnd();  // always closes the group
      return r != ncclSuccess ? r : end;
    });
  });
}

// Uneven chunks: one ncclSend and one ncclRecv per peer in a group call, byte offsets from
// the counts. in and out may not overlap (no scratch copy, unlike all_to_all).
loom_error* all_to_all_v(loom_comm* c, loom_comm_group* g, const DLTensor* in, DLTensor* out,
                         const int64_t* send_counts, const int64_t* recv_counts, void* stream) {
  NcclComm* m = cast(c);
  return loom::guard(m->host(), [&] {
    loom_comm_group& G = m->group(g);
    const cudaStream_t s = stream_of(G, stream);
    const Buf bi = check_tensor(G, in, "all_to_all_v", "in", false);
    const Buf bo = check_tensor(G, out, "all_to_all_v", "out", false);
    check_same_dtype(in, out, "all_to_all_v");
    if (bi.nbytes > 0 && bo.nbytes > 0 && bi.ptr < bo.ptr + bo.nbytes &&
        bo.ptr < bi.ptr + bi.nbytes)
      fail(LOOM_ERR_INVALID_ARGUMENT, "all_to_all_v", "in and out overlap");
    size_t row = loom_dtype_bytes(in->dtype);
    for (int32_t d = 1; d < in->ndim; ++d) row *= (size_t)in->shape[d];
    run(G, s, "all_to_all_v", "ncclSend/ncclRecv", [&] {
      ncclResult_t r = ncclGroupStart();
      size_t so = 0, ro = 0;
      for (int j = 0; j < G.size && r == ncclSuccess; ++j) {
        const size_t sn = (size_t)send_counts[j] * row, rn = (size_t)recv_counts[j] * row;
        if (sn > 0) r = ncclSend(bi.ptr + so, sn, ncclUint8, j, G.nccl, s);
        if (r == ncclSuccess && rn > 0) r = ncclRecv(bo.ptr + ro, rn, ncclUint8, j, G.nccl, s);
        so += sn;
        ro += rn;
      }
      const ncclResult_t end = ncclGroupEnd();  // always closes the group
      return r != ncclSuccess ? r : end;
    });
  });
}

loom_error* barrier(loom_comm* c, loom_comm_group* g, void* stream) {
  NcclComm* m = cast(c);
  return loom::guard(m->host(), [&] {
    // NCCL has no barrier: an all-reduce of one integer returns on no rank before every rank
    // has entered it, and (calls being synchronous) after all earlier work on the group.
    loom_comm_group& G = m->group(g);
    const cudaStream_t s = stream_of(G, stream);
    run(G, s, "barrier", "ncclAllReduce", [&] {
      return ncclAllReduce(G.flag->get(), G.flag->get(), 1, ncclInt32, ncclSum, G.nccl, s);
    });
  });
}

// The header that goes over the bootstrap ahead of each message: its byte count and the sender's
// tag.
struct Header {
  int64_t nbytes;
  int64_t tag;
};

void check_peer(const loom_comm_group& G, int peer, const char* fn) {
  loom::comm_rank(std::string(kPrefix) + fn, "peer", peer, G.size);
  if (peer == G.rank)
    fail(LOOM_ERR_INVALID_ARGUMENT, fn,
         "peer " + std::to_string(peer) +
             " is this rank; a blocking NCCL send or recv to itself would never complete");
}

loom_error* send(loom_comm* c, loom_comm_group* g, const DLTensor* t, int peer, int tag,
                 void* stream) {
  NcclComm* m = cast(c);
  return loom::guard(m->host(), [&] {
    loom_comm_group& G = m->group(g);
    const cudaStream_t s = stream_of(G, stream);
    const Buf b = check_tensor(G, t, "send", "tensor", false);
    check_peer(G, peer, "send");
    Header h{static_cast<int64_t>(b.nbytes), tag};
    G.boot->send(&h, sizeof h, peer, "send");
    run(G, s, "send", "ncclSend",
        [&] { return ncclSend(b.ptr, b.count, ncclUint8, peer, G.nccl, s); });
  });
}

loom_error* recv(loom_comm* c, loom_comm_group* g, DLTensor* t, int peer, int tag, void* stream) {
  NcclComm* m = cast(c);
  return loom::guard(m->host(), [&] {
    loom_comm_group& G = m->group(g);
    const cudaStream_t s = stream_of(G, stream);
    const Buf b = check_tensor(G, t, "recv", "tensor", false);
    check_peer(G, peer, "recv");
    Header h{};
    G.boot->recv(&h, sizeof h, peer, "recv");
    if (h.nbytes == static_cast<int64_t>(b.nbytes) && h.tag == tag) {
      run(G, s, "recv", "ncclRecv",
          [&] { return ncclRecv(b.ptr, b.count, ncclUint8, peer, G.nccl, s); });
      return;
    }
    // The sender is already in ncclSend: take its message aside, then report the mismatch.
    DeviceGuard on(G.device);
    DeviceBuffer drain(static_cast<size_t>(h.nbytes), "recv", s == G.stream ? nullptr : s);
    run(G, s, "recv", "ncclRecv", [&] {
      return ncclRecv(drain.get(), static_cast<size_t>(h.nbytes), ncclUint8, peer, G.nccl, s);
    });
    fail(LOOM_ERR_INVALID_ARGUMENT, "recv",
         "from " + std::to_string(peer) + " with tag " + std::to_string(tag) + " expected " +
             std::to_string(b.nbytes) + " bytes but the next message has " +
             std::to_string(h.nbytes) + " bytes and tag " + std::to_string(h.tag) +
             " (NCCL matches messages by order, not by tag)");
  });
}

// ABI 2.12: a started call runs on the group's side stream, which first waits for the work
// already on the caller's stream (the group's own when the caller gave none); an event on
// the side stream marks its end. wait makes the caller's stream wait for that event (and
// returns), or blocks on it when the call was started without a stream.
struct NcclRequest : loom_comm_request {
  loom_comm_group* group = nullptr;
  cudaStream_t caller = nullptr;  // the stream given to start; NULL: wait blocks
  cudaEvent_t end = nullptr;
  const char* fn = "";
  ~NcclRequest() override {
    if (end != nullptr) cudaEventDestroy(end);
  }
};

loom_error* start(loom_comm* c, int32_t call, const loom_comm_args* a, loom_comm_request** out) {
  NcclComm* m = cast(c);
  return loom::guard(m->host(), [&] {
    loom_comm_group& G = m->group(a->group);
    const char* fn = loom::start_what(call);
    DeviceGuard on(G.device);
    if (G.side == nullptr)
      cuda_check(cudaStreamCreateWithFlags(&G.side, cudaStreamNonBlocking), fn,
                 "cudaStreamCreateWithFlags");
    auto r = std::make_unique<NcclRequest>();
    r->group = &G;
    r->caller = static_cast<cudaStream_t>(a->stream);
    r->fn = fn;
    cuda_check(cudaEventCreateWithFlags(&r->end, cudaEventDisableTiming), fn, "cudaEventCreate");
    // The side stream waits for what is on the caller's stream now (r->end serves as the
    // "ready" mark first, then is recorded again for the end).
    cuda_check(cudaEventRecord(r->end, r->caller ? r->caller : G.stream), fn, "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(G.side, r->end, 0), fn, "cudaStreamWaitEvent");
    loom_error* e = call == LOOM_COMM_CALL_ALL_REDUCE
                        ? all_reduce(c, a->group, a->out, a->op, G.side)
                    : call == LOOM_COMM_CALL_REDUCE_SCATTER
                        ? reduce_scatter(c, a->group, a->in, a->out, a->op, G.side)
                        : all_gather(c, a->group, a->in, a->out, G.side);
    loom::check(m->host(), e);
    cuda_check(cudaEventRecord(r->end, G.side), fn, "cudaEventRecord");
    *out = r.release();
  });
}
loom_error* wait(loom_comm* c, loom_comm_request* req) {
  return loom::guard(cast(c)->host(), [&] {
    NcclRequest* r = static_cast<NcclRequest*>(req);
    DeviceGuard on(r->group->device);
    if (r->caller != nullptr)
      cuda_check(cudaStreamWaitEvent(r->caller, r->end, 0), r->fn, "cudaStreamWaitEvent");
    else
      wait_until(*r->group, r->fn, [&] { return cudaEventQuery(r->end); });
  });
}
loom_error* test(loom_comm* c, loom_comm_request* req, int* done) {
  return loom::guard(cast(c)->host(), [&] {
    NcclRequest* r = static_cast<NcclRequest*>(req);
    DeviceGuard on(r->group->device);
    const cudaError_t e = cudaEventQuery(r->end);
    if (e != cudaErrorNotReady) cuda_check(e, r->fn, "cudaEventQuery");
    *done = e == cudaSuccess;
  });
}

constexpr loom::CommCalls kCalls{"comm/nccl",    true,         host_of,
                                 world_rank,     group_create, all_reduce,
                                 reduce_scatter, all_gather,   broadcast,
                                 all_to_all,     barrier,      send,
                                 recv,           all_to_all_v, group_size,
                                 start,          wait,         test,
                                 nullptr,        nullptr};  // abort: the host ends a failing
                                                            // rank alone; the launcher ends the
                                                            // rest
constexpr loom_comm_api kApi =
    loom::CommSlots<kCalls>::api(create, destroy, world_size, group_destroy, group_rank);

}  // namespace

LOOM_PLUGIN(.description =
                "collectives and send/recv over NCCL on GPU tensors, one GPU per rank; start ranks "
                "with mpirun or srun (one rank needs no MPI)",
            .api = &kApi)
