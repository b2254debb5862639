// attention/flash-cuda: FlashAttention-2 style fused attention for backend/cuda tensors
// (bf16, f16, and f32 for testing; head dims 64 and 128; causal or not; T <= S; GQA). The
// kernels are in flash_forward.cu / flash_backward.cu; this file checks arguments, owns the
// backward's fp32 workspace, and orders the work against the backend.
//
// Ordering: the kernels are enqueued on the backend's own stream, which the backend lends
// through loom.device-stream/1 (backend.h). Inputs the backend wrote are ordered before them
// and the backend's next op after them, with no synchronisation of the device or the host.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "flash_kernels.hpp"
#include "loom/cpp/attention_args.hpp"
#include "loom/cpp/cuda_device.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tensor.hpp"

namespace {

void cuda_check(cudaError_t e, const char* what) {
  loom::require(e == cudaSuccess,
                std::string("attention/flash-cuda: ") + what + ": " + cudaGetErrorString(e),
                LOOM_ERR_INTERNAL);
}

// Element pointer of a compact CUDA tensor of the expected shape rank.
void* ptr(const DLTensor* t, const char* name) {
  loom::require(t != nullptr, std::string("attention/flash-cuda: ") + name + " is required");
  loom::require(t->device.device_type == kDLCUDA,
                std::string("attention/flash-cuda: ") + name +
                    " is not on a CUDA device (this plugin needs backend/cuda)");
  if (t->strides) {
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; --i) {
      loom::require(t->shape[i] == 1 || t->strides[i] == expect,
                    std::string("attention/flash-cuda: ") + name + " is not compact");
      expect *= t->shape[i];
    }
  }
  return static_cast<char*>(t->data) + t->byte_offset;
}

flash::Dtype dtype_of(DLDataType d) {
  if (loom_dtype_eq(d, loom_bf16())) return flash::Dtype::kBF16;
  if (loom_dtype_eq(d, loom_f16())) return flash::Dtype::kF16;
  loom::require(loom_dtype_eq(d, loom_f32()), "attention/flash-cuda: q must be bf16, f16 or f32",
                LOOM_ERR_UNIMPLEMENTED);
  return flash::Dtype::kF32;
}

// Shapes as attention.h; every tensor of q's dtype except lse (f32, (B,Hq,T)).
flash::Dims check(const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* o,
                  const char* oname) {
  ptr(q, "q");
  ptr(k, "k");
  ptr(v, "v");
  ptr(o, oname);
  const loom::AttentionDims a = loom::attention_dims("attention/flash-cuda", q, k, v, o, oname);
  const flash::Dims d{a.B, a.T, a.S, a.Hq, a.Hkv, a.D};
  loom::require(
      d.D == 64 || d.D == 128,
      "attention/flash-cuda: head dim " + std::to_string(d.D) + " not supported (64 or 128)",
      LOOM_ERR_UNIMPLEMENTED);
  for (const DLTensor* t : {k, v, o})
    loom::require(loom_dtype_eq(t->dtype, q->dtype),
                  "attention/flash-cuda: q, k, v and outputs must share one dtype");
  return d;
}

void check_lse(const DLTensor* lse, const flash::Dims& d) {
  ptr(lse, "lse");
  loom::require(loom_dtype_eq(lse->dtype, loom_f32()), "attention/flash-cuda: lse must be f32");
  loom::attention_lse("attention/flash-cuda", lse,
                      {d.B, d.T, d.S, d.Hq, d.Hkv, d.D, d.Hkv > 0 ? d.Hq / d.Hkv : 0});
}

class FlashAttention {
 public:
  explicit FlashAttention(const loom_host* host) : host_(host) {}
  ~FlashAttention() {  // the stream is the backend's
    cudaFree(dq_acc_);
    cudaFree(delta_);
  }
  FlashAttention(const FlashAttention&) = delete;
  FlashAttention& operator=(const FlashAttention&) = delete;

  void forward(const loom_attention_fwd_args& a) {
    // No masks beyond causal yet: a required one (a sliding window) is refused by name.
    loom::require_known_exts(a.ext, {}, "attention/flash-cuda");
    const flash::Dims d = check(a.q, a.k, a.v, a.out, "out");
    if (a.lse) check_lse(a.lse, d);
    begin(a.q);
    cuda_check(
        flash::forward(dtype_of(a.q->dtype), d, ptr(a.q, "q"), ptr(a.k, "k"), ptr(a.v, "v"),
                       ptr(a.out, "out"), a.lse ? static_cast<float*>(ptr(a.lse, "lse")) : nullptr,
                       static_cast<float>(a.scale), a.causal != 0, stream_),
        "forward launch");
    end();
  }

  void backward(const loom_attention_bwd_args& a) {
    // No masks beyond causal yet: a required one (a sliding window) is refused by name.
    loom::require_known_exts(a.ext, {}, "attention/flash-cuda");
    const flash::Dims d = check(a.q, a.k, a.v, a.out, "out");
    check(a.q, a.k, a.v, a.dout, "dout");
    check(a.q, a.k, a.v, a.dq, "dq");
    check(a.q, a.dk, a.dv, a.q, "q");  // dk, dv: k's shape (checked below) and q's dtype
    for (int i = 0; i < 4; ++i)
      loom::require(a.dk->shape[i] == a.k->shape[i], "attention/flash-cuda: dk shape != k shape");
    check_lse(a.lse, d);
    begin(a.q);
    ensure(d);
    cuda_check(flash::backward(dtype_of(a.q->dtype), d, ptr(a.dout, "dout"), ptr(a.q, "q"),
                               ptr(a.k, "k"), ptr(a.v, "v"), ptr(a.out, "out"),
                               static_cast<const float*>(ptr(a.lse, "lse")), ptr(a.dq, "dq"),
                               ptr(a.dk, "dk"), ptr(a.dv, "dv"), dq_acc_, delta_,
                               static_cast<float>(a.scale), a.causal != 0, stream_),
               "backward launch");
    end();
  }

  const loom_host* host() const { return host_; }

 private:
  // The backend's stream (asked once) and its device, made current (see the top of the file).
  void begin(const DLTensor* q) {
    if (!stream_) {
      const loom::CudaStream s = loom::backend_cuda_stream(host_, "attention/flash-cuda");
      stream_ = s.stream;
      device_ = s.device;
    }
    loom::require(q->device.device_id == device_,
                  "attention/flash-cuda: tensors on GPU " + std::to_string(q->device.device_id) +
                      ", the backend's stream on GPU " + std::to_string(device_));
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  }
  // Launch errors surface here; the kernels themselves finish in stream order.
  void end() { cuda_check(cudaGetLastError(), "attention kernels"); }

  // The backward's fp32 workspace: dq accumulator (B,T,Hq,D) and delta (B,Hq,T). Grows
  // (at least doubling), never shrinks.
  void ensure(const flash::Dims& d) {
    const size_t nq = static_cast<size_t>(d.B * d.T * d.Hq * d.D);
    const size_t nr = static_cast<size_t>(d.B * d.Hq * d.T);
    grow(dq_acc_, dq_cap_, nq);
    grow(delta_, delta_cap_, nr);
  }
  static void grow(float*& p, size_t& cap, size_t need) {
    if (need <= cap && p) return;
    const size_t n = std::max<size_t>({need, 2 * cap, 1});
    cudaFree(p);
    p = nullptr;
    cap = 0;
    cuda_check(cudaMalloc(&p, n * sizeof(float)), "workspace cudaMalloc");
    cap = n;
  }

  const loom_host* host_;
  cudaStream_t stream_ = nullptr;  // the backend's (loom.device-stream/1)
  int device_ = -1;
  float *dq_acc_ = nullptr, *delta_ = nullptr;
  size_t dq_cap_ = 0, delta_cap_ = 0;
};

FlashAttention* cast(loom_attention* a) { return reinterpret_cast<FlashAttention*>(a); }

loom_error* create(const loom_host* host, const loom_config* cfg, loom_attention** out) {
  return loom::guard(host, [&] {
    // dQ sums its key tiles with float atomics (flash_backward.cu), in whatever order they
    // finish: no deterministic backward here, so say so rather than train differently.
    loom::require(!loom::Config(host, cfg).get_bool("deterministic"),
                  "attention/flash-cuda: deterministic = true (train.deterministic) asks for the "
                  "same bits on every run, but its backward adds dQ's key tiles atomically; use "
                  "attention/cudnn or attention/reference");
    const std::string why = loom::cuda_unavailable();
    loom::require(why.empty(), "attention/flash-cuda: " + why, LOOM_ERR_UNIMPLEMENTED);
    *out = reinterpret_cast<loom_attention*>(new FlashAttention(host));
  });
}
void destroy(loom_attention* a) { delete cast(a); }
loom_error* forward(loom_attention* a, const loom_attention_fwd_args* args) {
  return loom::guard(cast(a)->host(), [&] { cast(a)->forward(*args); });
}
loom_error* backward(loom_attention* a, const loom_attention_bwd_args* args) {
  return loom::guard(cast(a)->host(), [&] { cast(a)->backward(*args); });
}

const loom_attention_api kApi = {LOOM_ATTENTION_API_SIZE_V2,
                                 create,
                                 destroy,
                                 forward,
                                 backward,
                                 nullptr};  // merge: no partial attention (ABI 2.7) yet

const loom_param_spec kParams[] = {
    loom::param("deterministic", LOOM_PARAM_BOOL, "false",
                "set by train.deterministic; refused: the backward adds dQ atomically"),
};

}  // namespace

LOOM_PLUGIN(.description =
                "FlashAttention-2 style fused attention on backend/cuda tensors (bf16/f16/f32, "
                "head dim 64 or 128, causal, GQA; O(T) memory)",
            .params = kParams, .api = &kApi)
