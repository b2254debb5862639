// attention/flash-cpu: exact attention with FlashAttention-2's tiling on host memory
// (flash_kernels.hpp), for the CPU backend. Unlike attention/reference it never materialises
// the (B,Hq,T,S) probabilities and allocates nothing through the backend: per-thread
// workspace is O((T + S) * D + block_q * block_k). Tensors must be compact kDLCPU tensors
// of one dtype (f32, f64, bf16 or f16; f32 math for the 16-bit ones); lse is f32 or f64.
// Variable-length sequences (loom.attention-seqlens/1) run the same kernels once per
// sequence, on pointers into its batch row: a sequence is a batch of one. A bias
// (loom.attention-bias/1) is added to each tile's scores; its gradient is summed per (b, h).
#include <string>

#include "flash_kernels.hpp"
#include "loom/cpp/attention_args.hpp"
#include "loom/cpp/attention_merge.hpp"
#include "loom/cpp/plugin.hpp"

namespace {

std::string device_name(DLDeviceType t) {
  switch (t) {
    case kDLCPU:
      return "cpu";
    case kDLCUDA:
      return "cuda";
    case kDLCUDAHost:
      return "cuda-host";
    default:
      return "device type " + std::to_string((int)t);
  }
}

// Host pointer of a compact kDLCPU tensor; `what` names it in errors.
void* host_data(const DLTensor* t, const char* what) {
  const std::string w = std::string("attention/flash-cpu: ") + what;
  loom::require(t->device.device_type == kDLCPU,
                w + " lives on " + device_name(t->device.device_type) +
                    " memory; flash-cpu runs on host memory only (use backend = \"cpu\", or "
                    "attention.plugin = \"reference\" on other backends)");
  if (t->strides) {
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; --i) {
      loom::require(t->shape[i] == 1 || t->strides[i] == expect, w + " is not compact");
      expect *= t->shape[i];
    }
  }
  return static_cast<char*>(t->data) + t->byte_offset;
}

// attention.h's shape contract (loom/cpp/attention_args.hpp); tiles and scale come later.
const char* const kWho = "attention/flash-cpu";

flash::Dims check_shapes(const DLTensor* q, const DLTensor* k, const DLTensor* v,
                         const DLTensor* out, int causal) {
  const loom::AttentionDims a = loom::attention_dims(kWho, q, k, v, out, "out", causal != 0);
  return flash::Dims{a.B, a.T, a.S, a.Hq, a.Hkv, a.D, a.G, 0, 0, 0, false};
}
loom::AttentionDims dims(const flash::Dims& d) { return {d.B, d.T, d.S, d.Hq, d.Hkv, d.D, d.G}; }

// fn(sub, qrow, krow, lse0) for the whole batch (the masks' sequences absent), or once per
// sequence: sub is a batch of one (nq, nk) whose q rows start at row qrow of the flattened
// (B*T) queries, k rows at krow of the (B*S) keys and lse values at lse0, heads apart by T.
template <class Fn>
void for_each_seq(const flash::Dims& d, const loom::AttentionMasks& m, Fn&& fn) {
  if (!m.varlen) return fn(d, 0, 0, 0);
  for (const loom::AttentionSeq& s : m.seqs) {
    flash::Dims sub = d;
    sub.B = 1, sub.T = s.nq, sub.S = s.nk, sub.lse_pitch = d.T;
    fn(sub, s.b * d.T + s.t0, s.b * d.S + s.s0, s.b * d.Hq * d.T + s.t0);
  }
}

// Zeros a compact tensor: the rows no sequence covers (attention.h).
template <class St>
void zero(St* p, const DLTensor* t) {
  std::fill(p, p + loom_tensor_numel(t), St{});
}

void same_dtype(DLDataType dt, std::initializer_list<const DLTensor*> ts) {
  for (const DLTensor* t : ts)
    loom::require(loom_dtype_eq(t->dtype, dt),
                  "attention/flash-cpu: q, k, v, out and the gradients must share one dtype");
}

void check_lse(const DLTensor* lse, const flash::Dims& d) {
  loom::attention_lse(kWho, lse, {d.B, d.T, d.S, d.Hq, d.Hkv, d.D, d.G});
  loom::require(loom_dtype_eq(lse->dtype, loom_f32()) || loom_dtype_eq(lse->dtype, loom_f64()),
                "attention/flash-cpu: lse must be f32 or f64");
}

// Calls fn(St{}, A{}) with the storage and accumulation types of `dt`.
template <class Fn>
void dispatch(DLDataType dt, Fn&& fn) {
  if (loom_dtype_eq(dt, loom_f32()))
    fn(float{}, float{});
  else if (loom_dtype_eq(dt, loom_f64()))
    fn(double{}, double{});
  else if (loom_dtype_eq(dt, loom_bf16()))
    fn(flash::Bf16{}, float{});
  else if (loom_dtype_eq(dt, loom_f16()))
    fn(flash::F16{}, float{});
  else
    throw loom::Error(LOOM_ERR_UNIMPLEMENTED,
                      "attention/flash-cpu: dtype must be f32, f64, bf16 or f16");
}

class FlashCpuAttention {
 public:
  FlashCpuAttention(const loom_host* host, int64_t bq, int64_t bk)
      : host_(host), bq_(bq), bk_(bk) {}

  void forward(const loom_attention_fwd_args& a) {
    flash::Dims d = check_shapes(a.q, a.k, a.v, a.out, a.causal);
    same_dtype(a.q->dtype, {a.k, a.v, a.out});
    const loom::AttentionMasks m = tune(d, a.scale, a.causal, a.ext, a.q);
    if (a.lse) check_lse(a.lse, d);
    dispatch(a.q->dtype, [&](auto st, auto acc) {
      using St = decltype(st);
      using A = decltype(acc);
      auto* q = static_cast<const St*>(host_data(a.q, "q"));
      auto* k = static_cast<const St*>(host_data(a.k, "k"));
      auto* v = static_cast<const St*>(host_data(a.v, "v"));
      auto* o = static_cast<St*>(host_data(a.out, "out"));
      auto* bias = m.bias ? static_cast<const St*>(host_data(m.bias, "bias")) : nullptr;
      auto run = [&](auto* lse) {
        if (m.varlen) zero(o, a.out);
        if (m.varlen && lse) zero(lse, a.lse);
        const int64_t qp = d.Hq * d.D, kp = d.Hkv * d.D;
        for_each_seq(d, m, [&](const flash::Dims& x, int64_t qr, int64_t kr, int64_t l0) {
          flash::forward<A>(x, q + qr * qp, k + kr * kp, v + kr * kp, o + qr * qp,
                            lse ? lse + l0 : lse, bias);
        });
      };
      if (!a.lse)
        run(static_cast<float*>(nullptr));
      else if (a.lse->dtype.bits == 64)
        run(static_cast<double*>(host_data(a.lse, "lse")));
      else
        run(static_cast<float*>(host_data(a.lse, "lse")));
    });
  }

  void backward(const loom_attention_bwd_args& a) {
    flash::Dims d = check_shapes(a.q, a.k, a.v, a.out, a.causal);
    loom::attention_dims(kWho, a.q, a.k, a.v, a.dout, "dout", a.causal != 0);
    loom::attention_grads(kWho, a.q, a.k, a.dq, a.dk, a.dv);
    same_dtype(a.q->dtype, {a.k, a.v, a.out, a.dout, a.dq, a.dk, a.dv});
    const loom::AttentionMasks m = tune(d, a.scale, a.causal, a.ext, a.q);
    if (a.lse) check_lse(a.lse, d);
    dispatch(a.q->dtype, [&](auto st, auto acc) {
      using St = decltype(st);
      using A = decltype(acc);
      auto in = [](const DLTensor* t, const char* w) {
        return static_cast<const St*>(host_data(t, w));
      };
      auto io = [](DLTensor* t, const char* w) { return static_cast<St*>(host_data(t, w)); };
      St *dq = io(a.dq, "dq"), *dk = io(a.dk, "dk"), *dv = io(a.dv, "dv");
      const St* bias = m.bias ? in(m.bias, "bias") : nullptr;
      A* dbias = m.dbias ? static_cast<A*>(host_data(m.dbias, "dbias")) : nullptr;
      if (m.varlen) zero(dq, a.dq), zero(dk, a.dk), zero(dv, a.dv);
      // An lse coarser than the accumulation (f32 lse of f64 data, as the model saves it)
      // would cap the gradients at f32 accuracy: recompute it in A instead.
      const bool coarse = !a.lse || (sizeof(A) == 8 && a.lse->dtype.bits == 32);
      // A merged lse is not this call's: it cannot be recomputed from these keys.
      loom::require(!m.partial || !coarse, "attention/flash-cpu: " LOOM_EXT_ATTENTION_PARTIAL
                                           " needs the merged lse, in f64 for f64 data");
      const int64_t qp = d.Hq * d.D, kp = d.Hkv * d.D;
      auto run = [&](const auto* lse) {
        for_each_seq(d, m, [&](const flash::Dims& x, int64_t qr, int64_t kr, int64_t l0) {
          flash::backward<A>(x, in(a.dout, "dout") + qr * qp, in(a.q, "q") + qr * qp,
                             in(a.k, "k") + kr * kp, in(a.v, "v") + kr * kp,
                             in(a.out, "out") + qr * qp, lse ? lse + l0 : lse, coarse, dq + qr * qp,
                             dk + kr * kp, dv + kr * kp, bias, dbias);
        });
      };
      if (!a.lse)
        run(static_cast<const float*>(nullptr));
      else if (a.lse->dtype.bits == 64)
        run(static_cast<const double*>(host_data(a.lse, "lse")));
      else
        run(static_cast<const float*>(host_data(a.lse, "lse")));
    });
  }

  // attention.h's merge, on the host memory the plugin computes in.
  void merge(const loom_attention_merge_args& a) {
    const loom::MergeDims d = loom::merge_dims(kWho, a);
    dispatch(a.out->dtype, [&](auto st, auto) {
      using St = decltype(st);
      auto run = [&](auto* lse, const auto* part_lse) {
        loom::merge_partial(
            d, static_cast<St*>(host_data(a.out, "out")), lse,
            static_cast<const St*>(host_data(a.part_out, "part_out")), part_lse,
            [](St x) { return (double)flash::widen(x); },
            [](double x) { return flash::narrow<St>(x); });
      };
      if (a.lse->dtype.bits == 64)
        run(static_cast<double*>(host_data(a.lse, "lse")),
            static_cast<const double*>(host_data(a.part_lse, "part_lse")));
      else
        run(static_cast<float*>(host_data(a.lse, "lse")),
            static_cast<const float*>(host_data(a.part_lse, "part_lse")));
    });
  }

  const loom_host* host() const { return host_; }

 private:
  loom::AttentionMasks tune(flash::Dims& d, double scale, int causal, const loom_ext* ext,
                            const DLTensor* q) const {
    d.bq = bq_;
    d.bk = bk_;
    d.scale = scale;
    d.causal = causal != 0;
    loom::AttentionMasks m = loom::attention_masks(kWho, ext, causal, dims(d), q, true);
    d.window = m.window;
    d.bias_T = d.T;
    d.bias_S = d.S;
    return m;
  }

  const loom_host* host_;
  int64_t bq_, bk_;
};

FlashCpuAttention* cast(loom_attention* a) { return reinterpret_cast<FlashCpuAttention*>(a); }

loom_error* create(const loom_host* host, const loom_config* cfg, loom_attention** out) {
  return loom::guard(host, [&] {
    loom::Config c(host, cfg);
    const int64_t bq = c.get_int("block_q"), bk = c.get_int("block_k");
    loom::require(bq >= 1 && bk >= 1, "attention/flash-cpu: block_q and block_k must be >= 1");
    *out = reinterpret_cast<loom_attention*>(new FlashCpuAttention(host, bq, bk));
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

const loom_param_spec kParams[] = {
    loom::param("block_q", LOOM_PARAM_INT, "64", "queries per tile", 1, 4096),
    loom::param("block_k", LOOM_PARAM_INT, "64", "keys per tile", 1, 4096),
};

const char* const kCapabilities[] = {LOOM_EXT_ATTENTION_WINDOW, LOOM_EXT_ATTENTION_SEQLENS,
                                     LOOM_EXT_ATTENTION_BIAS, LOOM_EXT_ATTENTION_PARTIAL, nullptr};

}  // namespace

LOOM_PLUGIN(.description =
                "exact tiled attention (FlashAttention-2 online softmax) on host memory; "
                "O((T+S)*D) workspace, never T x S",
            .params = kParams, .api = &kApi, .capabilities = kCapabilities)
