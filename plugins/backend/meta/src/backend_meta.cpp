// backend/meta: tensors with a shape and no memory, and ops that compute nothing, so that a
// run can be walked through for what it would allocate (`loom validate --memory`), as
// PyTorch's meta device is. alloc_tensor charges a tensor's bytes, rounded up to 64 as
// backend/cpu does, to mem_in_use and mem_peak; a tensor of more than 64 KiB has no memory
// (data NULL, to_host gives zeros), a smaller one has real, zeroed host memory, so that what
// the host writes it reads back (a sum of host numbers over a group, which the model's
// dispatcher sizes its buffers from, goes through such a tensor); every op returns at once. The
// device is reported as the CPU, with the CPU's loom.device-stream/1 (no stream, nothing to wait
// for), so that plugins which pick a code path by device accept it; a plugin that reads or writes a
// tensor's memory on the host (the CPU attention plugins, an optimizer's step, grad/ddp's buckets)
// must not run beside it: attention/meta stands in for the attention, and the engine's dry step
// leaves out the reduction and the optimizer's step.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "loom/backend.h"
#include "loom/cpp/describe.hpp"
#include "loom/cpp/host_stream.hpp"
#include "loom/cpp/plugin.hpp"

struct loom_backend {
  const loom_host* host;
  std::mutex mu;
  std::unordered_map<const DLTensor*, size_t> live;  // tensor -> bytes charged
  size_t in_use = 0, peak = 0;
};

namespace {

constexpr size_t kAlign = 64;
constexpr size_t kRealBytes = 64 * 1024;  // at most this much: real memory

struct Box {  // the DLTensor handed out first, so that free_tensor finds the box
  DLTensor t;
  int64_t shape[8];
};

loom_error* create(const loom_host* host, const loom_config*, loom_backend** out) {
  return loom::guard(host, [&] { *out = new loom_backend{host, {}, {}, 0, 0}; });
}
void destroy(loom_backend* be) {
  if (!be) return;
  for (auto& [t, bytes] : be->live) {
    std::free(t->data);
    delete reinterpret_cast<const Box*>(t);
  }
  delete be;
}

loom_error* get_info(loom_backend* be, loom_backend_info* out) {
  return loom::guard(be->host, [&] {
    loom::require(out != nullptr, "backend/meta: get_info: out is NULL");
    std::lock_guard<std::mutex> lock(be->mu);
    if (LOOM_HAS_FIELD(out, loom_backend_info, device_name))
      out->device_name = "meta: shapes only, no memory and no compute";
    if (LOOM_HAS_FIELD(out, loom_backend_info, device)) out->device = DLDevice{kDLCPU, 0};
    if (LOOM_HAS_FIELD(out, loom_backend_info, peak_gflops)) out->peak_gflops = 0.0;
    if (LOOM_HAS_FIELD(out, loom_backend_info, mem_in_use)) out->mem_in_use = be->in_use;
    if (LOOM_HAS_FIELD(out, loom_backend_info, mem_peak)) out->mem_peak = be->peak;
    if (LOOM_HAS_FIELD(out, loom_backend_info, mem_total)) out->mem_total = 0;  // no device
    if (LOOM_HAS_FIELD(out, loom_backend_info, device_mallocs))
      out->kernel_launches = out->host_syncs = out->device_mallocs = 0;
  });
}

loom_error* alloc_tensor(loom_backend* be, DLDataType dtype, int ndim, const int64_t* shape,
                         DLTensor** out) {
  return loom::guard(be->host, [&] {
    loom::require(out != nullptr && ndim >= 0 && ndim <= 8 && (ndim == 0 || shape != nullptr),
                  "backend/meta: alloc_tensor: out NULL, or a shape of " + std::to_string(ndim) +
                      " dimensions (at most 8)");
    auto* box = new Box{};
    size_t elems = 1;
    for (int i = 0; i < ndim; ++i) {
      loom::require(shape[i] >= 0, "backend/meta: alloc_tensor: a negative dimension");
      box->shape[i] = shape[i];
      elems *= (size_t)shape[i];
    }
    const size_t raw = elems * loom_dtype_bytes(dtype);
    box->t.data = raw <= kRealBytes ? std::calloc(std::max<size_t>(raw, 1), 1) : nullptr;
    box->t.device = DLDevice{kDLCPU, 0};
    box->t.ndim = ndim;
    box->t.dtype = dtype;
    box->t.shape = box->shape;
    const size_t bytes = std::max(kAlign, (raw + kAlign - 1) / kAlign * kAlign);
    std::lock_guard<std::mutex> lock(be->mu);
    be->live[&box->t] = bytes;
    be->in_use += bytes;
    be->peak = std::max(be->peak, be->in_use);
    *out = &box->t;
  });
}

void free_tensor(loom_backend* be, DLTensor* t) {
  if (!t) return;
  std::lock_guard<std::mutex> lock(be->mu);
  auto it = be->live.find(t);
  if (it == be->live.end()) return;
  be->in_use -= it->second;
  be->live.erase(it);
  std::free(t->data);
  delete reinterpret_cast<Box*>(t);
}

// Host copies: a small tensor's real memory, else zeros (what a zero-filled tensor holds).
loom_error* to_host(loom_backend*, const DLTensor* src, void* dst, size_t bytes) {
  if (!dst || !bytes) return nullptr;
  if (src && src->data)
    std::memcpy(dst, static_cast<const char*>(src->data) + src->byte_offset, bytes);
  else
    std::memset(dst, 0, bytes);
  return nullptr;
}
loom_error* from_host(loom_backend*, DLTensor* dst, const void* src, size_t bytes) {
  if (dst && dst->data && src && bytes)
    std::memcpy(static_cast<char*>(dst->data) + dst->byte_offset, src, bytes);
  return nullptr;
}
loom_error* synchronize(loom_backend*) { return nullptr; }

// Every op: nothing to compute.
template <class F>
struct Noop;
template <class... A>
struct Noop<loom_error* (*)(loom_backend*, A...)> {
  static loom_error* fn(loom_backend*, A...) { return nullptr; }
};
#define LOOM_META_NOOP(slot) o.slot = Noop<decltype(o.slot)>::fn;
constexpr loom_ops make_ops() {
  loom_ops o{};
  o.struct_size = sizeof(loom_ops);
  LOOM_META_NOOP(gemm)
  LOOM_META_NOOP(bias_add)
  LOOM_META_NOOP(bias_backward)
  LOOM_META_NOOP(fill)
  LOOM_META_NOOP(copy)
  LOOM_META_NOOP(add)
  LOOM_META_NOOP(axpby)
  LOOM_META_NOOP(sum_squares)
  LOOM_META_NOOP(embedding_forward)
  LOOM_META_NOOP(embedding_backward)
  LOOM_META_NOOP(norm_forward)
  LOOM_META_NOOP(norm_backward)
  LOOM_META_NOOP(act_forward)
  LOOM_META_NOOP(act_backward)
  LOOM_META_NOOP(softmax_forward)
  LOOM_META_NOOP(softmax_backward)
  LOOM_META_NOOP(rope_forward)
  LOOM_META_NOOP(rope_backward)
  LOOM_META_NOOP(softmax_cross_entropy)
  LOOM_META_NOOP(vocab_ce_stats)
  LOOM_META_NOOP(vocab_ce_backward)
  LOOM_META_NOOP(grouped_gemm)
  LOOM_META_NOOP(copy_strided)
  LOOM_META_NOOP(ssm_conv_forward)
  LOOM_META_NOOP(ssm_conv_backward)
  LOOM_META_NOOP(ssm_scan_forward)
  LOOM_META_NOOP(ssm_scan_backward)
  return o;
}
#undef LOOM_META_NOOP
constexpr loom_ops kOps = make_ops();

// loom.fp8/1 (ABI 2.32), every scaling: an FP8 run is walked through like any other (its casts'
// codes and scales are tensors alloc_tensor charges; the gemm slot takes the args extension as
// it takes any chain: nothing to compute).
constexpr loom_fp8_api kFp8 = {
    {sizeof(loom_fp8_api), LOOM_EXT_FP8, 0, nullptr},
    (1u << LOOM_FP8_SCALE_TENSOR) | (1u << LOOM_FP8_SCALE_1X128) | (1u << LOOM_FP8_SCALE_128X128),
    Noop<decltype(kFp8.quantize)>::fn,
    Noop<decltype(kFp8.delayed_update)>::fn};
const loom_ext* get_ext(loom_backend* be, const char* id) noexcept {
  if (id != nullptr && std::strcmp(id, LOOM_EXT_FP8) == 0) return &kFp8.base;
  return loom::host_stream::get_ext(be, id);
}

// the CPU's loom.device-stream/1: nothing to record or wait for; loom.norm-gate/1 as every
// other norm, and loom.sum-squares-total/1 and loom.ce-loss-total/1 as every sum (nothing to
// compute); loom.fp8/1 as above
const char* const kCapabilities[] = {LOOM_EXT_DEVICE_STREAM,
                                     LOOM_EXT_NORM_GATE,
                                     LOOM_EXT_ROPE_FREQS,
                                     LOOM_EXT_SUM_SQUARES_TOTAL,
                                     LOOM_EXT_CE_LOSS_TOTAL,
                                     LOOM_EXT_FP8,
                                     nullptr};

constexpr loom_backend_api kApi = {
    LOOM_BACKEND_API_SIZE_V2,
    create,
    destroy,
    get_info,
    alloc_tensor,
    free_tensor,
    to_host,
    from_host,
    synchronize,
    &kOps,
    get_ext,
};

}  // namespace

LOOM_PLUGIN(.description =
                "shapes without memory or compute: counts what a run would allocate (loom validate "
                "--memory)",
            .api = &kApi, .capabilities = kCapabilities)
