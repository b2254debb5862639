// backend/cpu: the plugin descriptor, instance lifecycle (create/destroy/get_info), memory
// (alloc/free/to_host/from_host) and the argument checks every kernel file uses.
#include "cpu_backend.hpp"

#include <omp.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <sstream>
#include <type_traits>

#include "blas.hpp"
#include "cpu_features.hpp"
#include "loom/cpp/graph.hpp"
#include "loom/cpp/host_copy.hpp"
#include "loom/cpp/host_stream.hpp"
#include "loom/cpp/ops_plugin.hpp"

namespace loom_cpu {
namespace {

std::atomic<const loom_host*> g_last_host{nullptr};

// threads = 0: OMP_NUM_THREADS's first number when it is one ("4" or "4,2"), as OpenMP reads
// it, else every CPU this process may run on.
int omp_threads_from_env() {
  if (const char* v = std::getenv("OMP_NUM_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end != v && n > 0 && n <= 4096 && (*end == '\0' || *end == ',')) return (int)n;
  }
  return omp_get_num_procs();
}

// ---- argument-check helpers ------------------------------------------------------------------

// ---- memory ------------------------------------------------------------------------------------

// An allocated tensor: the DLTensor handed out is the first member, so free_tensor gets the
// box back from it. Shape storage and the accounted size live alongside.
struct TensorBox {
  DLTensor t;
  size_t bytes;  // what mem_in_use was charged
  int64_t* shape;
};
static_assert(std::is_standard_layout_v<TensorBox>);
constexpr size_t kAlign = 64;  // a cache line, and the widest vector load (AVX-512)

loom_error* cpu_alloc_tensor(loom_backend* be, DLDataType dtype, int ndim, const int64_t* shape,
                             DLTensor** out) noexcept {
  return run_op(be, "alloc_tensor", [&](loom_backend& b) {
    Check ck{"alloc_tensor"};
    if (out == nullptr) ck.fail("out is NULL");
    *out = nullptr;
    if (ndim < 0 || (ndim > 0 && shape == nullptr))
      ck.fail("ndim " + std::to_string(ndim) + " with " + (shape ? "a" : "a NULL") + " shape");
    if (dtype.lanes != 1 || dtype.bits == 0 || dtype.bits % 8 != 0)
      ck.fail("unsupported dtype " + dtype_str(dtype));
    size_t elems = 1;
    for (int i = 0; i < ndim; ++i) {
      if (shape[i] < 0) ck.fail("dimension " + std::to_string(i) + " is negative");
      if (shape[i] > 0 && elems > SIZE_MAX / 16 / static_cast<size_t>(shape[i]))
        ck.fail("tensor too large", LOOM_ERR_OUT_OF_MEMORY);
      elems *= static_cast<size_t>(shape[i]);
    }
    size_t bytes = elems * loom_dtype_bytes(dtype);
    size_t padded = (bytes + kAlign - 1) / kAlign * kAlign;
    if (padded == 0) padded = kAlign;  // empty tensors still get a valid, unique pointer

    auto* box = new TensorBox{};
    box->shape = new int64_t[ndim > 0 ? ndim : 1];
    void* data = std::aligned_alloc(kAlign, padded);
    if (data == nullptr) {
      delete[] box->shape;
      delete box;
      ck.fail("cannot allocate " + std::to_string(bytes) + " bytes", LOOM_ERR_OUT_OF_MEMORY);
    }
    std::memset(data, 0, padded);
    for (int i = 0; i < ndim; ++i) box->shape[i] = shape[i];
    box->bytes = padded;
    box->t.data = data;
    box->t.device = DLDevice{kDLCPU, 0};
    box->t.ndim = ndim;
    box->t.dtype = dtype;
    box->t.shape = box->shape;
    box->t.strides = nullptr;
    box->t.byte_offset = 0;

    size_t now = b.mem_in_use.fetch_add(padded) + padded;
    size_t peak = b.mem_peak.load();
    while (now > peak && !b.mem_peak.compare_exchange_weak(peak, now)) {
    }
    {
      std::lock_guard<std::mutex> lock(b.live_mu);
      b.live.insert(&box->t);
    }
    *out = &box->t;
  });
}

void release(loom_backend* be, DLTensor* t) noexcept {
  auto* box = reinterpret_cast<TensorBox*>(t);
  if (be) be->mem_in_use.fetch_sub(box->bytes);
  std::free(box->t.data);
  delete[] box->shape;
  delete box;
}

void cpu_free_tensor(loom_backend* be, DLTensor* t) noexcept {
  if (t == nullptr || be == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(be->live_mu);
    if (be->live.erase(t) == 0) {
      // A view, a tensor of another instance, or a double free: leaking it is harmless,
      // freeing it would not be.
      loom::log(be->host, LOOM_LOG_ERROR,
                "free_tensor: tensor was not allocated by this backend instance "
                "(or was freed already); ignored");
      return;
    }
  }
  release(be, t);
}

loom_error* cpu_to_host(loom_backend* be, const DLTensor* src, void* dst, size_t bytes) noexcept {
  return run_op(be, "to_host", [&](loom_backend& b) {
    loom::host_graph::refuse_in_graph(&b, "to_host");
    Check ck{"to_host"};
    ck.tensor("src", src);
    size_t want = static_cast<size_t>(loom_tensor_numel(src)) * loom_dtype_bytes(src->dtype);
    const std::string why =
        loom::host_copy_refusal("asked for", "src", src, want, bytes, "dst", dst);
    if (!why.empty()) ck.fail(why);
    if (bytes) std::memcpy(dst, data_of<char>(src), bytes);
  });
}

loom_error* cpu_from_host(loom_backend* be, DLTensor* dst, const void* src, size_t bytes) noexcept {
  return run_op(be, "from_host", [&](loom_backend& b) {
    loom::host_graph::refuse_in_graph(&b, "from_host");
    Check ck{"from_host"};
    ck.tensor("dst", dst);
    size_t want = static_cast<size_t>(loom_tensor_numel(dst)) * loom_dtype_bytes(dst->dtype);
    const std::string why = loom::host_copy_refusal("got", "dst", dst, want, bytes, "src", src);
    if (!why.empty()) ck.fail(why);
    if (bytes) std::memcpy(data_of<char>(dst), src, bytes);
  });
}

// Every kernel runs to completion before it returns: nothing to wait for.
loom_error* cpu_synchronize(loom_backend* be) noexcept {
  return run_op(be, "synchronize",
                [](loom_backend& b) { loom::host_graph::refuse_in_graph(&b, "synchronize"); });
}

// ---- lifecycle ---------------------------------------------------------------------------------

loom_error* cpu_create(const loom_host* host, const loom_config* cfg, loom_backend** out) noexcept {
  // Without a host no error can be made; a NULL host is a host bug, reported as "no instance".
  if (host == nullptr) {
    if (out) *out = nullptr;
    return nullptr;
  }
  return loom::guard(host, [&] {
    loom::require(out != nullptr, "backend/cpu: create: out is NULL");
    *out = nullptr;
    loom::require(host->struct_size >= LOOM_HOST_SIZE_V2 && host->abi_major == LOOM_ABI_MAJOR,
                  "backend/cpu: host ABI " + std::to_string(host->abi_major) + "." +
                      std::to_string(host->abi_minor) + " is not compatible with ABI " +
                      std::to_string(LOOM_ABI_MAJOR) + "." + std::to_string(LOOM_ABI_MINOR));
    set_last_host(host);
    loom::Config conf(host, cfg);
    int64_t threads = conf.get_int("threads");
    std::string coretype = conf.get_string("blas_coretype");
    bool measure = conf.get_bool("measure_gemm");
    const bool norm_residual = conf.get_bool("norm_residual");
    loom::require(threads >= 0, "backend/cpu: threads = " + std::to_string(threads) +
                                    " must be >= 0 (0 = all cores)");

    auto be = std::make_unique<loom_backend>();
    be->host = host;
    be->norm_residual = norm_residual;
    // 0: OMP_NUM_THREADS when set (the user's, or the engine's share of the node for each
    // rank under a launcher), else the CPUs this process may run on (omp_get_num_procs
    // honours the affinity mask, so a rank pinned to 4 cores gets 4).
    be->threads = threads > 0 ? static_cast<int>(threads) : omp_threads_from_env();

    CpuFeatures cpu = detect_cpu();
    be->blas = &load_blas(host, cpu, coretype);
    be->blas->use_threads(be->threads);
    if (measure) be->peak_gflops = measure_sgemm_gflops(*be->blas, 2048, 3);

    std::ostringstream name;
    name << "cpu: " << (cpu.brand.empty() ? cpu.vendor : cpu.brand) << " (" << cpu.isa()
         << "), OpenBLAS " << be->blas->corename << ", " << be->threads << " threads";
    be->device_name = name.str();

    std::ostringstream msg;
    msg << "OpenBLAS " << be->blas->corename << ", " << be->threads << " threads";
    if (measure) {
      msg.precision(1);
      msg << std::fixed << ", sgemm 2048^3 = " << be->peak_gflops << " GFLOP/s";
    }
    loom::log(host, LOOM_LOG_INFO, msg.str());
    *out = be.release();
  });
}

void cpu_destroy(loom_backend* be) noexcept {
  if (be == nullptr) return;
  if (!be->live.empty()) {
    // Nothing can free them after this (free_tensor needs the instance), so free them now.
    std::string msg = "destroy: " + std::to_string(be->live.size()) + " tensors (" +
                      std::to_string(be->mem_in_use.load()) +
                      " bytes) were never freed; freeing them";
    loom::log(be->host, LOOM_LOG_WARN, msg);
    for (const DLTensor* t : be->live) release(be, const_cast<DLTensor*>(t));
    be->live.clear();
  }
  delete be;
}

loom_error* cpu_get_info(loom_backend* be, loom_backend_info* out) noexcept {
  return run_op(be, "get_info", [&](loom_backend& b) {
    Check ck{"get_info"};
    if (out == nullptr) ck.fail("out is NULL");
    if (LOOM_HAS_FIELD(out, loom_backend_info, device_name))
      out->device_name = b.device_name.c_str();
    if (LOOM_HAS_FIELD(out, loom_backend_info, device)) out->device = DLDevice{kDLCPU, 0};
    if (LOOM_HAS_FIELD(out, loom_backend_info, peak_gflops)) out->peak_gflops = b.peak_gflops;
    if (LOOM_HAS_FIELD(out, loom_backend_info, mem_in_use)) out->mem_in_use = b.mem_in_use;
    if (LOOM_HAS_FIELD(out, loom_backend_info, mem_peak)) out->mem_peak = b.mem_peak;
    if (LOOM_HAS_FIELD(out, loom_backend_info, mem_total)) {  // the host's physical memory
      const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
      out->mem_total = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
    }
    // ABI 2.16: no kernels, no device to wait for, no device memory.
    if (LOOM_HAS_FIELD(out, loom_backend_info, device_mallocs))
      out->kernel_launches = out->host_syncs = out->device_mallocs = 0;
  });
}

// ---- the tables --------------------------------------------------------------------------------

constexpr loom::OpsCalls kCalls = {
    refuse_args,
    op_gemm,
    op_sum_squares,
    op_softmax_forward,
    op_fill,
    op_copy,
    op_add,
    op_axpby,
    op_bias_add,
    op_bias_backward,
    op_embedding_forward,
    op_embedding_backward,
    op_layernorm_forward,
    op_layernorm_backward,
    op_rmsnorm_forward,
    op_rmsnorm_backward,
    op_gelu_forward,
    op_gelu_backward,
    op_swiglu_forward,
    op_swiglu_backward,
    op_softmax_backward,
    op_rope_forward,
    op_rope_backward,
    op_softmax_cross_entropy,
    op_vocab_ce_stats,
    op_vocab_ce_backward,
    op_gelu_erf_forward,
    op_gelu_erf_backward,
    op_tanh_forward,
    op_tanh_backward,
    nullptr,  // grouped_gemm: each group through op_gemm (OpenBLAS threads every one)
    op_gemm_epilogue,
    LOOM_EPILOGUE_BIAS | LOOM_EPILOGUE_BGRAD | LOOM_EPILOGUE_BIAS_GELU | LOOM_EPILOGUE_DGELU,
    op_copy_strided,
    op_ssm_conv_forward,
    op_ssm_conv_backward,
    op_ssm_scan_forward,
    op_ssm_scan_backward,
    op_rmsnorm_gated_forward,
    op_rmsnorm_gated_backward,
    op_rope_freqs,
    op_squared_relu_forward,
    op_squared_relu_backward,
    op_sum_squares_total,
    op_softmax_cross_entropy_total,
    op_norm_residual_forward,
    op_norm_residual_backward,
    op_gemm_fp8,
    kFp8Scalings,
};
constexpr loom_ops kOps = loom::OpsSlots<kCalls>::ops();

// loom.gemm-epilogue/1, lent by every instance; loom.device-stream/1 as every host backend.
constexpr loom_gemm_epilogues kEpilogues = {
    {sizeof(loom_gemm_epilogues), LOOM_EXT_GEMM_EPILOGUE, 0, nullptr}, kCalls.epilogue_kinds};
// loom.norm-residual/1 unless the recipe turned it off (backend.norm_residual): a bare table.
constexpr loom_ext kNormResidual = {sizeof(loom_ext), LOOM_EXT_NORM_RESIDUAL, 0, nullptr};
// loom.graph/1 without graphs: a launch runs the body under the capture rules (graph.hpp).
loom_error* cpu_graph_capture(loom_backend* be, const loom_graph_capture_args* a,
                              void** graph) noexcept {
  if (be == nullptr) return run_op(be, "capture", [](loom_backend&) {});  // the NULL refusal
  return loom::host_graph::capture(be->host, be, "backend/cpu", a, graph);
}
loom_error* cpu_graph_launch(loom_backend* be, void* graph) noexcept {
  if (be == nullptr) return run_op(be, "launch", [](loom_backend&) {});
  return loom::host_graph::launch(be->host, be, "backend/cpu", graph);
}
void cpu_graph_free(loom_backend*, void* graph) noexcept { loom::host_graph::graph_free(graph); }
constexpr loom_graph_api kGraph = {{sizeof(loom_graph_api), LOOM_EXT_GRAPH, 0, nullptr},
                                   cpu_graph_capture,
                                   cpu_graph_launch,
                                   cpu_graph_free};

// loom.fp8/1: FP8 emulated exactly (kernels_fp8.cpp; the GEMM is op_gemm_fp8 above).
constexpr loom_fp8_api kFp8 = {{sizeof(loom_fp8_api), LOOM_EXT_FP8, 0, nullptr},
                               kFp8Scalings,
                               op_fp8_quantize,
                               op_fp8_delayed_update};

const loom_ext* cpu_get_ext(loom_backend* be, const char* id) noexcept {
  if (id != nullptr && std::strcmp(id, LOOM_EXT_GEMM_EPILOGUE) == 0) return &kEpilogues.base;
  if (id != nullptr && std::strcmp(id, LOOM_EXT_FP8) == 0) return &kFp8.base;
  if (id != nullptr && std::strcmp(id, LOOM_EXT_GRAPH) == 0) return &kGraph.base;
  if (be != nullptr && be->norm_residual && id != nullptr &&
      std::strcmp(id, LOOM_EXT_NORM_RESIDUAL) == 0)
    return &kNormResidual;
  return loom::host_stream::get_ext(be, id);
}

// loom.device-stream/1 on the CPU: no stream, work is done when an op returns.
// loom.norm-gate/1 and loom.rope-freqs/1 are args extensions (the norms and ropes take
// them): no table behind them.
constexpr const char* const* kCapabilities = loom::kOpsFp8Capabilities.data();

constexpr loom_backend_api kApi = {
    LOOM_BACKEND_API_SIZE_V2, cpu_create,      cpu_destroy, cpu_get_info,
    cpu_alloc_tensor,         cpu_free_tensor, cpu_to_host, cpu_from_host,
    cpu_synchronize,          &kOps,           cpu_get_ext,
};

constexpr loom_param_spec kParams[] = {
    loom::param(
        "threads", LOOM_PARAM_INT, "0",
        "threads for the kernels and OpenBLAS; 0 = OMP_NUM_THREADS when set (under a launcher the "
        "engine sets it to this node's cores shared by its ranks), else every core this "
        "process may use",
        0, 4096),
    loom::param("blas_coretype", LOOM_PARAM_STRING, "auto",
                "OPENBLAS_CORETYPE to load OpenBLAS with: auto = from cpuid (SkylakeX/Haswell/"
                "Sandybridge), native = OpenBLAS's own detection, or a core name; the "
                "environment variable, when set, wins"),
    loom::param("measure_gemm", LOOM_PARAM_BOOL, "true",
                "time a 2048^3 sgemm at create and report it as peak_gflops (the MFU "
                "denominator); false reports 0"),
    loom::param("norm_residual", LOOM_PARAM_BOOL, "true",
                "lend loom.norm-residual/1: the blocks' residual adds made by the norms beside "
                "them (on the CPU the same two calls, in the backend: the same numbers either "
                "way; false runs the layer library's separate add)"),
};

const loom_plugin_descriptor kDescriptor =
    loom::describe_plugin({LOOM_PLUGIN_IDENTITY,
                           .description = "Host CPU: OpenBLAS GEMM (core chosen from cpuid) and "
                                          "OpenMP kernels, f32 and f64; bf16/f16 "
                                          "through f32 staging",
                           .params = kParams, .api = &kApi, .capabilities = kCapabilities});

}  // namespace

// ---- shared helpers (cpu_backend.hpp)
// ------------------------------------------------------------

const loom_host* last_host() noexcept { return g_last_host.load(); }
void set_last_host(const loom_host* host) noexcept { g_last_host.store(host); }

void Check::fail(const std::string& what, loom_status code) const {
  throw loom::Error(code, std::string(op) + ": " + what);
}

const DLTensor* Check::tensor(const char* name, const DLTensor* t) const {
  if (t == nullptr) fail(std::string(name) + " is NULL");
  if (t->device.device_type != kDLCPU)
    fail(std::string(name) + " is on device type " + std::to_string(t->device.device_type) +
         ", expected kDLCPU (1)");
  if (t->ndim < 0 || (t->ndim > 0 && t->shape == nullptr))
    fail(std::string(name) + " has no shape");
  if (t->strides != nullptr) {
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; --i) {
      if (t->shape[i] != 1 && t->strides[i] != expect)
        fail(std::string(name) + " is not compact row-major (strides given)");
      expect *= t->shape[i];
    }
  }
  if (t->data == nullptr && loom_tensor_numel(t) > 0) fail(std::string(name) + " has no data");
  return t;
}

void Check::floating(const char* name, const DLTensor* t) const {
  if (!is_f32(t->dtype) && !is_f64(t->dtype))
    fail(std::string(name) + " is " + dtype_str(t->dtype) +
             "; backend/cpu runs this op in f32 "
             "or f64",
         LOOM_ERR_UNIMPLEMENTED);
}

void Check::dtype(const char* name, const DLTensor* t, DLDataType want) const {
  if (!loom_dtype_eq(t->dtype, want))
    fail(std::string(name) + " is " + dtype_str(t->dtype) + ", expected " + dtype_str(want));
}

void Check::same_dtype(const char* name, const DLTensor* t, const char* ref_name,
                       const DLTensor* ref) const {
  if (!loom_dtype_eq(t->dtype, ref->dtype))
    fail(std::string(name) + " is " + dtype_str(t->dtype) + ", expected " + dtype_str(ref->dtype) +
         " (the dtype of " + ref_name + ")");
}

void Check::stat_dtype(const char* name, const DLTensor* t, const DLTensor* data) const {
  if (!is_f32(t->dtype) && !loom_dtype_eq(t->dtype, data->dtype))
    fail(std::string(name) + " is " + dtype_str(t->dtype) + ", expected f32 or " +
         dtype_str(data->dtype));
}

void Check::numel(const char* name, const DLTensor* t, int64_t want) const {
  int64_t n = loom_tensor_numel(t);
  if (n != want)
    fail(std::string(name) + " has " + std::to_string(n) + " elements, expected " +
         std::to_string(want));
}

int64_t Check::last_dim(const char* name, const DLTensor* t) const {
  if (t->ndim < 1) fail(std::string(name) + " is a scalar, expected at least 1 dimension");
  return t->shape[t->ndim - 1];
}

void Check::ndim(const char* name, const DLTensor* t, int want) const {
  if (t->ndim != want)
    fail(std::string(name) + " has shape " + shape_str(t) + ", expected " + std::to_string(want) +
         " dimensions");
}

}  // namespace loom_cpu

LOOM_PLUGIN_ENTRY(loom_cpu::kDescriptor)
