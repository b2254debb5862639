// attention/reference: exact attention built only from the active backend's loom_ops
// (batched gemm + softmax), so it runs on every backend. Materialises the (B,Hq,T,S)
// probability matrix: meant as the correctness reference and for short sequences.
//
// Layouts (attention.h): q(B,T,Hq,D), k/v(B,S,Hkv,D), out(B,T,Hq,D), lse(B,Hq,T) f32.
// Head h of q, k or v in batch item b is a (rows, D) matrix with row pitch H*D starting
// b*rows*H*D + h*D elements in; query head h reads kv head g = h / (Hq/Hkv). Each gemm below
// handles one head for all B batch items (stride = one batch item), so its B output
// matrices are stacked, never interleaved: P and dP (B,Hq,T,S) are ours, and out, dQ, dK,
// dV of one head are T (or S) rows a whole batch item apart. Variable-length sequences
// (loom.attention-seqlens/1) run one at a time, each head of each sequence its own (Lq,Lk)
// block through the same gemms and softmax, so nothing crosses a sequence's edge.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "loom/cpp/attention_args.hpp"
#include "loom/cpp/attention_merge.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tensor.hpp"

namespace {

struct Shape {
  int64_t B, T, S, Hq, Hkv, D, G;
  int64_t qpitch() const { return Hq * D; }   // row pitch of q, out, dout, dq
  int64_t kpitch() const { return Hkv * D; }  // row pitch of k, v, dk, dv
};

// attention.h's shape contract (loom/cpp/attention_args.hpp), with the row pitches above.
const char* const kWho = "attention/reference";

Shape check_shapes(const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* out,
                   const char* out_name, int causal) {
  const loom::AttentionDims d = loom::attention_dims(kWho, q, k, v, out, out_name, causal != 0);
  return Shape{d.B, d.T, d.S, d.Hq, d.Hkv, d.D, d.G};
}
loom::AttentionDims dims(const Shape& s) { return {s.B, s.T, s.S, s.Hq, s.Hkv, s.D, s.G}; }

class ReferenceAttention {
 public:
  explicit ReferenceAttention(const loom_host* host) : host_(host), be_(host) {}

  void forward(const loom_attention_fwd_args& a) {
    const Shape s = check_shapes(a.q, a.k, a.v, a.out, "out", a.causal);
    const loom::AttentionMasks m = masks(s, a.ext, a.causal, a.q);
    if (m.varlen) return forward_seqs(s, m, a);
    ensure(s, a.q->dtype, /*backward=*/false);
    loom::View p(probs_, {s.B * s.Hq, s.T, s.S});
    DLTensor* lse = a.lse;
    loom::View lse_ws(lse_, {s.B * s.Hq, s.T});
    if (!lse) lse = lse_ws;
    scores(s, a.q, a.k, p);
    loom::softmax_forward(be_, p, lse, a.scale, a.causal != 0, m.window);
    // out_h(T,D) = P_h(T,S) @ v_g(S,D)
    for (int64_t h = 0; h < s.Hq; ++h) {
      const Head x = head(s, h);
      gemm(0, 0, s.T, s.D, s.S, 1.0, 0.0, probs_, s.S, x.pstride, x.poff,  //
           a.v, s.kpitch(), x.kstride, x.koff,                             //
           a.out, s.qpitch(), x.qstride, x.qoff, s.B);
    }
  }

  // Recomputes P (the softmax is deterministic, so P matches the forward's), then
  // dP = dO V^T, dS = softmax_backward (scale folded in), dQ = dS K, dK = sum_j dS^T Q,
  // dV = sum_j P^T dO, the sums running over the G query heads that share a kv head.
  void backward(const loom_attention_bwd_args& a) {
    const Shape s = check_shapes(a.q, a.k, a.v, a.dout, "dout", a.causal);
    loom::attention_grads(kWho, a.q, a.k, a.dq, a.dk, a.dv);
    const loom::AttentionMasks m = masks(s, a.ext, a.causal, a.q);
    if (m.partial) return backward_partial(s, m, a);
    if (m.varlen) return backward_seqs(s, m, a);
    ensure(s, a.q->dtype, /*backward=*/true);
    loom::View p(probs_, {s.B * s.Hq, s.T, s.S});
    loom::View dp(dprobs_, {s.B * s.Hq, s.T, s.S});
    loom::View lse(lse_, {s.B * s.Hq, s.T});
    scores(s, a.q, a.k, p);
    loom::softmax_forward(be_, p, lse, a.scale, a.causal != 0, m.window);
    for (int64_t h = 0; h < s.Hq; ++h) {  // dP_h(T,S) = dO_h(T,D) @ v_g(S,D)^T
      const Head x = head(s, h);
      gemm(0, 1, s.T, s.S, s.D, 1.0, 0.0, a.dout, s.qpitch(), x.qstride, x.qoff,  //
           a.v, s.kpitch(), x.kstride, x.koff, dprobs_, s.S, x.pstride, x.poff, s.B);
    }
    loom::softmax_backward(be_, dp.get(), p.get(), dp.get(), a.scale);
    for (int64_t h = 0; h < s.Hq; ++h) {
      const Head x = head(s, h);
      const double beta = h % s.G == 0 ? 0.0 : 1.0;  // a group's first head writes, others add
      // dQ_h(T,D) = dS_h(T,S) @ k_g(S,D)
      gemm(0, 0, s.T, s.D, s.S, 1.0, 0.0, dprobs_, s.S, x.pstride, x.poff,  //
           a.k, s.kpitch(), x.kstride, x.koff, a.dq, s.qpitch(), x.qstride, x.qoff, s.B);
      // dK_g(S,D) (+)= dS_h(T,S)^T @ q_h(T,D)
      gemm(1, 0, s.S, s.D, s.T, 1.0, beta, dprobs_, s.S, x.pstride, x.poff,  //
           a.q, s.qpitch(), x.qstride, x.qoff, a.dk, s.kpitch(), x.kstride, x.koff, s.B);
      // dV_g(S,D) (+)= P_h(T,S)^T @ dO_h(T,D)
      gemm(1, 0, s.S, s.D, s.T, 1.0, beta, probs_, s.S, x.pstride, x.poff,  //
           a.dout, s.qpitch(), x.qstride, x.qoff, a.dv, s.kpitch(), x.kstride, x.koff, s.B);
    }
  }

  // attention.h's merge, in float64 on the host.
  void merge(const loom_attention_merge_args& a) {
    const loom::MergeDims d = loom::merge_dims(kWho, a);
    std::vector<double> out = fetch(a.out), lse = fetch(a.lse);
    const std::vector<double> part = fetch(a.part_out), part_lse = fetch(a.part_lse);
    auto same = [](double x) { return x; };
    loom::merge_partial(d, out.data(), lse.data(), part.data(), part_lse.data(), same, same);
    store(a.out, out);
    store(a.lse, lse);
  }

  const loom_host* host() const { return host_; }

 private:
  // Backward of one call of a partial attention (loom.attention-partial/1): out and lse are
  // the merge over every call's keys, so P = exp(scale q.k - lse) cannot come from a softmax
  // over this call's keys alone. FlashAttention-2's equations, spelled out in float64 on the
  // host: Di = dO_i . O_i, dV_j = sum_i P_ij dO_i, dS_ij = P_ij (dO_i . V_j - Di),
  // dQ_i = scale sum_j dS_ij K_j, dK_j = scale sum_i dS_ij Q_i.
  void backward_partial(const Shape& s, const loom::AttentionMasks& m,
                        const loom_attention_bwd_args& a) {
    loom::require(!m.varlen && !m.bias && a.lse != nullptr,
                  "attention/reference: " LOOM_EXT_ATTENTION_PARTIAL
                  " takes whole rows, no bias, and the merged lse",
                  LOOM_ERR_UNIMPLEMENTED);
    const std::vector<double> q = fetch(a.q), k = fetch(a.k), v = fetch(a.v), o = fetch(a.out);
    const std::vector<double> dout = fetch(a.dout), lse = fetch(a.lse);
    std::vector<double> dq(q.size(), 0.0), dk(k.size(), 0.0), dv(v.size(), 0.0);
    const int64_t qp = s.qpitch(), kp = s.kpitch(), D = s.D;
    auto dot = [D](const double* x, const double* y) {
      double acc = 0;
      for (int64_t i = 0; i < D; ++i) acc += x[i] * y[i];
      return acc;
    };
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t h = 0; h < s.Hq; ++h)
        for (int64_t i = 0; i < s.T; ++i) {
          const int64_t qi = (b * s.T + i) * qp + h * D, g = h / s.G;
          const double di = dot(&dout[qi], &o[qi]), li = lse[(b * s.Hq + h) * s.T + i];
          const int64_t last = a.causal ? std::min(i + s.S - s.T, s.S - 1) : s.S - 1;
          const int64_t first = m.window > 0 ? std::max<int64_t>(last - m.window + 1, 0) : 0;
          for (int64_t j = first; j <= last; ++j) {
            const int64_t kj = (b * s.S + j) * kp + g * D;
            const double p = std::exp(a.scale * dot(&q[qi], &k[kj]) - li);
            const double ds = p * (dot(&dout[qi], &v[kj]) - di);
            for (int64_t x = 0; x < D; ++x) {
              dv[kj + x] += p * dout[qi + x];
              dq[qi + x] += a.scale * ds * k[kj + x];
              dk[kj + x] += a.scale * ds * q[qi + x];
            }
          }
        }
    store(a.dq, dq);
    store(a.dk, dk);
    store(a.dv, dv);
  }

  // A tensor's values in float64 on the host, and back, through the backend (any device,
  // any float dtype: its copy casts).
  std::vector<double> fetch(const DLTensor* t) {
    const int64_t n = loom_tensor_numel(t);
    std::vector<double> h((size_t)n);
    if (n == 0) return h;
    loom::Tensor wide(be_, loom_f64(), {n});
    loom::View src(t, {n});
    be_.call(&loom_ops::copy, wide.get(), (const DLTensor*)src);
    loom::check(host_, be_.api()->to_host(be_.self(), wide.get(), h.data(), (size_t)n * 8));
    return h;
  }
  void store(DLTensor* t, const std::vector<double>& h) {
    const int64_t n = loom_tensor_numel(t);
    if (n == 0) return;
    loom::Tensor wide(be_, loom_f64(), {n});
    loom::check(host_, be_.api()->from_host(be_.self(), wide.get(), h.data(), (size_t)n * 8));
    loom::View dst(t, {n});
    be_.call(&loom_ops::copy, dst.get(), (const DLTensor*)wide.get());
  }
  // Where head h's matrices start in batch item 0 and how far apart batch items are.
  struct Head {
    int64_t qoff, qstride, koff, kstride, poff, pstride;
  };
  static Head head(const Shape& s, int64_t h) {
    const int64_t g = h / s.G;
    return {h * s.D, s.T * s.qpitch(), g * s.D, s.S * s.kpitch(), h * s.T * s.S, s.Hq * s.T * s.S};
  }

  // The masks; a bias (loom.attention-bias/1) makes every row a sequence of its own, so that
  // the per-sequence path below, which adds it, runs the whole batch.
  static loom::AttentionMasks masks(const Shape& s, const loom_ext* ext, int causal,
                                    const DLTensor* q) {
    loom::AttentionMasks m = loom::attention_masks(kWho, ext, causal, dims(s), q, true);
    loom::require(!m.dbias || q->dtype.bits >= 32,
                  "attention/reference: a bias gradient needs f32 or f64 attention "
                  "(attention/flash-cpu takes bf16 and f16)",
                  LOOM_ERR_UNIMPLEMENTED);
    if (m.bias && !m.varlen) {
      m.varlen = true;
      for (int64_t b = 0; b < s.B; ++b) m.seqs.push_back({b, 0, s.T, 0, s.S});
    }
    return m;
  }

  // probs_ (nq, nk) += bias[h, :nq, :nk], or dbias[h, :nq, :nk] += dprobs_ (`grad`), row by
  // row (the bias rows are S apart).
  void add_bias(const Shape& s, const loom::AttentionMasks& m, const loom::AttentionSeq& q,
                int64_t h, bool grad) {
    for (int64_t i = 0; i < q.nq; ++i) {
      const int64_t at = (h * s.T + i) * s.S;
      if (grad) {
        loom::View dst(m.dbias, {q.nk}, at), src(dprobs_, {q.nk}, i * q.nk);
        be_.call(&loom_ops::add, dst.get(), (const DLTensor*)dst, (const DLTensor*)src);
      } else {
        loom::View dst(probs_, {q.nk}, i * q.nk), src(m.bias, {q.nk}, at);
        be_.call(&loom_ops::add, dst.get(), (const DLTensor*)dst, (const DLTensor*)src);
      }
    }
  }

  // One sequence's head h: where its q rows, k rows and lse values start.
  struct SeqHead {
    int64_t qoff, koff, loff;
  };
  static SeqHead seq_head(const Shape& s, const loom::AttentionSeq& q, int64_t h) {
    return {(q.b * s.T + q.t0) * s.qpitch() + h * s.D,
            (q.b * s.S + q.s0) * s.kpitch() + h / s.G * s.D, (q.b * s.Hq + h) * s.T + q.t0};
  }

  // out_h = softmax(scale * q_h k_g^T [+ bias_h]) v_g per sequence and head, P of one (Lq,Lk)
  // block in probs_. With a bias the scale goes into the score gemm (the bias is added after
  // it) and the softmax runs unscaled. Rows of no sequence keep out 0 and lse 0 (attention.h).
  void forward_seqs(const Shape& s, const loom::AttentionMasks& m,
                    const loom_attention_fwd_args& a) {
    ensure_seqs(s, m, a.q->dtype, /*backward=*/false);
    DLTensor* lse = a.lse;
    loom::View lse_ws(lse_, {s.B * s.Hq, s.T});
    if (!lse) lse = lse_ws;
    be_.call(&loom_ops::fill, a.out, 0.0);
    be_.call(&loom_ops::fill, lse, 0.0);
    const double alpha = m.bias ? a.scale : 1.0, scale = m.bias ? 1.0 : a.scale;
    for (const loom::AttentionSeq& q : m.seqs)
      for (int64_t h = 0; h < s.Hq; ++h) {
        const SeqHead x = seq_head(s, q, h);
        loom::View p(probs_, {1, q.nq, q.nk}), l(lse, {1, q.nq}, x.loff);
        gemm(0, 1, q.nq, q.nk, s.D, alpha, 0.0, a.q, s.qpitch(), 0, x.qoff,  //
             a.k, s.kpitch(), 0, x.koff, probs_, q.nk, 0, 0, 1);
        if (m.bias) add_bias(s, m, q, h, false);
        loom::softmax_forward(be_, p, l, scale, a.causal != 0, m.window);
        gemm(0, 0, q.nq, s.D, q.nk, 1.0, 0.0, probs_, q.nk, 0, 0,  //
             a.v, s.kpitch(), 0, x.koff, a.out, s.qpitch(), 0, x.qoff, 1);
      }
  }

  // The backward above per sequence and head; dk, dv accumulate over a kv group's heads
  // from zero, so rows of no sequence keep gradient 0. With a bias, dS is the gradient of the
  // biased scores (what dbias gains) and the scale multiplies dQ and dK instead.
  void backward_seqs(const Shape& s, const loom::AttentionMasks& m,
                     const loom_attention_bwd_args& a) {
    ensure_seqs(s, m, a.q->dtype, /*backward=*/true);
    for (DLTensor* g : {a.dq, a.dk, a.dv}) be_.call(&loom_ops::fill, g, 0.0);
    const double alpha = m.bias ? a.scale : 1.0, scale = m.bias ? 1.0 : a.scale;
    for (const loom::AttentionSeq& q : m.seqs)
      for (int64_t h = 0; h < s.Hq; ++h) {
        const SeqHead x = seq_head(s, q, h);
        loom::View p(probs_, {1, q.nq, q.nk}), dp(dprobs_, {1, q.nq, q.nk});
        loom::View l(lse_, {1, q.nq});
        gemm(0, 1, q.nq, q.nk, s.D, alpha, 0.0, a.q, s.qpitch(), 0, x.qoff,  //
             a.k, s.kpitch(), 0, x.koff, probs_, q.nk, 0, 0, 1);
        if (m.bias) add_bias(s, m, q, h, false);
        loom::softmax_forward(be_, p, l, scale, a.causal != 0, m.window);
        gemm(0, 1, q.nq, q.nk, s.D, 1.0, 0.0, a.dout, s.qpitch(), 0, x.qoff,  //
             a.v, s.kpitch(), 0, x.koff, dprobs_, q.nk, 0, 0, 1);
        loom::softmax_backward(be_, dp.get(), p.get(), dp.get(), scale);
        if (m.dbias) add_bias(s, m, q, h, true);
        gemm(0, 0, q.nq, s.D, q.nk, alpha, 0.0, dprobs_, q.nk, 0, 0,  //
             a.k, s.kpitch(), 0, x.koff, a.dq, s.qpitch(), 0, x.qoff, 1);
        gemm(1, 0, q.nk, s.D, q.nq, alpha, 1.0, dprobs_, q.nk, 0, 0,  //
             a.q, s.qpitch(), 0, x.qoff, a.dk, s.kpitch(), 0, x.koff, 1);
        gemm(1, 0, q.nk, s.D, q.nq, 1.0, 1.0, probs_, q.nk, 0, 0,  //
             a.dout, s.qpitch(), 0, x.qoff, a.dv, s.kpitch(), 0, x.koff, 1);
      }
  }

  // S_h(T,S) = q_h(T,D) @ k_g(S,D)^T into p (the scale is applied by softmax_forward).
  void scores(const Shape& s, const DLTensor* q, const DLTensor* k, DLTensor* p) {
    for (int64_t h = 0; h < s.Hq; ++h) {
      const Head x = head(s, h);
      gemm(0, 1, s.T, s.S, s.D, 1.0, 0.0, q, s.qpitch(), x.qstride, x.qoff,  //
           k, s.kpitch(), x.kstride, x.koff, p, s.S, x.pstride, x.poff, s.B);
    }
  }

  void gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, double beta,
            const DLTensor* a, int64_t lda, int64_t sa, int64_t oa, const DLTensor* b, int64_t ldb,
            int64_t sb, int64_t ob, DLTensor* c, int64_t ldc, int64_t sc, int64_t oc,
            int64_t batch) {
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
    g.stride_a = sa;
    g.offset_a = oa;
    g.b = b;
    g.ldb = ldb;
    g.stride_b = sb;
    g.offset_b = ob;
    g.c = c;
    g.ldc = ldc;
    g.stride_c = sc;
    g.offset_c = oc;
    g.batch = batch;
    be_.call(&loom_ops::gemm, &g);
  }

  // Grows the workspace (never shrinks; at least doubling, so generation, where S grows by
  // one each token, reallocates O(log S) times): probabilities, their gradient, and an lse
  // buffer for forward calls that pass none (generation) and for the backward's recompute.
  void ensure(const Shape& s, DLDataType dtype, bool backward) {
    const int64_t n = s.B * s.Hq * s.T * s.S, rows = s.B * s.Hq * s.T;
    auto grown = [](const loom::Tensor& t, int64_t need) { return std::max(need, 2 * t.numel()); };
    if (!probs_ || probs_.numel() < n || !loom_dtype_eq(probs_.get()->dtype, dtype)) {
      const bool same = probs_ && loom_dtype_eq(probs_.get()->dtype, dtype);
      probs_ = loom::Tensor(be_, dtype, {same ? grown(probs_, n) : n});
      dprobs_.reset();
    }
    if (backward && (!dprobs_ || dprobs_.numel() < n))
      dprobs_ = loom::Tensor(be_, dtype, {probs_.numel()});
    if (!lse_ || lse_.numel() < rows) lse_ = loom::Tensor(be_, loom_f32(), {grown(lse_, rows)});
  }

  // Workspace for the largest (Lq,Lk) block of any sequence, and lse for its rows.
  void ensure_seqs(const Shape& s, const loom::AttentionMasks& m, DLDataType dtype, bool backward) {
    Shape block = s;
    block.B = 1, block.Hq = 1, block.T = 1, block.S = 1;
    for (const loom::AttentionSeq& q : m.seqs)
      if (q.nq * q.nk > block.T * block.S) block.T = q.nq, block.S = q.nk;
    ensure(block, dtype, backward);
    if (lse_.numel() < s.B * s.Hq * s.T) lse_ = loom::Tensor(be_, loom_f32(), {s.B * s.Hq * s.T});
  }

  const loom_host* host_;
  loom::Backend be_;
  loom::Tensor probs_, dprobs_, lse_;
};

ReferenceAttention* cast(loom_attention* a) { return reinterpret_cast<ReferenceAttention*>(a); }

loom_error* create(const loom_host* host, const loom_config*, loom_attention** out) {
  return loom::guard(
      host, [&] { *out = reinterpret_cast<loom_attention*>(new ReferenceAttention(host)); });
}
void destroy(loom_attention* a) { delete cast(a); }
loom_error* forward(loom_attention* a, const loom_attention_fwd_args* args) {
  return loom::guard(cast(a)->host(), [&] { cast(a)->forward(*args); });
}
loom_error* backward(loom_attention* a, const loom_attention_bwd_args* args) {
  return loom::guard(cast(a)->host(), [&] { cast(a)->backward(*args); });
}

[[maybe_unused]] loom_error* merge(loom_attention* a, const loom_attention_merge_args* args) {
  return loom::guard(cast(a)->host(), [&] { cast(a)->merge(*args); });
}

#ifndef LOOM_REFERENCE_FIXTURE_WITHOUT_WINDOW
const loom_attention_api kApi = {
    LOOM_ATTENTION_API_SIZE_V2_7, create, destroy, forward, backward, merge};
#else  // the fixture lists no extension, so it has no merge either (attention.h)
const loom_attention_api kApi = {
    LOOM_ATTENTION_API_SIZE_V2_7, create, destroy, forward, backward, nullptr};
#endif

#ifndef LOOM_REFERENCE_FIXTURE_WITHOUT_WINDOW
const char* const kCapabilities[] = {LOOM_EXT_ATTENTION_WINDOW, LOOM_EXT_ATTENTION_SEQLENS,
                                     LOOM_EXT_ATTENTION_BIAS, LOOM_EXT_ATTENTION_PARTIAL, nullptr};
#else  // tests/engine's attention/causal-only: a plugin that does not list windows
const char* const* const kCapabilities = nullptr;
#endif

}  // namespace

LOOM_PLUGIN(.description =
                "exact attention from backend gemm + softmax ops (any backend; O(T*S) memory)",
            .api = &kApi, .capabilities = kCapabilities)
