// backend/cuda: the plugin descriptor, instance lifecycle (create/destroy/get_info), memory
// (alloc/free/to_host/from_host through the caching allocator) and the tensor checks every
// kernel file uses. The ops table is built from ops.hpp.
#include "cuda_backend.hpp"

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <type_traits>

#include "allocator.hpp"
#include "loom/cpp/cuda_device.hpp"
#include "loom/cpp/host_copy.hpp"
#include "loom/cpp/ops_plugin.hpp"
#include "ops.hpp"
#include "staging.hpp"

namespace loom_cuda {
namespace {

std::atomic<const loom_host*> g_last_host{nullptr};

constexpr size_t kScratchBytes = size_t(1) << 20;  // reductions' partials (be.scratch)

// ---- memory ------------------------------------------------------------------------------------

// An allocated tensor: the DLTensor handed out is the first member, so free_tensor gets the
// box back from it; the shape lives alongside.
struct TensorBox {
  DLTensor t;
  int64_t shape[1];  // over-allocated to ndim entries (see make_box)
};
static_assert(std::is_standard_layout_v<TensorBox>);

TensorBox* make_box(int ndim) {
  const size_t n = ndim > 1 ? static_cast<size_t>(ndim) : 1;
  void* mem = ::operator new(sizeof(TensorBox) + (n - 1) * sizeof(int64_t));
  return new (mem) TensorBox{};
}
void delete_box(TensorBox* box) { ::operator delete(box); }

loom_error* cuda_alloc_tensor(loom_backend* be, DLDataType dtype, int ndim, const int64_t* shape,
                              DLTensor** out) noexcept {
  return run_op(be, "alloc_tensor", [&](loom_backend& b) {
    const char* op = "alloc_tensor";
    if (out == nullptr) fail(op, "out is NULL");
    *out = nullptr;
    if (ndim < 0 || (ndim > 0 && shape == nullptr))
      fail(op, "ndim " + std::to_string(ndim) + " with " + (shape ? "a" : "a NULL") + " shape");
    if (dtype.lanes != 1 || dtype.bits == 0 || dtype.bits % 8 != 0)
      fail(op, "unsupported dtype " + dtype_str(dtype));
    size_t elems = 1;
    for (int i = 0; i < ndim; ++i) {
      if (shape[i] < 0) fail(op, "dimension " + std::to_string(i) + " is negative");
      if (shape[i] > 0 && elems > SIZE_MAX / 16 / static_cast<size_t>(shape[i]))
        fail(op, "tensor too large", LOOM_ERR_OUT_OF_MEMORY);
      elems *= static_cast<size_t>(shape[i]);
    }
    const size_t bytes = elems * loom_dtype_bytes(dtype);
    void* data = b.alloc->allocate(bytes);
    // Zero-filled, as backend.h promises; queued on the stream, so it lands before any op.
    cudaError_t e = cudaMemsetAsync(data, 0, CachingAllocator::round_size(bytes), b.stream);
    if (e != cudaSuccess) {
      b.alloc->release(data);
      check_cuda(e, op, "cudaMemsetAsync");
    }
    TensorBox* box = make_box(ndim);
    for (int i = 0; i < ndim; ++i) box->shape[i] = shape[i];
    box->t.data = data;
    box->t.device = DLDevice{kDLCUDA, b.device};
    box->t.ndim = ndim;
    box->t.dtype = dtype;
    box->t.shape = box->shape;
    box->t.strides = nullptr;
    box->t.byte_offset = 0;
    *out = &box->t;
  });
}

void cuda_free_tensor(loom_backend* be, DLTensor* t) noexcept {
  if (t == nullptr || be == nullptr) return;
  if (!be->alloc->release(t->data)) {
    // A view, a tensor of another instance, or a double free: leaking it is harmless,
    // freeing it would not be.
    loom::log(be->host, LOOM_LOG_ERROR,
              "backend/cuda: free_tensor: tensor was not allocated by this backend instance "
              "(or was freed already); ignored");
    return;
  }
  delete_box(reinterpret_cast<TensorBox*>(t));
}

size_t tensor_bytes(const DLTensor* t) {
  return static_cast<size_t>(numel(t)) * loom_dtype_bytes(t->dtype);
}

loom_error* cuda_to_host(loom_backend* be, const DLTensor* src, void* dst, size_t bytes) noexcept {
  return run_op(be, "to_host", [&](loom_backend& b) {
    refuse_in_capture(b, "to_host");
    const char* p = static_cast<const char*>(device_ptr(b, src, "to_host", "src"));
    const size_t want = tensor_bytes(src);
    const std::string why =
        loom::host_copy_refusal("asked for", "src", src, want, bytes, "dst", dst);
    if (!why.empty()) fail("to_host", why);
    if (bytes == 0) return;
    LOOM_CUDA_CHECK("to_host", cudaMemcpyAsync(dst, p, bytes, cudaMemcpyDeviceToHost, b.stream));
    // The caller reads dst when we return: wait, and surface any earlier asynchronous error.
    LOOM_CUDA_CHECK("to_host", stream_sync(b.stream));
  });
}

loom_error* cuda_from_host(loom_backend* be, DLTensor* dst, const void* src,
                           size_t bytes) noexcept {
  return run_op(be, "from_host", [&](loom_backend& b) {
    refuse_in_capture(b, "from_host");
    char* p = static_cast<char*>(device_ptr(b, dst, "from_host", "dst"));
    const size_t want = tensor_bytes(dst);
    const std::string why = loom::host_copy_refusal("got", "dst", dst, want, bytes, "src", src);
    if (!why.empty()) fail("from_host", why);
    if (bytes == 0) return;
    // The caller may reuse src when we return: a small copy is staged in pinned memory and
    // queued (staging.hpp); a large one is waited for (pageable memory is staged by the
    // driver, but only a synchronised copy is guaranteed to have read it).
    if (bytes <= loom_cuda::Staging::kMaxBytes) return b.staging->copy(p, src, bytes, b.stream);
    LOOM_CUDA_CHECK("from_host", cudaMemcpyAsync(p, src, bytes, cudaMemcpyHostToDevice, b.stream));
    LOOM_CUDA_CHECK("from_host", stream_sync(b.stream));
  });
}

loom_error* cuda_synchronize(loom_backend* be) noexcept {
  return run_op(be, "synchronize", [](loom_backend& b) {
    refuse_in_capture(b, "synchronize");
    LOOM_CUDA_CHECK("synchronize", stream_sync(b.stream));
  });
}

// ---- loom.device-stream/1: the instance's stream, and events on it ------------------------------
// Plugins with their own kernels enqueue on `stream`; events order work across streams (a
// collective library's, an attention plugin's) without the host waiting.

loom_error* cuda_event_record(loom_backend* be, void** event) noexcept {
  return run_op(be, "event_record", [&](loom_backend& b) {
    if (event == nullptr) fail("event_record", "event is NULL");
    cudaEvent_t e = nullptr;
    LOOM_CUDA_CHECK("event_record", cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    const cudaError_t rc = cudaEventRecord(e, b.stream);
    if (rc != cudaSuccess) cudaEventDestroy(e);
    LOOM_CUDA_CHECK("event_record", rc);
    *event = e;
  });
}

loom_error* cuda_event_wait(loom_backend* be, void* event) noexcept {
  return run_op(be, "event_wait", [&](loom_backend& b) {
    if (event == nullptr) return;  // nothing to wait for (a CPU-side event)
    LOOM_CUDA_CHECK("event_wait",
                    cudaStreamWaitEvent(b.stream, static_cast<cudaEvent_t>(event), 0));
  });
}

loom_error* cuda_event_sync(loom_backend* be, void* event) noexcept {
  return run_op(be, "event_sync", [&](loom_backend& b) {
    refuse_in_capture(b, "event_sync");
    if (event == nullptr) return;
    LOOM_CUDA_CHECK("event_sync", event_sync(static_cast<cudaEvent_t>(event)));
  });
}

void cuda_event_free(loom_backend*, void* event) noexcept {
  if (event != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

// Timing marks (ABI 2.16): events that keep their time, which event_record's do not (timing
// makes recording dearer, so ordering events go without).
loom_error* cuda_timer_record(loom_backend* be, void** mark) noexcept {
  return run_op(be, "timer_record", [&](loom_backend& b) {
    refuse_in_capture(b, "timer_record");  // a captured event keeps no time
    if (mark == nullptr) fail("timer_record", "mark is NULL");
    cudaEvent_t e = nullptr;
    LOOM_CUDA_CHECK("timer_record", cudaEventCreate(&e));
    const cudaError_t rc = cudaEventRecord(e, b.stream);
    if (rc != cudaSuccess) cudaEventDestroy(e);
    LOOM_CUDA_CHECK("timer_record", rc);
    *mark = e;
  });
}

// Waits for `end` (not counted as a host sync: the profile's own wait, once per step).
loom_error* cuda_timer_elapsed(loom_backend* be, void* start, void* end, double* ms) noexcept {
  return run_op(be, "timer_elapsed", [&](loom_backend& b) {
    refuse_in_capture(b, "timer_elapsed");
    if (start == nullptr || end == nullptr || ms == nullptr)
      fail("timer_elapsed", "start, end and ms must not be NULL");
    LOOM_CUDA_CHECK("timer_elapsed", cudaEventSynchronize(static_cast<cudaEvent_t>(end)));
    float t = 0;
    LOOM_CUDA_CHECK("timer_elapsed", cudaEventElapsedTime(&t, static_cast<cudaEvent_t>(start),
                                                          static_cast<cudaEvent_t>(end)));
    *ms = t;
  });
}

// Reads that wait for their own copy (ABI 2.27), through the pinned staging (staging.hpp).
loom_error* cuda_read_start(loom_backend* be, const DLTensor* src, void** read) noexcept {
  return run_op(be, "read_start", [&](loom_backend& b) {
    refuse_in_capture(b, "read_start");
    if (read == nullptr) fail("read_start", "read is NULL");
    const void* p = device_ptr(b, src, "read_start", "src");
    *read = b.staging->start_read(p, tensor_bytes(src), b.stream);
  });
}

loom_error* cuda_read_finish(loom_backend* be, void* read, void* dst, size_t bytes) noexcept {
  return run_op(be, "read_finish", [&](loom_backend& b) {
    refuse_in_capture(b, "read_finish");
    if (read == nullptr || (dst == nullptr && bytes > 0))
      fail("read_finish", "read or dst is NULL");
    b.staging->finish_read(read, dst, bytes);
  });
}

loom_device_stream make_device_stream(const loom_backend& b) {
  return loom_device_stream{{sizeof(loom_device_stream), LOOM_EXT_DEVICE_STREAM, 0, nullptr},
                            DLDevice{kDLCUDA, b.device},
                            b.stream,
                            cuda_event_record,
                            cuda_event_wait,
                            cuda_event_sync,
                            cuda_event_free,
                            cuda_timer_record,
                            cuda_timer_elapsed,
                            cuda_event_free,
                            cuda_read_start,
                            cuda_read_finish};
}

// What gemm_epilogue implements (the refusal rule's kinds). The table get_ext lends may name
// fewer: see below.
constexpr uint32_t kEpilogueKinds =
    LOOM_EPILOGUE_BIAS | LOOM_EPILOGUE_BGRAD | LOOM_EPILOGUE_BIAS_GELU | LOOM_EPILOGUE_DGELU;

// loom.gemm-epilogue/1 unless the recipe turned it off (backend.gemm_epilogues). BGRAD only
// when asked (backend.gemm_bias_grad_epilogue): on an H200 (2026-11-27, docs/performance.md)
// cuBLASLt's BGRADB made gpt2-124m's weight-gradient GEMMs 1.6 ms slower per step, more than
// the 1.2 ms of the separate bias-gradient pass it replaces; BIAS cost 0.14 ms for 2.4 saved.
// BIAS_GELU and DGELU (the MLP's activation and its gradient in its two GEMMs, as llm.c runs
// them on Hopper) unless backend.gemm_gelu_epilogue = false. loom.norm-residual/1 unless
// backend.norm_residual = false (a bare table: the norms take the args extension).
// loom.fp8/1: the tensor scaling (kernels_fp8.cu, gemm.cpp's FP8 matmul).
constexpr loom_fp8_api kFp8 = {{sizeof(loom_fp8_api), LOOM_EXT_FP8, 0, nullptr},
                               kFp8Scalings,
                               fp8_quantize,
                               fp8_delayed_update};

const loom_ext* cuda_get_ext(loom_backend* be, const char* id) noexcept {
  if (be == nullptr || id == nullptr) return nullptr;
  if (std::strcmp(id, LOOM_EXT_FP8) == 0) return &kFp8.base;
  if (std::strcmp(id, LOOM_EXT_DEVICE_STREAM) == 0) return &be->device_stream.base;
  if (std::strcmp(id, LOOM_EXT_GRAPH) == 0) return &graph_table()->base;
  if (std::strcmp(id, LOOM_EXT_GEMM_EPILOGUE) == 0 && be->gemm_epilogues)
    return &be->epilogues.base;
  if (std::strcmp(id, LOOM_EXT_NORM_RESIDUAL) == 0 && be->norm_residual.id != nullptr)
    return &be->norm_residual;
  return nullptr;
}

constexpr const char* const* kCapabilities = loom::kOpsFp8Capabilities.data();

// ---- lifecycle ---------------------------------------------------------------------------------

// The device this rank uses: the recipe's, or the node-local rank's modulo the device count.
int choose_device(int64_t requested, int count) {
  if (requested >= 0) {
    loom::require(requested < count, "backend/cuda: device = " + std::to_string(requested) +
                                         " but this machine has " + std::to_string(count) +
                                         " CUDA device(s)");
    return static_cast<int>(requested);
  }
  int local = 0;
  for (const char* var :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "LOCAL_RANK"})
    if (const char* v = std::getenv(var)) {
      local = std::atoi(v);
      break;
    }
  return (local < 0 ? 0 : local) % count;
}

// Dense bf16 tensor-core peak in GFLOP/s: the datasheet's for the GPUs it is known for,
// otherwise an sm_90-class estimate (1024 bf16 FLOPs per clock per SM), 0 when unknown.
double estimate_peak_gflops(const cudaDeviceProp& prop, int device) {
  const std::string name = prop.name;
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos)
    return 989000.0;  // H100 SXM / H200: 989 TFLOP/s dense bf16
  if (prop.major == 9) {
    int khz = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device) != cudaSuccess) return 0;
    return double(prop.multiProcessorCount) * khz * 1e3 * 1024.0 / 1e9;
  }
  return 0;
}

void cuda_destroy(loom_backend* be) noexcept;

loom_error* cuda_create(const loom_host* host, const loom_config* cfg,
                        loom_backend** out) noexcept {
  if (host == nullptr) {  // no error can be made without a host: a host bug
    if (out) *out = nullptr;
    return nullptr;
  }
  return loom::guard(host, [&] {
    loom::require(out != nullptr, "backend/cuda: create: out is NULL");
    *out = nullptr;
    loom::require(host->struct_size >= LOOM_HOST_SIZE_V2 && host->abi_major == LOOM_ABI_MAJOR,
                  "backend/cuda: host ABI " + std::to_string(host->abi_major) + "." +
                      std::to_string(host->abi_minor) + " is not compatible with ABI " +
                      std::to_string(LOOM_ABI_MAJOR) + "." + std::to_string(LOOM_ABI_MINOR));
    g_last_host.store(host);
    loom::Config conf(host, cfg);
    const int64_t device = conf.get_int("device");
    const bool tf32 = conf.get_bool("tf32");
    const int64_t workspace_mb = conf.get_int("workspace_mb");
    loom::require(
        workspace_mb >= 0 && workspace_mb <= 4096,
        "backend/cuda: workspace_mb = " + std::to_string(workspace_mb) + " must be in [0, 4096]");

    if (const std::string why = loom::cuda_unavailable(); !why.empty())
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                        "backend/cuda: " + why + "; use backend.plugin = \"cpu\" on this machine");
    int count = 0;
    LOOM_CUDA_CHECK("create", cudaGetDeviceCount(&count));

    // Owned by a unique_ptr with destroy as deleter, so a failure half-way frees what exists.
    std::unique_ptr<loom_backend, void (*)(loom_backend*)> be(new loom_backend, cuda_destroy);
    be->host = host;
    be->device = choose_device(device, count);
    be->allow_tf32 = tf32;
    be->gemm_epilogues = conf.get_bool("gemm_epilogues");
    be->epilogues.base = {sizeof(loom_gemm_epilogues), LOOM_EXT_GEMM_EPILOGUE, 0, nullptr};
    be->epilogues.kinds = LOOM_EPILOGUE_BIAS;
    if (conf.get_bool("gemm_bias_grad_epilogue")) be->epilogues.kinds |= LOOM_EPILOGUE_BGRAD;
    if (conf.get_bool("gemm_gelu_epilogue"))
      be->epilogues.kinds |= LOOM_EPILOGUE_BIAS_GELU | LOOM_EPILOGUE_DGELU;
    if (conf.get_bool("norm_residual"))
      be->norm_residual = {sizeof(loom_ext), LOOM_EXT_NORM_RESIDUAL, 0, nullptr};
    LOOM_CUDA_CHECK("create", cudaSetDevice(be->device));
    LOOM_CUDA_CHECK("create", cudaStreamCreateWithFlags(&be->stream, cudaStreamNonBlocking));
    be->device_stream = make_device_stream(*be);
    // Kernels take short-lived scratch with cudaMallocAsync (norm and embedding backward):
    // keep freed pool memory instead of returning it to the driver at every synchronize.
    cudaMemPool_t pool = nullptr;
    LOOM_CUDA_CHECK("create", cudaDeviceGetDefaultMemPool(&pool, be->device));
    uint64_t keep = UINT64_MAX;
    LOOM_CUDA_CHECK("create",
                    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    be->alloc = new CachingAllocator(be->device);
    be->staging = new loom_cuda::Staging();
    // Deterministic: the heuristic's algorithm for each GEMM, never one picked by a clock
    // (cuBLASLt gives the same bits for the same algorithm; the kernels here use no float
    // atomics: every reduction has a fixed order).
    be->blas = blas_create(static_cast<size_t>(workspace_mb) << 20,
                           conf.get_bool("gemm_autotune") && !conf.get_bool("deterministic"));
    LOOM_CUDA_CHECK("create", device_malloc(&be->scratch, kScratchBytes));
    be->scratch_bytes = kScratchBytes;

    cudaDeviceProp prop{};
    LOOM_CUDA_CHECK("create", cudaGetDeviceProperties(&prop, be->device));
    be->peak_gflops = estimate_peak_gflops(prop, be->device);
    std::ostringstream name;
    name << "cuda:" << be->device << ": " << prop.name << " (sm_" << prop.major << prop.minor
         << ", " << prop.multiProcessorCount << " SMs, " << (prop.totalGlobalMem >> 20) << " MiB)";
    be->device_name = name.str();

    std::ostringstream msg;
    msg << be->device_name << ", peak " << be->peak_gflops / 1000 << " TFLOP/s bf16"
        << (tf32 ? ", tf32 GEMMs" : "") << ", cuBLASLt workspace " << workspace_mb << " MiB";
    loom::log(host, LOOM_LOG_INFO, msg.str());
    *out = be.release();
  });
}

void cuda_destroy(loom_backend* be) noexcept {
  if (be == nullptr) return;
  (void)cudaSetDevice(be->device);
  if (be->stream) (void)stream_sync(be->stream);
  if (be->alloc && be->alloc->live_blocks() > 0)
    loom::log(be->host, LOOM_LOG_WARN,
              "backend/cuda: destroy: " + std::to_string(be->alloc->live_blocks()) + " tensors (" +
                  std::to_string(be->alloc->in_use()) +
                  " bytes) were never freed; freeing their memory");
  blas_destroy(be->blas);
  delete be->staging;  // the stream is synchronised: no copy still reads its buffers
  delete be->alloc;    // frees every block, cached or live
  if (be->scratch) (void)cudaFree(be->scratch);
  if (be->stream) (void)cudaStreamDestroy(be->stream);
  delete be;
}

loom_error* cuda_get_info(loom_backend* be, loom_backend_info* out) noexcept {
  return run_op(be, "get_info", [&](loom_backend& b) {
    if (out == nullptr) fail("get_info", "out is NULL");
    if (LOOM_HAS_FIELD(out, loom_backend_info, device_name))
      out->device_name = b.device_name.c_str();
    if (LOOM_HAS_FIELD(out, loom_backend_info, device)) out->device = DLDevice{kDLCUDA, b.device};
    if (LOOM_HAS_FIELD(out, loom_backend_info, peak_gflops)) out->peak_gflops = b.peak_gflops;
    if (LOOM_HAS_FIELD(out, loom_backend_info, mem_in_use)) out->mem_in_use = b.alloc->in_use();
    if (LOOM_HAS_FIELD(out, loom_backend_info, mem_peak)) out->mem_peak = b.alloc->peak();
    if (LOOM_HAS_FIELD(out, loom_backend_info, mem_total)) {
      size_t free_bytes = 0, total = 0;
      out->mem_total = cudaMemGetInfo(&free_bytes, &total) == cudaSuccess ? total : 0;
    }
    if (LOOM_HAS_FIELD(out, loom_backend_info, device_mallocs)) {
      out->kernel_launches = g_counters.launches.load();
      out->host_syncs = g_counters.syncs.load();
      out->device_mallocs = g_counters.mallocs.load();
    }
  });
}

// ---- the tables --------------------------------------------------------------------------------

constexpr loom::OpsCalls kCalls = {
    refuse_args,
    gemm,
    sum_squares,
    softmax_forward,
    fill,
    copy,
    add,
    axpby,
    bias_add,
    bias_backward,
    embedding_forward,
    embedding_backward,
    layernorm_forward,
    layernorm_backward,
    rmsnorm_forward,
    rmsnorm_backward,
    gelu_forward,
    gelu_backward,
    swiglu_forward,
    swiglu_backward,
    softmax_backward,
    rope_forward,
    rope_backward,
    softmax_cross_entropy,
    vocab_ce_stats,
    vocab_ce_backward,
    gelu_erf_forward,  // LOOM_ACT_GELU and LOOM_ACT_TANH (BERT): not yet run on a GPU
    gelu_erf_backward,
    tanh_forward,
    tanh_backward,
    nullptr,  // grouped_gemm: each group through the cuBLASLt gemm above (the SDK's loop)
    gemm_epilogue,
    kEpilogueKinds,
    copy_strided,
    ssm_conv_forward,  // ABI 2.22, Mamba-2: compiled, not yet run on a GPU (docs/kernels.md)
    ssm_conv_backward,
    ssm_scan_forward,
    ssm_scan_backward,
    rmsnorm_gated_forward,  // loom.norm-gate/1
    rmsnorm_gated_backward,
    rope_freqs,            // loom.rope-freqs/1
    squared_relu_forward,  // ABI 2.24: compiled, not yet run on a GPU
    squared_relu_backward,
    sum_squares_total,            // ABI 2.27: compiled, not yet run on a GPU
    softmax_cross_entropy_total,  // ABI 2.28: compiled, not yet run on a GPU
    norm_residual_forward,        // ABI 2.29: compiled, not yet run on a GPU
    norm_residual_backward,
    gemm_fp8,  // ABI 2.32's loom.fp8/1: compiled, not yet run on a GPU
    kFp8Scalings,
};
constexpr loom_ops kOps = loom::OpsSlots<kCalls>::ops();

constexpr loom_backend_api kApi = {
    LOOM_BACKEND_API_SIZE_V2,
    cuda_create,
    cuda_destroy,
    cuda_get_info,
    cuda_alloc_tensor,
    cuda_free_tensor,
    cuda_to_host,
    cuda_from_host,
    cuda_synchronize,
    &kOps,
    cuda_get_ext,
};

constexpr loom_param_spec kParams[] = {
    loom::param("device", LOOM_PARAM_INT, "-1",
                "CUDA device ordinal; -1 = this rank's node-local rank (OMPI_COMM_WORLD_LOCAL_RANK "
                "or SLURM_LOCALID) modulo the device count",
                -1, 1024),
    loom::param("tf32", LOOM_PARAM_BOOL, "false",
                "run f32 GEMMs on tensor cores in TF32 (about 10 mantissa bits; much faster)"),
    loom::param("gemm_epilogues", LOOM_PARAM_BOOL, "true",
                "lend loom.gemm-epilogue/1: the linear layers' bias add fused into the "
                "cuBLASLt GEMMs (BIAS epilogue)"),
    loom::param("gemm_bias_grad_epilogue", LOOM_PARAM_BOOL, "false",
                "with gemm_epilogues, also the bias gradient in the weight-gradient GEMM "
                "(BGRADB epilogue; slower than a separate pass on an H200 for gpt2-124m)"),
    loom::param("gemm_gelu_epilogue", LOOM_PARAM_BOOL, "true",
                "with gemm_epilogues, also the MLP's tanh-GELU in its first GEMM and the "
                "GELU gradient in the input-gradient GEMM of its second (GELU_AUX_BIAS, DGELU)"),
    loom::param("deterministic", LOOM_PARAM_BOOL, "false",
                "the same bits on every run (train.deterministic sets it): gemm_autotune off"),
    loom::param("gemm_autotune", LOOM_PARAM_BOOL, "true",
                "time cuBLASLt's first 8 algorithms for each GEMM shape at its first call and "
                "keep the fastest (in a run of one process; several ranks take the heuristic's "
                "first, so that they run the same kernels)"),
    loom::param("workspace_mb", LOOM_PARAM_INT, "32",
                "cuBLASLt workspace in MiB (larger lets it pick split-K kernels)", 0, 4096),
    loom::param("norm_residual", LOOM_PARAM_BOOL, "true",
                "lend loom.norm-residual/1: a block's residual add made by the norm beside it, "
                "one pass where the add and the norm were two (the same numbers either way)"),
};

const loom_plugin_descriptor kDescriptor = loom::describe_plugin(
    {LOOM_PLUGIN_IDENTITY,
     .description =
         "One NVIDIA GPU: cuBLASLt GEMM and CUDA kernels, f32 with bf16/f16 mixed precision",
     .params = kParams, .api = &kApi, .capabilities = kCapabilities});

}  // namespace

// ---- shared helpers (cuda_backend.hpp) ---------------------------------------------------------

const loom_host* last_host() noexcept { return g_last_host.load(); }

int64_t numel(const DLTensor* t) { return loom_tensor_numel(t); }

void* device_ptr(const loom_backend& be, const DLTensor* t, const char* op, const char* name,
                 int64_t expect_numel) {
  const std::string n(name);
  if (t == nullptr) fail(op, n + " is NULL");
  if (t->device.device_type != kDLCUDA || t->device.device_id != be.device)
    fail(op, n + " is on device (type " + std::to_string(t->device.device_type) + ", id " +
                 std::to_string(t->device.device_id) + "), expected kDLCUDA (2) id " +
                 std::to_string(be.device));
  if (t->ndim < 0 || (t->ndim > 0 && t->shape == nullptr)) fail(op, n + " has no shape");
  if (t->strides != nullptr) {
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; --i) {
      if (t->shape[i] != 1 && t->strides[i] != expect)
        fail(op, n + " is not compact row-major (strides given)");
      expect *= t->shape[i];
    }
  }
  const int64_t count = numel(t);
  if (expect_numel >= 0 && count != expect_numel)
    fail(op, n + " " + shape_str(t) + " has " + std::to_string(count) + " elements, expected " +
                 std::to_string(expect_numel));
  if (t->data == nullptr && count > 0) fail(op, n + " has no data");
  return static_cast<char*>(t->data) + t->byte_offset;
}

}  // namespace loom_cuda

LOOM_PLUGIN_ENTRY(loom_cuda::kDescriptor)
