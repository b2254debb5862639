// attention/flash-cuda: FlashAttention-2 style fused attention for backend/cuda tensors
// (bf16, f16, and f32 for testing; head dims 64 and 128; causal or not; T <= S; GQA; the
// window, variable-length, bias and partial extensions of attention.h). The
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
#include "loom/cpp/attention_merge.hpp"
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
  const flash::Dims d{a.B, a.T, a.S, a.Hq, a.Hkv, a.D, a.T};
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

size_t esize(const DLTensor* t) { return static_cast<size_t>(t->dtype.bits) / 8; }
size_t nbytes(const DLTensor* t) { return static_cast<size_t>(loom_tensor_numel(t)) * esize(t); }
char* bytes(const DLTensor* t, const char* name) { return static_cast<char*>(ptr(t, name)); }

// The masks on the chain (window, variable-length sequences, bias, partial), checked against
// the shapes (the SDK's check: the bias in q's dtype, dbias f32); any other required extension
// is refused by name.
loom::AttentionMasks masks(const loom_ext* ext, int causal, const flash::Dims& d,
                           const DLTensor* q) {
  return loom::attention_masks("attention/flash-cuda", ext, causal,
                               {d.B, d.T, d.S, d.Hq, d.Hkv, d.D, d.Hq / d.Hkv}, q, true);
}

// The kernels' view of the masks: the bias (Hq, T, S) by its strides, which a variable-length
// sequence reads from its corner [0, Lq) x [0, Lk) (attention.h); ptr checks that both are
// compact CUDA tensors.
flash::Masks kernel_masks(const loom::AttentionMasks& m, const flash::Dims& d) {
  flash::Masks k;
  k.window = m.window;
  k.bias = m.bias ? ptr(m.bias, "bias") : nullptr;
  k.dbias = m.dbias ? static_cast<float*>(ptr(m.dbias, "dbias")) : nullptr;
  k.bias_h = d.T * d.S;
  k.bias_t = d.S;
  return k;
}

// One variable-length sequence as a batch of one: its dims and the element offsets of its
// first query row (q, out, dout, dq and dq's f32 accumulator), key row (k, v, dk, dv) and lse
// (and delta) value; lse keeps the whole row's stride (lseT = T).
struct Rows {
  flash::Dims d;
  int64_t q, k, l;
};
Rows rows(const flash::Dims& d, const loom::AttentionSeq& x) {
  return {{1, x.nq, x.nk, d.Hq, d.Hkv, d.D, d.T},
          (x.b * d.T + x.t0) * d.Hq * d.D,
          (x.b * d.S + x.s0) * d.Hkv * d.D,
          x.b * d.Hq * d.T + x.t0};
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
    const flash::Dims d = check(a.q, a.k, a.v, a.out, "out");
    const loom::AttentionMasks m = masks(a.ext, a.causal, d, a.q);
    if (a.lse) check_lse(a.lse, d);
    begin(a.q);
    const flash::Dtype dt = dtype_of(a.q->dtype);
    const flash::Masks mk = kernel_masks(m, d);
    char *q = bytes(a.q, "q"), *k = bytes(a.k, "k"), *v = bytes(a.v, "v"),
         *out = bytes(a.out, "out");
    float* lse = a.lse ? static_cast<float*>(ptr(a.lse, "lse")) : nullptr;
    if (!m.varlen) {
      cuda_check(flash::forward(dt, d, q, k, v, out, lse, static_cast<float>(a.scale),
                                a.causal != 0, mk, stream_),
                 "forward launch");
      return end();
    }
    // Rows in no sequence: out 0 and lse 0 (attention.h); each sequence a batch of one.
    cuda_check(cudaMemsetAsync(out, 0, nbytes(a.out), stream_), "cudaMemsetAsync");
    if (lse) cuda_check(cudaMemsetAsync(lse, 0, nbytes(a.lse), stream_), "memset");
    const size_t e = esize(a.q);
    for (const loom::AttentionSeq& x : m.seqs) {
      const Rows r = rows(d, x);
      cuda_check(flash::forward(dt, r.d, q + r.q * e, k + r.k * e, v + r.k * e, out + r.q * e,
                                lse ? lse + r.l : nullptr, static_cast<float>(a.scale),
                                a.causal != 0, mk, stream_),
                 "forward launch");
    }
    end();
  }

  void backward(const loom_attention_bwd_args& a) {
    const flash::Dims d = check(a.q, a.k, a.v, a.out, "out");
    check(a.q, a.k, a.v, a.dout, "dout");
    check(a.q, a.k, a.v, a.dq, "dq");
    check(a.q, a.dk, a.dv, a.q, "q");  // dk, dv: k's shape (checked below) and q's dtype
    for (int i = 0; i < 4; ++i)
      loom::require(a.dk->shape[i] == a.k->shape[i], "attention/flash-cuda: dk shape != k shape");
    // With loom.attention-partial/1, out and lse are the merged ones: P over these keys is
    // exp(scores - merged lse) and delta = rowsum(dout * merged out), as computed below.
    const loom::AttentionMasks m = masks(a.ext, a.causal, d, a.q);
    check_lse(a.lse, d);
    begin(a.q);
    ensure(d);
    const flash::Dtype dt = dtype_of(a.q->dtype);
    const flash::Masks mk = kernel_masks(m, d);
    const int64_t nq = d.B * d.T * d.Hq * d.D;
    char *dout = bytes(a.dout, "dout"), *q = bytes(a.q, "q"), *k = bytes(a.k, "k"),
         *v = bytes(a.v, "v"), *dk = bytes(a.dk, "dk"), *dv = bytes(a.dv, "dv");
    const float* lse = static_cast<const float*>(ptr(a.lse, "lse"));
    cuda_check(cudaMemsetAsync(dq_acc_, 0, static_cast<size_t>(nq) * sizeof(float), stream_),
               "cudaMemsetAsync");
    cuda_check(flash::backward_delta(dt, d, dout, ptr(a.out, "out"), delta_, stream_),
               "backward launch");
    const float scale = static_cast<float>(a.scale);
    if (!m.varlen) {
      cuda_check(flash::backward_tiles(dt, d, dout, q, k, v, lse, delta_, dq_acc_, dk, dv, scale,
                                       a.causal != 0, mk, stream_),
                 "backward launch");
    } else {  // key rows in no sequence get dk = dv = 0; dq's come from dq_acc's zeros
      cuda_check(cudaMemsetAsync(dk, 0, nbytes(a.dk), stream_), "cudaMemsetAsync");
      cuda_check(cudaMemsetAsync(dv, 0, nbytes(a.dv), stream_), "cudaMemsetAsync");
      const size_t e = esize(a.q);
      for (const loom::AttentionSeq& x : m.seqs) {
        const Rows r = rows(d, x);
        cuda_check(
            flash::backward_tiles(dt, r.d, dout + r.q * e, q + r.q * e, k + r.k * e, v + r.k * e,
                                  lse + r.l, delta_ + r.l, dq_acc_ + r.q, dk + r.k * e,
                                  dv + r.k * e, scale, a.causal != 0, mk, stream_),
            "backward launch");
      }
    }
    cuda_check(flash::backward_cast(dt, nq, dq_acc_, ptr(a.dq, "dq"), stream_), "backward launch");
    end();
  }

  // attention.h's merge (ABI 2.7): ring context parallelism's partial results, on the device.
  void merge(const loom_attention_merge_args& a) {
    const loom::MergeDims md = loom::merge_dims("attention/flash-cuda", a);
    loom::require(loom_dtype_eq(a.lse->dtype, loom_f32()),
                  "attention/flash-cuda: merge: lse must be f32");
    begin(a.out);
    const flash::Dims d{md.B, md.T, md.T, md.H, md.H, md.D, md.T};
    cuda_check(flash::merge(dtype_of(a.out->dtype), d, md.Tp, md.row0, ptr(a.out, "out"),
                            static_cast<float*>(ptr(a.lse, "lse")), ptr(a.part_out, "part_out"),
                            static_cast<const float*>(ptr(a.part_lse, "part_lse")), stream_),
               "merge launch");
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

loom_error* merge(loom_attention* a, const loom_attention_merge_args* args) {
  return loom::guard(cast(a)->host(), [&] { cast(a)->merge(*args); });
}

const loom_attention_api kApi = {
    LOOM_ATTENTION_API_SIZE_V2_7, create, destroy, forward, backward, merge};

// Every mask flash-cpu serves (the conformance suite computes each listed one against
// attention/reference on a GPU): variable-length sequences run one launch per sequence.
const char* const kCapabilities[] = {LOOM_EXT_ATTENTION_WINDOW, LOOM_EXT_ATTENTION_SEQLENS,
                                     LOOM_EXT_ATTENTION_BIAS, LOOM_EXT_ATTENTION_PARTIAL, nullptr};

const loom_param_spec kParams[] = {
    loom::param("deterministic", LOOM_PARAM_BOOL, "false",
                "set by train.deterministic; refused: the backward adds dQ atomically"),
};

}  // namespace

LOOM_PLUGIN(.description =
                "FlashAttention-2 style fused attention on backend/cuda tensors (bf16/f16/f32, "
                "head dim 64 or 128, causal, GQA, sliding windows, variable-length sequences, "
                "a score bias, partial attention; O(T) memory)",
            .params = kParams, .api = &kApi, .capabilities = kCapabilities)
