// model/gpt: the parameter list, the layer stack, and one micro-batch's forward/backward.
#include "gpt.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace gpt {

// ----- buffers -----------------------------------------------------------------------------
void LayerActs::ensure(const Ctx& c, const Options& o, int64_t n) {
  if (n <= rows) return;
  const int64_t C = o.n_embd;
  const DLDataType st = c.stat_dtype();
  ln1 = c.alloc({n, C});
  ln2 = c.alloc({n, C});
  if (!o.rmsnorm) {
    ln1_mean = c.alloc(st, {n});
    ln2_mean = c.alloc(st, {n});
  }
  ln1_rstd = c.alloc(st, {n});
  ln2_rstd = c.alloc(st, {n});
  q = c.alloc({n, o.q_dim()});
  k = c.alloc({n, o.kv_dim()});
  v = c.alloc({n, o.kv_dim()});
  att = c.alloc({n, o.q_dim()});
  lse = c.alloc(loom_f32(), {n * o.n_head});
  res2 = c.alloc({n, C});
  h = c.alloc({n, o.fc_out()});
  a = c.alloc({n, o.ffn_hidden});
  rows = n;
}

void GradScratch::ensure(const Ctx& c, const Options& o, int64_t n) {
  if (n <= rows) return;
  dres = c.alloc({n, o.n_embd});
  dtmp = c.alloc({n, o.n_embd});
  dln = c.alloc({n, std::max(o.n_embd, o.q_dim())});
  dq = c.alloc({n, o.q_dim()});
  dk = c.alloc({n, o.kv_dim()});
  dv = c.alloc({n, o.kv_dim()});
  dh = c.alloc({n, o.fc_out()});
  da = c.alloc({n, o.ffn_hidden});
  rows = n;
}

// ----- one layer ---------------------------------------------------------------------------
void Layer::forward(const Ctx& c, const Options& o, const Step& s, const DLTensor* x, DLTensor* out,
                    LayerActs& a, LayerCache* cache, int64_t cache_max) const {
  const int64_t N = s.N(), C = o.n_embd;
  View xv = view(x, {N, C}), ov = view(out, {N, C}), res2 = view(a.res2, {N, C});
  View ln1 = view(a.ln1, {N, C}), ln2 = view(a.ln2, {N, C});
  View m1 = view(a.ln1_mean, {N}), r1 = view(a.ln1_rstd, {N});
  View m2 = view(a.ln2_mean, {N}), r2 = view(a.ln2_rstd, {N});
  ln_1.forward(c, ln1, m1, r1, xv);
  attn.forward(c, s, ln1, a, res2, cache, cache_max);
  c.call(&loom_ops::add, res2.get(), (const DLTensor*)res2, (const DLTensor*)xv);
  ln_2.forward(c, ln2, m2, r2, res2);
  mlp.forward(c, N, ln2, a, ov);
  c.call(&loom_ops::add, ov.get(), (const DLTensor*)ov, (const DLTensor*)res2);
}

void Layer::backward(const Ctx& c, const Options& o, const Step& s, const DLTensor* x,
                     const LayerActs& a, GradScratch& g) const {
  const int64_t N = s.N(), C = o.n_embd;
  View xv = view(x, {N, C}), res2 = view(a.res2, {N, C});
  View ln1 = view(a.ln1, {N, C}), ln2 = view(a.ln2, {N, C});
  View m1 = view(a.ln1_mean, {N}), r1 = view(a.ln1_rstd, {N});
  View m2 = view(a.ln2_mean, {N}), r2 = view(a.ln2_rstd, {N});
  View dres = view(g.dres, {N, C}), dtmp = view(g.dtmp, {N, C}), dln = view(g.dln, {N, C});
  // MLP half: dres = d(out) = d(res2) through the residual, plus through ln_2 and the MLP
  mlp.backward(c, N, ln2, a, dres, dln, g);
  ln_2.backward(c, dtmp, dln, res2, m2, r2);
  c.call(&loom_ops::add, dres.get(), (const DLTensor*)dres, (const DLTensor*)dtmp);
  // attention half: dres = d(res2) -> d(x)
  attn.backward(c, s, ln1, a, dres, dln, g);
  ln_1.backward(c, dtmp, dln, xv, m1, r1);
  c.call(&loom_ops::add, dres.get(), (const DLTensor*)dres, (const DLTensor*)dtmp);
}

// ----- the model ---------------------------------------------------------------------------
Model::Model(const loom_host* host, const loom_config* cfg, const loom_model_create_args& a)
    : args_(a) {
  ctx_.host = host;
  ctx_.be = loom::Backend(host);
  loom::check(host, host->get_attention(host->ctx, &ctx_.attn));
  const bool f32 = loom_dtype_eq(a.dtype, loom_f32()), f64 = loom_dtype_eq(a.dtype, loom_f64());
  loom::require(f32 || f64,
                "model/gpt: dtype must be f32 (or f64 for tests); got code " +
                    std::to_string(a.dtype.code) + " bits " + std::to_string(a.dtype.bits),
                LOOM_ERR_UNIMPLEMENTED);
  ctx_.dtype = a.dtype;
  opt_ = parse_options(loom::Config(host, cfg), a);
  build();
}

// Declares the parameters in HF GPT-2 order, allocates them, and fills the layer slots.
void Model::build() {
  const Options& o = opt_;
  const int64_t C = o.n_embd, L = o.n_layer;
  const double std = o.init_std, proj_std = o.init_std / std::sqrt(2.0 * (double)L);
  ParamStore& ps = params_;
  auto norm = [&](const std::string& p) {
    ps.add(p + ".weight", {C}, 0, -1, Init::kOnes);
    if (!o.rmsnorm && o.bias) ps.add(p + ".bias", {C}, 0, -1, Init::kZeros);
  };
  // column-parallel: output rows split (dim 0), bias split; row-parallel: input split
  // (dim 1), bias replicated
  auto linear = [&](const std::string& p, int64_t out, int64_t in, bool column, double sd) {
    ps.add(p + ".weight", {out, in}, 1, column ? 0 : 1, Init::kNormal, sd);
    if (o.bias) ps.add(p + ".bias", {out}, 0, column ? 0 : -1, Init::kZeros);
  };
  ps.add("wte", {o.padded_vocab, C}, 1, 0, Init::kNormal, std);
  if (!o.rope) ps.add("wpe", {o.max_seq_len, C}, 1, -1, Init::kNormal, std);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "h." + std::to_string(l);
    norm(p + ".ln_1");
    linear(p + ".attn.c_attn", o.q_dim() + 2 * o.kv_dim(), C, true, std);
    linear(p + ".attn.c_proj", C, o.q_dim(), false, proj_std);
    norm(p + ".ln_2");
    linear(p + ".mlp.c_fc", o.fc_out(), C, true, std);
    linear(p + ".mlp.c_proj", C, o.ffn_hidden, false, proj_std);
  }
  norm("ln_f");
  if (!o.tie_embeddings) ps.add("lm_head.weight", {o.padded_vocab, C}, 1, 0, Init::kNormal, std);
  ps.allocate(ctx_);

  emb_ = Embedding::make(o, ps);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "h." + std::to_string(l);
    layers_.push_back(Layer{Norm::make(o, ps, p + ".ln_1"),
                            AttentionBlock::make(o, ps, p + ".attn"),
                            Norm::make(o, ps, p + ".ln_2"), Mlp::make(o, ps, p + ".mlp")});
  }
  ln_f_ = Norm::make(o, ps, "ln_f");
  head_ = LmHead::make(o, ps);

  const int64_t N = args_.micro_batch * args_.seq_len;
  for (int64_t l = 0; l <= L; ++l) res_.push_back(ctx_.alloc({N, C}));
  acts_.resize(L);
  for (auto& a : acts_) a.ensure(ctx_, o, N);
  grads_.ensure(ctx_, o, N);
  lnf_ = ctx_.alloc({N, C});
  if (!o.rmsnorm) lnf_mean_ = ctx_.alloc(ctx_.stat_dtype(), {N});
  lnf_rstd_ = ctx_.alloc(ctx_.stat_dtype(), {N});
  logits_ = ctx_.alloc({N, o.vocab});
  losses_ = ctx_.alloc({N});
  tokens_ = ctx_.alloc(loom_i32(), {N});
  targets_ = ctx_.alloc(loom_i32(), {N});
  positions_ = ctx_.alloc(loom_i32(), {N});
}

void Model::get_param(size_t i, loom_model_param* out) {
  loom::require(i < params_.size(), "model/gpt: parameter index " + std::to_string(i) +
                                        " out of range (" + std::to_string(params_.size()) +
                                        " parameters)");
  loom::require(out && out->struct_size >= LOOM_MODEL_PARAM_SIZE_V1,
                "model/gpt: get_param needs out->struct_size >= LOOM_MODEL_PARAM_SIZE_V1");
  Param& p = params_[i];
  out->name = p.name.c_str();
  out->value = p.value.get();
  out->grad = p.grad.get();
  out->weight_decay = p.weight_decay;
  out->tp_split_dim = p.tp_split_dim;
}

void Model::zero_grad() { ctx_.call(&loom_ops::fill, params_.grads(), 0.0); }

// Copies (n) token ids to the device after checking them against the vocabulary
// (`allow_ignore`: -1 is a valid target). A clear error instead of an out-of-range read.
void Model::upload_ids(Tensor& dst, const int32_t* src, int64_t n, bool allow_ignore) {
  for (int64_t i = 0; i < n; ++i)
    loom::require((src[i] >= 0 && src[i] < opt_.vocab) || (allow_ignore && src[i] == -1),
                  std::string("model/gpt: ") + (allow_ignore ? "target" : "token") + " id " +
                      std::to_string(src[i]) + " at position " + std::to_string(i) +
                      " is outside the vocabulary [0, " + std::to_string(opt_.vocab) + ")");
  View v = view(dst, {n});
  loom::check(ctx_.host,
              ctx_.be.api()->from_host(ctx_.be.self(), v.get(), src, (size_t)n * sizeof(int32_t)));
}

void Model::upload_positions(Tensor& dst, const Step& s) {
  pos_host_.resize(s.N());
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t) pos_host_[b * s.T + t] = (int32_t)(s.pos0 + t);
  View v = view(dst, {s.N()});
  loom::check(ctx_.host, ctx_.be.api()->from_host(ctx_.be.self(), v.get(), pos_host_.data(),
                                                  pos_host_.size() * sizeof(int32_t)));
}

void Model::run(const loom_microbatch& mb, bool backward, double* loss_sum, int64_t* tokens) {
  loom::require(mb.struct_size >= LOOM_MICROBATCH_SIZE_V1,
                "model/gpt: microbatch struct_size too small");
  loom::require(mb.tokens && mb.targets, "model/gpt: microbatch tokens and targets required");
  loom::require(mb.batch > 0 && mb.batch <= args_.micro_batch && mb.seq_len > 0 &&
                    mb.seq_len <= args_.seq_len,
                "model/gpt: micro-batch (" + std::to_string(mb.batch) + " x " +
                    std::to_string(mb.seq_len) + ") exceeds the create args (" +
                    std::to_string(args_.micro_batch) + " x " + std::to_string(args_.seq_len) +
                    ")");
  const Step s{mb.batch, mb.seq_len, 0};
  const int64_t N = s.N(), C = opt_.n_embd, V = opt_.vocab, L = opt_.n_layer;
  upload_ids(tokens_, mb.tokens, N, false);
  upload_ids(targets_, mb.targets, N, true);
  if (!opt_.rope) upload_positions(positions_, s);
  View tok = view(tokens_, {N}), tgt = view(targets_, {N}), pos = view(positions_, {N});

  // forward
  View x0 = view(res_[0], {N, C});
  emb_.forward(ctx_, x0, tok, pos);
  for (int64_t l = 0; l < L; ++l)
    layers_[l].forward(ctx_, opt_, s, res_[l], res_[l + 1], acts_[l], nullptr, 0);
  View xl = view(res_[L], {N, C}), lnf = view(lnf_, {N, C});
  View mean = view(lnf_mean_, {N}), rstd = view(lnf_rstd_, {N});
  ln_f_.forward(ctx_, lnf, mean, rstd, xl);
  View logits = view(logits_, {N, V}), losses = view(losses_, {N});
  head_.forward(ctx_, logits, lnf, N, C, 0);
  ctx_.call(&loom_ops::softmax_cross_entropy, losses.get(), backward ? logits.get() : nullptr,
            (const DLTensor*)logits, (const DLTensor*)tgt, mb.loss_scale);

  if (backward) {  // logits now hold dlogits
    View dres = view(grads_.dres, {N, C}), dln = view(grads_.dln, {N, C});
    head_.backward(ctx_, dln, logits, lnf, N);
    ln_f_.backward(ctx_, dres, dln, xl, mean, rstd);
    for (int64_t l = L - 1; l >= 0; --l)
      layers_[l].backward(ctx_, opt_, s, res_[l], acts_[l], grads_);
    emb_.backward(ctx_, dres, tok, pos);
  }

  // the loss sum last, so a device backend is not stalled between forward and backward
  double sum = 0.0;
  if (ctx_.dtype.bits == 64) {
    host_losses_f64_.resize(N);
    loom::check(ctx_.host, ctx_.be.api()->to_host(ctx_.be.self(), losses.get(),
                                                  host_losses_f64_.data(), N * sizeof(double)));
    for (int64_t i = 0; i < N; ++i) sum += host_losses_f64_[i];
  } else {
    host_losses_.resize(N);
    loom::check(ctx_.host, ctx_.be.api()->to_host(ctx_.be.self(), losses.get(), host_losses_.data(),
                                                  N * sizeof(float)));
    for (int64_t i = 0; i < N; ++i) sum += host_losses_[i];
  }
  int64_t count = 0;
  for (int64_t i = 0; i < N; ++i) count += mb.targets[i] != -1;
  if (loss_sum) *loss_sum = sum;
  if (tokens) *tokens = count;
}

// Megatron / llm.c convention: 6 FLOPs per matmul parameter per token (forward 2, backward
// 4), counting the LM head once (over the real vocabulary) and no embedding lookups, plus
// attention scores and weighted sum: 12 * n_layer * (n_head * head_dim) * seq_len, without
// halving for the causal mask.
double Model::flops_per_token() const {
  const Options& o = opt_;
  const double C = (double)o.n_embd;
  const double per_layer = C * (double)(o.q_dim() + 2 * o.kv_dim()) + (double)o.q_dim() * C +
                           C * (double)o.fc_out() + (double)o.ffn_hidden * C;
  const double matmul = (double)o.n_layer * per_layer + (double)o.vocab * C;
  return 6.0 * matmul + 12.0 * (double)o.n_layer * (double)o.q_dim() * (double)args_.seq_len;
}

}  // namespace gpt
