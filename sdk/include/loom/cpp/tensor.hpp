// Loom SDK C++ helpers: RAII tensors on a backend and a thin throwing wrapper of loom_ops.
#pragma once

#include <cstring>
#include <initializer_list>
#include <utility>
#include <vector>

#include "loom/cpp/plugin.hpp"

namespace loom {

class WeightGrads;  // weight_grads.hpp

// The active backend as the host hands it out, with calls that throw loom::Error.
class Backend {
 public:
  Backend() = default;
  explicit Backend(const loom_host* host) : host_(host) {
    check(host, host->get_backend(host->ctx, &ref_));
  }
  // A handle on a given backend instance (a wrapper's table, an older backend's in tests).
  Backend(const loom_host* host, loom_backend_ref ref) : host_(host), ref_(ref) {}
  const loom_host* host() const { return host_; }
  loom_backend* self() const { return ref_.self; }
  const loom_backend_api* api() const { return ref_.api; }
  const loom_ops& ops() const { return *ref_.api->ops; }
  // Calls an op: B.call(&loom_ops::copy, dst, src). The ops that take args structs have
  // positional wrappers below (loom::act_forward, loom::bias_add, ...).
  template <class Fn, class... Args>
  void call(Fn loom_ops::*op, Args&&... args) const {
    check(host_, (ops().*op)(ref_.self, std::forward<Args>(args)...));
  }
  // The stream of the instance's loom.device-stream/1, or NULL (backend/cpu's, and a backend
  // without the capability): what a caller passes as loom_comm_args.stream.
  void* stream() const {
    const loom_device_stream* ds = find_device_stream();
    return ds ? ds->stream : nullptr;
  }
  // The instance's loom.device-stream/1 table (backend.h): enqueue your own device work on
  // its stream, never synchronise the device. Throws, naming `who`, for a backend without it.
  const loom_device_stream& device_stream(const std::string& who) const {
    const loom_device_stream* ds = find_device_stream();
    require(ds != nullptr,
            who + ": the backend does not provide " LOOM_EXT_DEVICE_STREAM
                  " (its device and stream), which this plugin enqueues its work on",
            LOOM_ERR_UNIMPLEMENTED);
    return *ds;
  }
  // Where a split backward's B records its weight-gradient computations on this handle
  // (weight_grads.hpp), or NULL: compute them at once. A model's own handle carries it, so
  // that separate model instances never share one.
  WeightGrads* weight_grads() const { return weight_grads_; }
  void set_weight_grads(WeightGrads* w) const { weight_grads_ = w; }

 private:
  // loom.device-stream/1 as the instance lends it, or NULL when it does not.
  const loom_device_stream* find_device_stream() const;

  const loom_host* host_ = nullptr;
  loom_backend_ref ref_{nullptr, nullptr};
  mutable WeightGrads* weight_grads_ = nullptr;
};

// The table of capability `id` a backend instance lends through get_ext, as T (a struct that
// opens with loom_ext), or NULL where it lends none of at least `min_size` bytes.
template <class T>
const T* backend_ext(const loom_backend_ref& be, const char* id, size_t min_size) {
  const loom_ext* e = be.api && be.api->struct_size >= LOOM_BACKEND_API_SIZE_V2 && be.api->get_ext
                          ? be.api->get_ext(be.self, id)
                          : nullptr;
  return e != nullptr && e->struct_size >= min_size ? reinterpret_cast<const T*>(e) : nullptr;
}

// The loom.device-stream/1 table of a backend instance, or NULL for one without it.
inline const loom_device_stream* find_device_stream(const loom_backend_ref& be) {
  return backend_ext<loom_device_stream>(be, LOOM_EXT_DEVICE_STREAM, LOOM_DEVICE_STREAM_SIZE_V1);
}
inline const loom_device_stream* Backend::find_device_stream() const {
  return loom::find_device_stream(ref_);
}

// An owning tensor allocated on a backend (zero-filled), freed on destruction.
class Tensor {
 public:
  Tensor() = default;
  Tensor(const Backend& be, DLDataType dtype, std::initializer_list<int64_t> shape)
      : Tensor(be, dtype, std::vector<int64_t>(shape)) {}
  Tensor(const Backend& be, DLDataType dtype, const std::vector<int64_t>& shape) : be_(&be) {
    check(be.host(),
          be.api()->alloc_tensor(be.self(), dtype, (int)shape.size(), shape.data(), &t_));
  }
  ~Tensor() { reset(); }
  Tensor(Tensor&& o) noexcept : be_(o.be_), t_(o.t_) { o.t_ = nullptr; }
  Tensor& operator=(Tensor&& o) noexcept {
    if (this != &o) {
      reset();
      be_ = o.be_;
      t_ = o.t_;
      o.t_ = nullptr;
    }
    return *this;
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  // A non-owning alias of `t` (never freed through it): one buffer that several holders
  // reach by the same field, such as the scratch recomputed activations share.
  static Tensor borrow(DLTensor* t) {
    Tensor out;
    out.t_ = t;
    return out;
  }

  void reset() {
    if (t_ && be_) be_->api()->free_tensor(be_->self(), t_);
    t_ = nullptr;
  }
  DLTensor* get() const { return t_; }
  operator DLTensor*() const { return t_; }
  explicit operator bool() const { return t_ != nullptr; }
  int64_t numel() const { return t_ ? loom_tensor_numel(t_) : 0; }
  size_t bytes() const { return t_ ? (size_t)numel() * loom_dtype_bytes(t_->dtype) : 0; }

  template <class T>
  void upload(const std::vector<T>& src) {
    require(src.size() * sizeof(T) == bytes(), "upload: size mismatch");
    check(be_->host(), be_->api()->from_host(be_->self(), t_, src.data(), bytes()));
  }
  template <class T>
  std::vector<T> download() const {
    std::vector<T> out(bytes() / sizeof(T));
    check(be_->host(), be_->api()->to_host(be_->self(), t_, out.data(), bytes()));
    return out;
  }

 private:
  const Backend* be_ = nullptr;
  DLTensor* t_ = nullptr;
};

// A non-owning view with its own shape storage: reshape or slice rows of a compact tensor.
class View {
 public:
  View() = default;
  View(const DLTensor* base, std::vector<int64_t> shape, int64_t elem_offset = 0)
      : shape_(std::move(shape)) {
    t_ = *base;
    t_.ndim = (int)shape_.size();
    t_.shape = shape_.data();
    t_.strides = nullptr;
    t_.byte_offset = base->byte_offset + (uint64_t)elem_offset * loom_dtype_bytes(base->dtype);
  }
  View(const View& o) : View(&o.t_, o.shape_) { t_.byte_offset = o.t_.byte_offset; }
  View& operator=(const View& o) {
    shape_ = o.shape_;
    t_ = o.t_;
    t_.shape = shape_.data();
    return *this;
  }
  DLTensor* get() { return &t_; }
  operator DLTensor*() { return &t_; }
  operator const DLTensor*() const { return &t_; }

 private:
  std::vector<int64_t> shape_;
  DLTensor t_{};
};

// Whether a tensor's elements are contiguous in row-major order (no strides, or strides
// that say so; extents of 1 may have any stride).
inline bool is_compact(const DLTensor* t) {
  if (t->strides == nullptr) return true;
  int64_t expect = 1;
  for (int d = t->ndim - 1; d >= 0; --d) {
    if (t->shape[d] != 1 && t->strides[d] != expect) return false;
    expect *= t->shape[d];
  }
  return true;
}

// c(m,n) = alpha op(a)(m,k) @ op(b)(k,n) + beta c, with row pitches and element offsets;
// `ext` chains extensions on the args (an epilogue, loom/cpp/gemm_epilogue.hpp).
inline void gemm_scaled(const Backend& be, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                        double alpha, const DLTensor* a, int64_t lda, int64_t offa,
                        const DLTensor* b, int64_t ldb, int64_t offb, DLTensor* c, int64_t ldc,
                        int64_t offc, double beta, const loom_ext* ext = nullptr) {
  loom_gemm_args g{};
  g.struct_size = LOOM_GEMM_ARGS_SIZE_V2;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.alpha = alpha;
  g.beta = beta;
  g.a = a;
  g.lda = lda;
  g.offset_a = offa;
  g.b = b;
  g.ldb = ldb;
  g.offset_b = offb;
  g.c = c;
  g.ldc = ldc;
  g.offset_c = offc;
  g.batch = 1;
  g.ext = ext;
  be.call(&loom_ops::gemm, &g);
}
// The same with alpha = 1.
inline void gemm(const Backend& be, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                 const DLTensor* a, int64_t lda, int64_t offa, const DLTensor* b, int64_t ldb,
                 int64_t offb, DLTensor* c, int64_t ldc, int64_t offc, double beta,
                 const loom_ext* ext = nullptr) {
  gemm_scaled(be, ta, tb, m, n, k, 1.0, a, lda, offa, b, ldb, offb, c, ldc, offc, beta, ext);
}

// s <- softmax(scale * s) per row in place, causal and optionally a sliding window
// (loom_softmax_args); lse may be NULL.
inline void softmax_forward(const Backend& be, DLTensor* s, DLTensor* lse, double scale,
                            bool causal, int64_t window = 0) {
  loom_softmax_args a{};
  a.struct_size = LOOM_SOFTMAX_ARGS_SIZE_V2;
  a.s = s;
  a.lse = lse;
  a.scale = scale;
  a.causal = causal ? 1 : 0;
  a.window = window;
  be.call(&loom_ops::softmax_forward, &a);
}

// The sum of x's squared elements in double (one tensor of loom_sum_squares_args).
inline double sum_squares(const Backend& be, const DLTensor* x) {
  double out = 0;
  const loom_sum_squares_args a{LOOM_SUM_SQUARES_ARGS_SIZE_V2, &x, 1, &out, nullptr};
  be.call(&loom_ops::sum_squares, &a);
  return out;
}

// The norm ops with positional arguments, over loom_ops::norm_forward/norm_backward.
inline void layernorm_forward(const Backend& be, DLTensor* out, DLTensor* mean, DLTensor* rstd,
                              const DLTensor* inp, const DLTensor* weight, const DLTensor* bias,
                              double eps) {
  const loom_norm_fwd_args a{LOOM_NORM_FWD_ARGS_SIZE_V2,
                             LOOM_NORM_LAYER,
                             out,
                             mean,
                             rstd,
                             inp,
                             weight,
                             bias,
                             eps,
                             nullptr};
  be.call(&loom_ops::norm_forward, &a);
}
inline void rmsnorm_forward(const Backend& be, DLTensor* out, DLTensor* rstd, const DLTensor* inp,
                            const DLTensor* weight, double eps) {
  const loom_norm_fwd_args a{LOOM_NORM_FWD_ARGS_SIZE_V2,
                             LOOM_NORM_RMS,
                             out,
                             nullptr,
                             rstd,
                             inp,
                             weight,
                             nullptr,
                             eps,
                             nullptr};
  be.call(&loom_ops::norm_forward, &a);
}
inline void layernorm_backward(const Backend& be, DLTensor* dinp, DLTensor* dweight,
                               DLTensor* dbias, const DLTensor* dout, const DLTensor* inp,
                               const DLTensor* weight, const DLTensor* mean, const DLTensor* rstd) {
  const loom_norm_bwd_args a{LOOM_NORM_BWD_ARGS_SIZE_V2,
                             LOOM_NORM_LAYER,
                             dinp,
                             dweight,
                             dbias,
                             dout,
                             inp,
                             weight,
                             mean,
                             rstd,
                             nullptr};
  be.call(&loom_ops::norm_backward, &a);
}
inline void rmsnorm_backward(const Backend& be, DLTensor* dinp, DLTensor* dweight,
                             const DLTensor* dout, const DLTensor* inp, const DLTensor* weight,
                             const DLTensor* rstd) {
  const loom_norm_bwd_args a{LOOM_NORM_BWD_ARGS_SIZE_V2,
                             LOOM_NORM_RMS,
                             dinp,
                             dweight,
                             nullptr,
                             dout,
                             inp,
                             weight,
                             nullptr,
                             rstd,
                             nullptr};
  be.call(&loom_ops::norm_backward, &a);
}

// RoPE with positional arguments, over loom_ops::rope_forward/rope_backward; `freqs`
// (loom.rope-freqs/1: a scaled frequency table) or NULL for theta's.
inline void rope_forward(const Backend& be, DLTensor* x, int64_t pos_offset, double theta,
                         const loom_rope_freqs* freqs = nullptr) {
  const loom_rope_args a{LOOM_ROPE_ARGS_SIZE_V2, x, pos_offset, theta,
                         freqs ? &freqs->base : nullptr};
  be.call(&loom_ops::rope_forward, &a);
}
inline void rope_backward(const Backend& be, DLTensor* dx, int64_t pos_offset, double theta,
                          const loom_rope_freqs* freqs = nullptr) {
  const loom_rope_args a{LOOM_ROPE_ARGS_SIZE_V2, dx, pos_offset, theta,
                         freqs ? &freqs->base : nullptr};
  be.call(&loom_ops::rope_backward, &a);
}

// dst[offset_dst + r * ld_dst + j] = src[offset_src + r * ld_src + j] for r < rows, j < cols
// (ABI 2.21's copy_strided; a backend built before it gets one compact copy per row).
inline void copy_strided(const Backend& be, DLTensor* dst, int64_t ld_dst, int64_t offset_dst,
                         const DLTensor* src, int64_t ld_src, int64_t offset_src, int64_t rows,
                         int64_t cols) {
  if (rows == 0 || cols == 0) return;
  if (be.ops().struct_size >= LOOM_OPS_SIZE_V2_21 && be.ops().copy_strided) {
    const loom_copy_strided_args a{LOOM_COPY_STRIDED_ARGS_SIZE_V2_21,
                                   dst,
                                   ld_dst,
                                   offset_dst,
                                   src,
                                   ld_src,
                                   offset_src,
                                   rows,
                                   cols,
                                   nullptr};
    be.call(&loom_ops::copy_strided, &a);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    View d(dst, {cols}, offset_dst + r * ld_dst);
    View s(src, {cols}, offset_src + r * ld_src);
    be.call(&loom_ops::copy, d.get(), (const DLTensor*)s);
  }
}

// ABI 2.22's Mamba-2 ops with positional arguments, over their args structs (backend.h says
// what each computes). There is no fallback: a backend built before 2.22 (a shorter table)
// is refused here, naming the op, and one without the kernels refuses them itself.
namespace detail {
// `slot` of a table at least as long as ABI 2.22's, or an error naming `op`.
template <class Slot>
void require_ops_v2_22(const Backend& be, const char* op, Slot loom_ops::*slot) {
  const loom_ops& o = be.ops();
  require(o.struct_size >= LOOM_OPS_SIZE_V2_22 && o.*slot != nullptr,
          std::string(op) +
              ": the backend lacks this op (its op table predates ABI 2.22, which brought "
              "Mamba-2's ops and " LOOM_EXT_NORM_GATE ", or leaves the slot NULL)",
          LOOM_ERR_UNIMPLEMENTED);
}
}  // namespace detail
// out(B,T,C) = [silu](bias + causal depthwise convolution of x(B,T,C) with weight(C,K)); bias
// and state (B,K-1,C: generation's last inputs, read and updated) may be NULL.
inline void ssm_conv_forward(const Backend& be, DLTensor* out, const DLTensor* x,
                             const DLTensor* weight, const DLTensor* bias, bool silu,
                             DLTensor* state) {
  detail::require_ops_v2_22(be, "ssm_conv_forward", &loom_ops::ssm_conv_forward);
  const loom_ssm_conv_args a{
      LOOM_SSM_CONV_ARGS_SIZE_V2_22, out, x, weight, bias, silu ? 1 : 0, state, nullptr};
  be.call(&loom_ops::ssm_conv_forward, &a);
}
// dx =; dweight, dbias (NULL without a bias) +=; from zero history.
inline void ssm_conv_backward(const Backend& be, DLTensor* dx, DLTensor* dweight, DLTensor* dbias,
                              const DLTensor* dout, const DLTensor* x, const DLTensor* weight,
                              const DLTensor* bias, bool silu) {
  detail::require_ops_v2_22(be, "ssm_conv_backward", &loom_ops::ssm_conv_backward);
  const loom_ssm_conv_bwd_args a{LOOM_SSM_CONV_BWD_ARGS_SIZE_V2_22,
                                 dx,
                                 dweight,
                                 dbias,
                                 dout,
                                 x,
                                 weight,
                                 bias,
                                 silu ? 1 : 0,
                                 nullptr};
  be.call(&loom_ops::ssm_conv_backward, &a);
}
// The selective scan: y(B,T,H,P) from x, dt(B,T,H), B and C (B,T,G,N), A_log, D, dt_bias (H),
// in chunks of `chunk` steps; chunk_states (B,ceil(T/chunk),H,P,N) for the backward and
// state (B,H,P,N, generation's, read and updated) may be NULL.
inline void ssm_scan_forward(const Backend& be, DLTensor* y, const DLTensor* x, const DLTensor* dt,
                             const DLTensor* A_log, const DLTensor* B, const DLTensor* C,
                             const DLTensor* D, const DLTensor* dt_bias, int64_t chunk,
                             DLTensor* chunk_states, DLTensor* state) {
  detail::require_ops_v2_22(be, "ssm_scan_forward", &loom_ops::ssm_scan_forward);
  const loom_ssm_scan_args a{LOOM_SSM_SCAN_ARGS_SIZE_V2_22,
                             y,
                             x,
                             dt,
                             A_log,
                             B,
                             C,
                             D,
                             dt_bias,
                             chunk,
                             chunk_states,
                             state,
                             nullptr};
  be.call(&loom_ops::ssm_scan_forward, &a);
}
// dx, ddt, dB, dC =; dA_log, dD, ddt_bias +=; from the forward's chunk_states (same chunk).
inline void ssm_scan_backward(const Backend& be, DLTensor* dx, DLTensor* ddt, DLTensor* dA_log,
                              DLTensor* dB, DLTensor* dC, DLTensor* dD, DLTensor* ddt_bias,
                              const DLTensor* dy, const DLTensor* x, const DLTensor* dt,
                              const DLTensor* A_log, const DLTensor* B, const DLTensor* C,
                              const DLTensor* D, const DLTensor* dt_bias, int64_t chunk,
                              const DLTensor* chunk_states) {
  detail::require_ops_v2_22(be, "ssm_scan_backward", &loom_ops::ssm_scan_backward);
  const loom_ssm_scan_bwd_args a{LOOM_SSM_SCAN_BWD_ARGS_SIZE_V2_22,
                                 dx,
                                 ddt,
                                 dA_log,
                                 dB,
                                 dC,
                                 dD,
                                 ddt_bias,
                                 dy,
                                 x,
                                 dt,
                                 A_log,
                                 B,
                                 C,
                                 D,
                                 dt_bias,
                                 chunk,
                                 chunk_states,
                                 nullptr};
  be.call(&loom_ops::ssm_scan_backward, &a);
}
// Mamba-2's gated RMSNorm (loom.norm-gate/1 on norm_forward/_backward): out(N,C) = g * rstd *
// weight, g = inp * silu(gate), rstd (N * C / group_size) per group of group_size channels.
inline void gated_rmsnorm_forward(const Backend& be, DLTensor* out, DLTensor* rstd,
                                  const DLTensor* inp, const DLTensor* gate, const DLTensor* weight,
                                  double eps, int64_t group_size) {
  detail::require_ops_v2_22(be, "gated_rmsnorm_forward", &loom_ops::norm_forward);
  const loom_norm_gate g{{sizeof(loom_norm_gate), LOOM_EXT_NORM_GATE, LOOM_EXT_REQUIRED, nullptr},
                         gate,
                         nullptr,
                         group_size};
  const loom_norm_fwd_args a{LOOM_NORM_FWD_ARGS_SIZE_V2,
                             LOOM_NORM_RMS,
                             out,
                             nullptr,
                             rstd,
                             inp,
                             weight,
                             nullptr,
                             eps,
                             &g.base};
  be.call(&loom_ops::norm_forward, &a);
}
// dinp, dgate =; dweight +=; rstd the forward's.
inline void gated_rmsnorm_backward(const Backend& be, DLTensor* dinp, DLTensor* dgate,
                                   DLTensor* dweight, const DLTensor* dout, const DLTensor* inp,
                                   const DLTensor* gate, const DLTensor* weight,
                                   const DLTensor* rstd, int64_t group_size) {
  detail::require_ops_v2_22(be, "gated_rmsnorm_backward", &loom_ops::norm_backward);
  const loom_norm_gate g{{sizeof(loom_norm_gate), LOOM_EXT_NORM_GATE, LOOM_EXT_REQUIRED, nullptr},
                         gate,
                         dgate,
                         group_size};
  const loom_norm_bwd_args a{LOOM_NORM_BWD_ARGS_SIZE_V2,
                             LOOM_NORM_RMS,
                             dinp,
                             dweight,
                             nullptr,
                             dout,
                             inp,
                             weight,
                             nullptr,
                             rstd,
                             &g.base};
  be.call(&loom_ops::norm_backward, &a);
}

// The other ops with positional arguments, over their args structs (backend.h says what
// each computes). A caller that needs a field of a later 2.x, or an extension, fills the
// struct itself and uses Backend::call.
inline void bias_add(const Backend& be, DLTensor* out, const DLTensor* bias) {
  const loom_bias_add_args a{LOOM_BIAS_ADD_ARGS_SIZE_V2, out, bias, nullptr};
  be.call(&loom_ops::bias_add, &a);
}
inline void bias_backward(const Backend& be, DLTensor* dbias, const DLTensor* dout) {
  const loom_bias_bwd_args a{LOOM_BIAS_BWD_ARGS_SIZE_V2, dbias, dout, nullptr};
  be.call(&loom_ops::bias_backward, &a);
}
inline void embedding_forward(const Backend& be, DLTensor* out, const DLTensor* ids,
                              const DLTensor* table, bool accumulate) {
  const loom_embedding_fwd_args a{
      LOOM_EMBEDDING_FWD_ARGS_SIZE_V2, out, ids, table, accumulate ? 1 : 0, nullptr};
  be.call(&loom_ops::embedding_forward, &a);
}
inline void embedding_backward(const Backend& be, DLTensor* dtable, const DLTensor* ids,
                               const DLTensor* dout) {
  const loom_embedding_bwd_args a{LOOM_EMBEDDING_BWD_ARGS_SIZE_V2, dtable, ids, dout, nullptr};
  be.call(&loom_ops::embedding_backward, &a);
}
inline void act_forward(const Backend& be, loom_act_kind kind, DLTensor* out, const DLTensor* inp) {
  const loom_act_fwd_args a{LOOM_ACT_FWD_ARGS_SIZE_V2, kind, out, inp, nullptr};
  be.call(&loom_ops::act_forward, &a);
}
inline void act_backward(const Backend& be, loom_act_kind kind, DLTensor* dinp, const DLTensor* inp,
                         const DLTensor* dout) {
  const loom_act_bwd_args a{LOOM_ACT_BWD_ARGS_SIZE_V2, kind, dinp, inp, dout, nullptr};
  be.call(&loom_ops::act_backward, &a);
}
inline void softmax_backward(const Backend& be, DLTensor* ds, const DLTensor* p, const DLTensor* dp,
                             double scale) {
  const loom_softmax_bwd_args a{LOOM_SOFTMAX_BWD_ARGS_SIZE_V2, ds, p, dp, scale, nullptr};
  be.call(&loom_ops::softmax_backward, &a);
}
// `total` (a (1) f64 tensor, loom.ce-loss-total/1 where the backend lists it): the losses'
// sum is added there on the device as well.
inline void softmax_cross_entropy(const Backend& be, DLTensor* losses, DLTensor* dlogits,
                                  const DLTensor* logits, const DLTensor* targets, double dloss,
                                  DLTensor* total = nullptr) {
  const loom_ce_loss_total ext{
      {sizeof(loom_ce_loss_total), LOOM_EXT_CE_LOSS_TOTAL, LOOM_EXT_REQUIRED, nullptr}, total};
  const loom_cross_entropy_args a{
      LOOM_CROSS_ENTROPY_ARGS_SIZE_V2, losses, dlogits, logits, targets, dloss,
      total ? &ext.base : nullptr};
  be.call(&loom_ops::softmax_cross_entropy, &a);
}
inline void vocab_ce_stats(const Backend& be, DLTensor* stats, const DLTensor* logits,
                           const DLTensor* targets, int64_t vocab_start) {
  const loom_vocab_ce_stats_args a{
      LOOM_VOCAB_CE_STATS_ARGS_SIZE_V2, stats, logits, targets, vocab_start, nullptr};
  be.call(&loom_ops::vocab_ce_stats, &a);
}
inline void vocab_ce_backward(const Backend& be, DLTensor* dlogits, const DLTensor* logits,
                              const DLTensor* targets, int64_t vocab_start, const DLTensor* lse,
                              double dloss) {
  const loom_vocab_ce_bwd_args a{
      LOOM_VOCAB_CE_BWD_ARGS_SIZE_V2, dlogits, logits, targets, vocab_start, lse, dloss, nullptr};
  be.call(&loom_ops::vocab_ce_backward, &a);
}

}  // namespace loom
