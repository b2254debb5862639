// ABI 2's rule for the op table, checked on every loom_ops slot that takes an args struct:
// NULL args, args older than ABI 2.0 (a smaller struct_size) and args carrying a required
// extension the backend does not know are refused with an error naming the op; an unknown
// extension that is not required is ignored; a kind the backend does not implement is
// refused. A backend that ran such a call anyway would compute something other than what the
// caller asked for, silently.
#include <cstddef>

#include "loom/cpp/ops_plugin.hpp"
#include "ops_support.hpp"

using namespace opstest;

namespace {

// `a` is a valid call of `slot`; each broken copy of it must be refused.
template <class Args, class Slot>
void check_refusals(const char* op, Slot loom_ops::*slot, const Args& a) {
  CAPTURE(op);
  const std::string name(op);
  expect_error([&] { B().call(slot, static_cast<const Args*>(nullptr)); },
               LOOM_ERR_INVALID_ARGUMENT, name + ": args NULL");
  Args old = a;
  old.struct_size = offsetof(Args, ext);  // built before ext existed
  expect_error([&] { B().call(slot, &old); }, LOOM_ERR_INVALID_ARGUMENT,
               name + ": args older than ABI 2.0");
  const loom_ext future{sizeof(loom_ext), "loom.test-future/1", LOOM_EXT_REQUIRED, nullptr};
  const loom_ext hint{sizeof(loom_ext), "loom.test-hint/1", 0, &future};
  Args req = a;
  req.ext = &hint;  // the required one second on the chain: the whole chain is read
  expect_error([&] { B().call(slot, &req); }, LOOM_ERR_INVALID_ARGUMENT,
               name + ": unknown required extension loom.test-future/1");
  Args opt = a;
  const loom_ext alone{sizeof(loom_ext), "loom.test-hint/1", 0, nullptr};
  opt.ext = &alone;
  B().call(slot, &opt);  // not required: ignored
  B().call(slot, &a);
}

}  // namespace

TEST_CASE("every args-taking op refuses NULL, old or unknown-required args, naming the op") {
  const int64_t N = 2, C = 4;
  loom::Tensor X = make(loom_f32(), {N, C}, random_vec(N * C, 1));
  loom::Tensor Y(B(), loom_f32(), {N, C}), W = make(loom_f32(), {C}, Vec(C, 1.0));
  loom::Tensor Bias = make(loom_f32(), {C}, Vec(C, 0.5)), DB(B(), loom_f32(), {C});
  loom::Tensor Sq(B(), loom_f32(), {N, N}), DS(B(), loom_f32(), {1, N, N});
  loom::Tensor S = make(loom_f32(), {1, N, N}, Vec(N * N, 0.25)), Lse(B(), loom_f32(), {1, N});
  loom::Tensor Ids = make_i32({N}, {0, 1}), Table = make(loom_f32(), {3, C}, Vec(3 * C, 0.1));
  loom::Tensor Targets = make_i32({N}, {1, 3}), Losses(B(), loom_f32(), {N});
  loom::Tensor Stats(B(), loom_f32(), {N, 3}), RowLse = make(loom_f32(), {N}, Vec(N, 2.0));
  loom::Tensor Rope = make(loom_f32(), {1, N, 1, C}, random_vec(N * C, 2));

  loom_gemm_args g{};
  g.struct_size = LOOM_GEMM_ARGS_SIZE_V2;
  g.trans_b = 1;
  g.m = N, g.n = N, g.k = C, g.alpha = 1.0;
  g.a = X, g.lda = C, g.b = X, g.ldb = C, g.c = Sq, g.ldc = N, g.batch = 1;
  check_refusals("gemm", &loom_ops::gemm, g);
  check_refusals("bias_add", &loom_ops::bias_add,
                 loom_bias_add_args{LOOM_BIAS_ADD_ARGS_SIZE_V2, Y, Bias, nullptr});
  check_refusals("bias_backward", &loom_ops::bias_backward,
                 loom_bias_bwd_args{LOOM_BIAS_BWD_ARGS_SIZE_V2, DB, X, nullptr});
  const DLTensor* xs[] = {X.get()};
  double ss = 0;
  check_refusals("sum_squares", &loom_ops::sum_squares,
                 loom_sum_squares_args{LOOM_SUM_SQUARES_ARGS_SIZE_V2, xs, 1, &ss, nullptr});
  check_refusals(
      "embedding_forward", &loom_ops::embedding_forward,
      loom_embedding_fwd_args{LOOM_EMBEDDING_FWD_ARGS_SIZE_V2, Y, Ids, Table, 0, nullptr});
  check_refusals("embedding_backward", &loom_ops::embedding_backward,
                 loom_embedding_bwd_args{LOOM_EMBEDDING_BWD_ARGS_SIZE_V2, Table, Ids, X, nullptr});
  loom::Tensor Rstd(B(), loom_f32(), {N});
  check_refusals("norm_forward", &loom_ops::norm_forward,
                 loom_norm_fwd_args{LOOM_NORM_FWD_ARGS_SIZE_V2, LOOM_NORM_RMS, Y, nullptr, Rstd, X,
                                    W, nullptr, 1e-5, nullptr});
  loom::Tensor DW(B(), loom_f32(), {C});
  check_refusals("norm_backward", &loom_ops::norm_backward,
                 loom_norm_bwd_args{LOOM_NORM_BWD_ARGS_SIZE_V2, LOOM_NORM_RMS, Y, DW, nullptr, X, X,
                                    W, nullptr, Rstd, nullptr});
  check_refusals("act_forward", &loom_ops::act_forward,
                 loom_act_fwd_args{LOOM_ACT_FWD_ARGS_SIZE_V2, LOOM_ACT_GELU_TANH, Y, X, nullptr});
  check_refusals(
      "act_backward", &loom_ops::act_backward,
      loom_act_bwd_args{LOOM_ACT_BWD_ARGS_SIZE_V2, LOOM_ACT_GELU_TANH, Y, X, X, nullptr});
  check_refusals("softmax_forward", &loom_ops::softmax_forward,
                 loom_softmax_args{LOOM_SOFTMAX_ARGS_SIZE_V2, S, Lse, 1.0, 1, 0, nullptr});
  check_refusals("softmax_backward", &loom_ops::softmax_backward,
                 loom_softmax_bwd_args{LOOM_SOFTMAX_BWD_ARGS_SIZE_V2, DS, S, S, 1.0, nullptr});
  check_refusals("rope_forward", &loom_ops::rope_forward,
                 loom_rope_args{LOOM_ROPE_ARGS_SIZE_V2, Rope, 0, 10000.0, nullptr});
  check_refusals("rope_backward", &loom_ops::rope_backward,
                 loom_rope_args{LOOM_ROPE_ARGS_SIZE_V2, Rope, 0, 10000.0, nullptr});
  check_refusals("softmax_cross_entropy", &loom_ops::softmax_cross_entropy,
                 loom_cross_entropy_args{LOOM_CROSS_ENTROPY_ARGS_SIZE_V2, Losses, nullptr, X,
                                         Targets, 1.0, nullptr});
  check_refusals(
      "vocab_ce_stats", &loom_ops::vocab_ce_stats,
      loom_vocab_ce_stats_args{LOOM_VOCAB_CE_STATS_ARGS_SIZE_V2, Stats, X, Targets, 0, nullptr});
  check_refusals("vocab_ce_backward", &loom_ops::vocab_ce_backward,
                 loom_vocab_ce_bwd_args{LOOM_VOCAB_CE_BWD_ARGS_SIZE_V2, Y, X, Targets, 0, RowLse,
                                        1.0, nullptr});
  // ABI 2.22 (Mamba-2): x (1,N,C) through a 2-tap convolution; a scan of H = 2 heads of P = 1
  // channel in G = 1 group with N = 2 states, chunk 1.
  loom::Tensor Xc = make(loom_f32(), {1, N, C}, random_vec(N * C, 3)),
               Yc(B(), loom_f32(), {1, N, C});
  loom::Tensor Wc = make(loom_f32(), {C, 2}, random_vec(2 * C, 4)), DWc(B(), loom_f32(), {C, 2});
  check_refusals(
      "ssm_conv_forward", &loom_ops::ssm_conv_forward,
      loom_ssm_conv_args{LOOM_SSM_CONV_ARGS_SIZE_V2_22, Yc, Xc, Wc, Bias, 1, nullptr, nullptr});
  check_refusals("ssm_conv_backward", &loom_ops::ssm_conv_backward,
                 loom_ssm_conv_bwd_args{LOOM_SSM_CONV_BWD_ARGS_SIZE_V2_22, Yc, DWc, DB, Xc, Xc, Wc,
                                        Bias, 1, nullptr});
  loom::Tensor Xs = make(loom_f32(), {1, N, 2, 1}, random_vec(2 * N, 5)),
               Ys(B(), loom_f32(), {1, N, 2, 1});
  loom::Tensor Dt = make(loom_f32(), {1, N, 2}, random_vec(2 * N, 6));
  loom::Tensor Bs = make(loom_f32(), {1, N, 1, 2}, random_vec(2 * N, 7)),
               H2 = make(loom_f32(), {2}, Vec(2, 0.5));
  loom::Tensor Cs(B(), loom_f32(), {1, N, 2, 1, 2}), G2(B(), loom_f32(), {2});
  loom::Tensor Ddt(B(), loom_f32(), {1, N, 2}), DBs(B(), loom_f32(), {1, N, 1, 2});
  loom::Tensor DCs(B(), loom_f32(), {1, N, 1, 2});
  check_refusals("ssm_scan_forward", &loom_ops::ssm_scan_forward,
                 loom_ssm_scan_args{LOOM_SSM_SCAN_ARGS_SIZE_V2_22, Ys, Xs, Dt, H2, Bs, Bs, H2, H2,
                                    1, Cs, nullptr, nullptr});
  check_refusals("ssm_scan_backward", &loom_ops::ssm_scan_backward,
                 loom_ssm_scan_bwd_args{LOOM_SSM_SCAN_BWD_ARGS_SIZE_V2_22, Ys, Ddt, G2, DBs, DCs,
                                        G2, G2, Xs, Xs, Dt, H2, Bs, Bs, H2, H2, 1, Cs, nullptr});
}

TEST_CASE("act_forward/act_backward: a kind the backend does not implement is refused") {
  loom::Tensor X = make(loom_f32(), {2, 4}, Vec(8, 0.5)), Y(B(), loom_f32(), {2, 4});
  const loom_act_fwd_args f{LOOM_ACT_FWD_ARGS_SIZE_V2, 9, Y, X, nullptr};
  expect_error([&] { B().call(&loom_ops::act_forward, &f); }, LOOM_ERR_INVALID_ARGUMENT,
               "act_forward: args of an unknown kind (9)");
  const loom_act_bwd_args b{LOOM_ACT_BWD_ARGS_SIZE_V2, -1, Y, X, X, nullptr};
  expect_error([&] { B().call(&loom_ops::act_backward, &b); }, LOOM_ERR_INVALID_ARGUMENT,
               "act_backward: args of an unknown kind (-1)");
}

// loom::OpsSlots (the SDK's table builder both backends use): a kind is implemented exactly
// when the backend gives its kernels, and the args are unpacked into the right parameters.
namespace {

DLTensor slot_tensors[6];  // stand-ins: only their addresses are compared
std::string g_refused;     // the last refusal, "op: why"
std::string g_ran;         // the last kernel run, with what it was given
char g_error_tag;

loom_error* fake_refuse(loom_backend*, const char* op, const std::string& why) {
  g_refused = std::string(op) + ": " + why;
  return reinterpret_cast<loom_error*>(&g_error_tag);
}
loom_error* fake_layernorm(loom_backend*, DLTensor* out, DLTensor* mean, DLTensor* rstd,
                           const DLTensor* inp, const DLTensor* weight, const DLTensor* bias,
                           double eps) {
  const bool in_order = out == &slot_tensors[0] && mean == &slot_tensors[1] &&
                        rstd == &slot_tensors[2] && inp == &slot_tensors[3] &&
                        weight == &slot_tensors[4] && bias == &slot_tensors[5];
  g_ran = std::string("layernorm ") + (in_order ? "in order " : "shuffled ") + std::to_string(eps);
  return nullptr;
}
loom_error* fake_gelu(loom_backend*, DLTensor* out, const DLTensor* inp) {
  g_ran = std::string("gelu ") +
          (out == &slot_tensors[0] && inp == &slot_tensors[1] ? "in order" : "shuffled");
  return nullptr;
}

loom_error* fake_rmsnorm(loom_backend*, DLTensor*, DLTensor*, const DLTensor*, const DLTensor*,
                         double) {
  g_ran = "rmsnorm";
  return nullptr;
}
loom_error* fake_gated(loom_backend*, DLTensor* out, DLTensor* rstd, const DLTensor* inp,
                       const DLTensor* gate, const DLTensor* weight, double, int64_t group_size) {
  const bool in_order = out == &slot_tensors[0] && rstd == &slot_tensors[2] &&
                        inp == &slot_tensors[3] && gate == &slot_tensors[1] &&
                        weight == &slot_tensors[4];
  g_ran =
      std::string("gated ") + (in_order ? "in order " : "shuffled ") + std::to_string(group_size);
  return nullptr;
}

constexpr loom::OpsCalls kLayerNormOnly = [] {
  loom::OpsCalls k{};
  k.refuse = fake_refuse;
  k.layernorm_forward = fake_layernorm;
  k.gelu_forward = fake_gelu;
  return k;
}();
using Slots = loom::OpsSlots<kLayerNormOnly>;

}  // namespace

TEST_CASE("OpsSlots: a kind without kernels is refused; args reach the kernel in order") {
  constexpr loom_ops ops = Slots::ops();
  DLTensor* t = slot_tensors;
  const loom_norm_fwd_args ln{LOOM_NORM_FWD_ARGS_SIZE_V2,
                              LOOM_NORM_LAYER,
                              t,
                              t + 1,
                              t + 2,
                              t + 3,
                              t + 4,
                              t + 5,
                              1e-5,
                              nullptr};
  g_ran.clear();
  CHECK(ops.norm_forward(nullptr, &ln) == nullptr);
  CHECK(g_ran == "layernorm in order " + std::to_string(1e-5));

  loom_norm_fwd_args rms = ln;
  rms.kind = LOOM_NORM_RMS;  // no rmsnorm kernels given
  g_ran.clear();
  CHECK(ops.norm_forward(nullptr, &rms) != nullptr);
  CHECK(g_refused ==
        "norm_forward: args of an unknown kind (" + std::to_string(LOOM_NORM_RMS) + ")");
  CHECK(g_ran.empty());

  const loom_act_fwd_args gelu{LOOM_ACT_FWD_ARGS_SIZE_V2, LOOM_ACT_GELU_TANH, t, t + 1, nullptr};
  CHECK(ops.act_forward(nullptr, &gelu) == nullptr);
  CHECK(g_ran == "gelu in order");
  loom_act_fwd_args swiglu = gelu;
  swiglu.kind = LOOM_ACT_SWIGLU;
  CHECK(ops.act_forward(nullptr, &swiglu) != nullptr);
  CHECK(g_refused ==
        "act_forward: args of an unknown kind (" + std::to_string(LOOM_ACT_SWIGLU) + ")");
  // The refusal rule runs before any kernel, on every slot, whatever the backend gives.
  CHECK(ops.gemm(nullptr, nullptr) != nullptr);
  CHECK(g_refused == "gemm: args NULL");
  // ABI 2.22's Mamba-2 slots are in every table; without kernels they refuse by name.
  CHECK(ops.struct_size == LOOM_OPS_SIZE_V2_22);
  const loom_ssm_conv_args conv{
      LOOM_SSM_CONV_ARGS_SIZE_V2_22, t, t + 1, t + 2, nullptr, 1, nullptr, nullptr};
  CHECK(ops.ssm_conv_forward(nullptr, &conv) != nullptr);
  CHECK(g_refused ==
        "ssm_conv_forward: no kernel: this backend does not implement ABI 2.22's Mamba-2 ops");
  CHECK(ops.ssm_scan_backward(nullptr, nullptr) != nullptr);
  CHECK(g_refused == "ssm_scan_backward: args NULL");
}

namespace {
constexpr loom::OpsCalls kGatedRms = [] {
  loom::OpsCalls k{};
  k.refuse = fake_refuse;
  k.rmsnorm_forward = fake_rmsnorm;
  k.rmsnorm_gated_forward = fake_gated;
  return k;
}();
}  // namespace

TEST_CASE("OpsSlots: loom.norm-gate/1 reaches the gated kernel, or is refused by the rule") {
  static int64_t shape[2] = {2, 8};  // outlives the test: slot_tensors keep pointing at it
  for (DLTensor& s : slot_tensors)
    s = DLTensor{nullptr, {kDLCPU, 0}, 2, loom_f32(), shape, nullptr, 0};
  DLTensor* t = slot_tensors;
  const loom_norm_gate gate{
      {sizeof(loom_norm_gate), LOOM_EXT_NORM_GATE, LOOM_EXT_REQUIRED, nullptr}, t + 1, nullptr, 4};
  const loom_norm_fwd_args a{LOOM_NORM_FWD_ARGS_SIZE_V2,
                             LOOM_NORM_RMS,
                             t,
                             nullptr,
                             t + 2,
                             t + 3,
                             t + 4,
                             nullptr,
                             1e-5,
                             &gate.base};
  g_ran.clear();
  CHECK(loom::OpsSlots<kGatedRms>::ops().norm_forward(nullptr, &a) == nullptr);
  CHECK(g_ran == "gated in order 4");
  // A backend without gated kernels: the required extension is unknown to it.
  g_ran.clear();
  CHECK(Slots::ops().norm_forward(nullptr, &a) != nullptr);
  CHECK(g_refused == "norm_forward: unknown required extension " LOOM_EXT_NORM_GATE);
  CHECK(g_ran.empty());
  // Without the extension the plain RMSNorm runs.
  loom_norm_fwd_args plain = a;
  plain.ext = nullptr;
  CHECK(loom::OpsSlots<kGatedRms>::ops().norm_forward(nullptr, &plain) == nullptr);
  CHECK(g_ran == "rmsnorm");
  loom_norm_fwd_args ln = a;
  ln.kind = LOOM_NORM_LAYER;
  CHECK(loom::OpsSlots<kGatedRms>::ops().norm_forward(nullptr, &ln) != nullptr);
  CHECK(g_refused == "norm_forward: " LOOM_EXT_NORM_GATE " takes kind LOOM_NORM_RMS (1), not 0");
}
