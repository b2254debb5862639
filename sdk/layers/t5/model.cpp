// Loom layer library, T5: the parameters, the layer stacks and the shared embedding (see
// loom/cpp/layers/t5/t5.hpp).
#include <algorithm>
#include <cmath>
#include <string>

#include "loom/cpp/layers/t5/t5.hpp"

namespace loom::layers {

namespace {
std::string s(int64_t v) { return std::to_string(v); }
}  // namespace

T5Model::T5Model(const loom_host* host, const loom_config* cfg, const loom_model_create_args& a,
                 std::string who)
    : who_(std::move(who)), args_(copy_create_args(a)) {
  ctx_ = model_context(host, a.dtype, who_);
  check_t5_layout(ctx_.tp, host_layout(host), who_);
  if (ctx_.tp.active())
    loom::require(ctx_.be.ops().struct_size >= LOOM_OPS_SIZE_V2,
                  who_ + ": tensor parallelism needs a backend with the ABI 1.1 ops",
                  LOOM_ERR_UNIMPLEMENTED);
  opt_ = parse_options(loom::Config(host, cfg), a, ctx_.tp, who_, Family::kT5);
  enc_opt_ = opt_;
  enc_opt_.bidirectional = true;
  const loom_parallel_layout l = host_layout(host);
  if (opt_.fp8.delayed() && l.data > 1)  // delayed FP8 scaling's amaxes span the global batch
    batch_group_ = join_group(host, ctx_.be, LOOM_GROUP_DATA_CONTEXT, l.data);
  build();
}

// Parameters in checkpoint order: the shared embedding, the encoder, the decoder, the output
// bias. Every tensor is this rank's shard with the usual tensor-parallel conventions.
void T5Model::build() {
  const Options& o = opt_;
  const int64_t C = o.n_embd;
  ParamStore& ps = params_;
  ParamDeclarer d(o, ps, false);
  const int64_t vrows = o.padded_vocab / o.tp;
  ps.add("wte", {vrows, C}, 1, 0, Init::kNormal, d.std);
  if (o.relative) {  // each stack's bias table, its heads split like the attention's
    ps.add("enc.rel_bias", {o.hq(), o.rel_buckets}, 1, 0, Init::kNormal, d.std);
    ps.add("dec.rel_bias", {o.hq(), o.rel_buckets}, 1, 0, Init::kNormal, d.std);
  } else {
    ps.add("wpe", {o.max_seq_len, C}, 1, -1, Init::kNormal, d.std);
  }
  for (int64_t l = 0; l < o.n_layer; ++l) kPreNormBlock.declare(d, "enc.h." + s(l));
  d.norm("enc.ln_f");
  for (int64_t l = 0; l < o.dec_layers; ++l) T5DecoderLayer::declare(d, "dec.h." + s(l));
  d.norm("dec.ln_f");
  ps.add("lm_head.bias", {vrows}, 0, 0, Init::kZeros);  // Megatron's T5LMHead bias
  ps.add_fp8_state(o.fp8);  // last: the parameters before keep their get_param indices
  ps.allocate(ctx_);
  ps.link_fp8(o.fp8);

  emb_ = Embedding::make(o, ps, ctx_);
  if (o.relative) {
    enc_rel_ = RelativeBias::make(o, ps, "enc.rel_bias", true);
    dec_rel_ = RelativeBias::make(o, ps, "dec.rel_bias", false);
    debias_ = ctx_.alloc(ctx_.grad_dtype(), {o.hq(), args_.seq_len, args_.seq_len});
    ddbias_ = ctx_.alloc(ctx_.grad_dtype(), {o.hq(), o.dec_seq_len, o.dec_seq_len});
  }
  for (int64_t l = 0; l < o.n_layer; ++l)
    enc_.push_back(kPreNormBlock.make(enc_opt_, ps, "enc.h." + s(l)));
  enc_ln_f_ = Norm::make(o, ps, "enc.ln_f");
  dec_.reserve(o.dec_layers);
  for (int64_t l = 0; l < o.dec_layers; ++l) dec_.emplace_back(o, ps, "dec.h." + s(l));
  dec_ln_f_ = Norm::make(o, ps, "dec.ln_f");
  head_ = LmHead::make(o, ps, ctx_);
  ce_.shard = head_.shard;
  Param& bias = ps.at("lm_head.bias");
  bias_ = View(bias.value.get(), {head_.vocab});
  dbias_ = View(bias.grad.get(), {head_.vocab});

  const int64_t Ne = args_.micro_batch * args_.seq_len, Nd = args_.micro_batch * o.dec_seq_len;
  grads_.ensure(ctx_, o, std::max(Ne, Nd));
  dmem_ = ctx_.alloc({Ne, C});
  if (ctx_.tp.active()) picked_ = ctx_.alloc({std::max(Ne, Nd), C});
  slot(0);  // allocated at create, as the decoder-only model's
}

void T5Model::get_param(size_t i, loom_model_param* out) {
  params_.describe(i, out, who_, nullptr);  // one stage: the tied embedding is one tensor
}

void T5Model::zero_grad() { ctx_.call(&loom_ops::fill, params_.grads(), 0.0); }

// Copies n int32 to the device; `ids` checks them against the vocabulary first
// (`allow_ignore`: -1 is a valid target).
void T5Model::upload(Tensor& dst, const int32_t* src, int64_t n, bool ids, bool allow_ignore) {
  for (int64_t i = 0; ids && i < n; ++i)
    loom::require((src[i] >= 0 && src[i] < opt_.vocab) || (allow_ignore && src[i] == -1),
                  who_ + ": " + (allow_ignore ? "target" : "token") + " id " + s(src[i]) +
                      " at position " + s(i) + " is outside the vocabulary [0, " + s(opt_.vocab) +
                      ")");
  View v = view(dst, {n});
  loom::check(ctx_.host,
              ctx_.be.api()->from_host(ctx_.be.self(), v.get(), src, (size_t)n * sizeof(int32_t)));
}

// x(n,C) = wte[tokens] + wpe[positions]; tok and pos already on the device. Under tensor
// parallelism the vocabulary-parallel lookup is reduced over the group, then the positions
// are added once.
void T5Model::embed(DLTensor* x, const int32_t* host_tokens, Tensor& tok, Tensor& pos, Tensor& ids,
                    Tensor& rows, int64_t& count, int64_t n) {
  const int64_t C = opt_.n_embd;
  View xv = view(x, {n, C}), t = view(tok, {n}), p = view(pos, {n});
  if (!ctx_.tp.active()) {
    emb_.forward(ctx_, xv, t, p);
    return;
  }
  count = emb_.vp.stage(ctx_.be, host_tokens, n, ids, rows);
  emb_.vp.forward(ctx_.be, ctx_.tp, emb_.wte, ids, rows, count, picked_, nullptr, xv);
  if (emb_.wpe) loom::embedding_forward(ctx_.be, xv.get(), p, emb_.wpe, true);
}

void T5Model::embed_backward(const DLTensor* dx, Tensor& tok, Tensor& pos, Tensor& ids,
                             Tensor& rows, int64_t count, int64_t n) {
  const int64_t C = opt_.n_embd;
  View dv = view(dx, {n, C}), t = view(tok, {n}), p = view(pos, {n});
  if (!ctx_.tp.active()) {
    emb_.backward(ctx_, dv, t, p);
    return;
  }
  emb_.vp.backward(ctx_.be, ctx_.tp, emb_.dwte, ids, rows, count, picked_, dv, nullptr);
  if (emb_.dwpe) loom::embedding_backward(ctx_.be, emb_.dwpe, p, dv);
}

// Megatron's convention (6 FLOPs per matmul parameter per token, attention scores and sums
// at 12 per head dimension per key), per encoder token of the micro-batch: the encoder runs
// T tokens, the decoder K, and each decoder token also attends to T encoder keys.
double T5Model::flops_per_token() const {
  const Options& o = opt_;
  const double C = (double)o.n_embd, q = (double)(o.n_head * o.head_dim);
  const double kv = (double)(o.n_kv_head * o.head_dim), F = (double)o.ffn_hidden;
  const double T = (double)args_.seq_len, K = (double)o.dec_seq_len;
  const double layer = C * (q + 2 * kv) + q * C + 2 * C * F;  // self-attention and MLP
  const double cross_q = C * q + q * C, cross_kv = C * 2 * kv;
  const double enc = (double)o.n_layer * (6.0 * layer + 12.0 * q * T) * T;
  const double dec = (double)o.dec_layers *
                     ((6.0 * (layer + cross_q) + 12.0 * q * (K + T)) * K + 6.0 * cross_kv * T);
  const double head = 6.0 * (double)o.vocab * C * K;
  return (enc + dec + head) / T;
}

}  // namespace loom::layers
