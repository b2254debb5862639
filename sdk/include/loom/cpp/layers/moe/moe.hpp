// Loom layer library (loom/cpp/layers/decoder/decoder.hpp has the overview): a mixture of experts
// in place of the MLP (Megatron-Core's MoELayer with its grouped-GEMM experts), moe.cpp.
//
//   logits (N,E) = x W_router^T             router.weight (E, C), on every rank
//   routing on the host (moe_router.hpp): each token's k experts and weights, capacity
//   xp (M,C) = x[perm]                       the kept choices' tokens, grouped by expert
//   h = xp W1_e^T (+ b1_e); a = act(h)       experts.c_fc (E, fc_out, C): one grouped GEMM
//   ye = a W2_e^T (+ b2_e)                   experts.c_proj (E, C, F): one grouped GEMM
//   y[n] = sum over n's kept choices of prob * ye[row]
//   y += the shared expert's MLP of x (shared.c_fc, shared.c_proj), when there is one,
//        scaled by sigmoid(x . shared.gate) when gated (shared_expert.cpp)
// The balancing and z losses are computed with the routing; their gradients reach the
// router's logits in backward, scaled like every loss term (Step::moe_grad_scale).
// Under tensor parallelism every tensor rank runs the router and the dispatch on the same
// tokens. By default the experts are whole on each (Megatron's expert tensor parallelism of
// 1); with expert_tensor = tensor (Options::etp) each expert's c_fc rows and c_proj columns
// are split as the dense MLP's, ye is summed over the tensor group after the experts (c_proj's
// bias added by tensor rank 0 only), and so is d(xp) in backward.
// With moe_router_enable_expert_bias the router adds router.expert_bias (a buffer) to the
// sigmoid scores when it picks the top-k; DecoderModel moves it after each step.
//
// Expert parallelism (ctx.ep, EP ranks): this rank holds experts [e0, e0 + E/EP). Megatron's
// all-to-all token dispatcher: the rows xp of each expert go to the rank that holds it
// (all_to_all_v), are put in local-expert order, run through the local experts and come back
// the same way; backward sends d(ye) out and d(xp) back. The expert weights' gradients sum
// the tokens of every rank of the expert group and are divided by EP, so that the host's
// average over the expert-data group averages them over data x context.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/cpp/layers/core/acts.hpp"
#include "loom/cpp/layers/core/params.hpp"
#include "loom/cpp/layers/moe/moe_router.hpp"

namespace loom::layers {

// One MoE layer's forward state, kept for its backward: the routing on the host and the
// expert rows on the device, with the backward's scratch. M rows: the kept choices.
struct MoeActs {
  Routing routing;
  std::vector<double> logits, dlogits;    // (N,E) host; dlogits: the losses' gradients so far
  std::vector<int32_t> perm;              // (M) the token of each expert row, expert-major
  std::vector<int64_t> choice;            // (M) its choice n * k + j
  std::vector<int64_t> counts;            // (E) rows per expert
  Tensor logits_dev, perm_dev, prob_dev;  // (N,E), (M) i32, (M)
  Tensor xp, ye, out;                     // (M,C) x3
  Tensor d1, d2, dprob, dlog;             // backward: (M,C) x2, (M), (N,E)
  Tensor sh, sa, dsh, dsa;                // the shared expert: (N,s_fc_out), (N,S) and grads
  Tensor sz, dsz, sgl;                    // its gate: (N,C) ungated output and scratch, (N)
  std::vector<double> gate;               // (N) host: the gate's values
  // Expert parallelism: R rows reach this rank's experts.
  std::vector<int64_t> send, recv;   // (EP) rows to / from each rank of the expert group
  std::vector<int64_t> lcounts;      // (E/EP) rows per local expert, from every rank
  std::vector<int32_t> lperm, linv;  // (R) received row of each local row, and back
  Tensor lperm_dev, linv_dev;        // (R) i32
  Tensor xr, xl, yl, yr;             // (R,C): received, in local-expert order, out, back
  Tensor eh, ea, edh, eda;           // (R,fc_out), (R,F) and grads: the experts' own
  int64_t n = 0, m = 0, r = 0, cap_n = 0, cap_m = 0, cap_r = 0;
  void ensure(const Ctx& c, int64_t n_tokens, int64_t m_rows, int64_t E, int64_t C);
  void ensure_local(const Ctx& c, int64_t r_rows, int64_t C, int64_t fc_out, int64_t F);
};

struct MoeMlp {
  Param* router = nullptr;       // (E, C)
  Param* expert_bias = nullptr;  // (E) buffer: aux-loss-free balancing, or none
  bool split = false;            // expert tensor parallelism: F is this tensor rank's share
  Param *w1 = nullptr, *b1 = nullptr, *w2 = nullptr, *b2 = nullptr;
  Param *s1 = nullptr, *sb1 = nullptr, *s2 = nullptr, *sb2 = nullptr;  // the shared expert
  Param* sg = nullptr;  // (1, C): its gate (moe_shared_expert_gate), or none
  int64_t S = 0, s_fc_out = 0;
  RouterConfig cfg;
  loom_act_kind act = LOOM_ACT_GELU_TANH;
  int64_t E = 0, C = 0, F = 0, fc_out = 0;
  double aux_coeff = 0, z_coeff = 0;
  // The load-balancing loss (moe_router_load_balancing_type): none, Switch's over the
  // micro-batch ("aux_loss"), or per sequence ("seq_aux_loss").
  enum class Balancing { kNone, kMicroBatch, kPerSequence } balancing = Balancing::kMicroBatch;

  static MoeMlp make(const Options& o, ParamStore& ps, const std::string& prefix);
  // y (N,C) (=) from x (N,C); a.moe holds the state, a.moe_aux and a.moe_z this layer's
  // losses.
  void forward(const Ctx& c, const Step& s, const DLTensor* x, LayerActs& a, DLTensor* y) const;
  // dx (=) from dy; parameter gradients +=.
  void backward(const Ctx& c, const Step& s, const DLTensor* x, const LayerActs& a,
                const DLTensor* dy, DLTensor* dx) const;

 private:
  // The local experts over `rows` rows of x grouped by `counts`: y (=).
  void experts_forward(const Ctx& c, MoeActs& m, const std::vector<int64_t>& counts, int64_t rows,
                       const DLTensor* x, DLTensor* y) const;
  // Their parameter gradients (scaled by 1/EP) and dx (=) from dy.
  void experts_backward(const Ctx& c, MoeActs& m, const std::vector<int64_t>& counts, int64_t rows,
                        const DLTensor* x, const DLTensor* dy, DLTensor* dx) const;
  // Expert parallelism: xp's rows to their experts' ranks, into m.xl in local-expert order
  // (m.r rows); and the experts' outputs m.yl back into ye (M rows).
  void dispatch(const Ctx& c, MoeActs& m, const DLTensor* xp) const;
  void combine(const Ctx& c, MoeActs& m, const DLTensor* yl, DLTensor* ye) const;
  // shared_expert.cpp: y += its output; dx += its input gradient from dy
  void shared_forward(const Ctx& c, MoeActs& m, int64_t N, const DLTensor* x, DLTensor* y) const;
  void shared_backward(const Ctx& c, MoeActs& m, int64_t N, const DLTensor* x, const DLTensor* dy,
                       DLTensor* dx) const;
};

// Aux-loss-free balancing after a step: bias (E) moves by `rate` towards the mean of load
// (E, the step's kept choices per expert over the whole batch), in the buffer's precision.
void update_expert_bias(const Ctx& c, Param& bias, const std::vector<int64_t>& load, double rate);

}  // namespace loom::layers
