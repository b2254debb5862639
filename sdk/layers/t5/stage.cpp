// Loom layer library, T5's training step on its one stage: the micro-batch's arrays, the encoder
// and decoder forward, the head and loss, and the backward through both (see
// loom/cpp/layers/t5/t5.hpp).
#include <algorithm>
#include <string>

#include "loom/cpp/layers/t5/t5.hpp"
#include "loom/cpp/model_step.hpp"

namespace loom::layers {

namespace {
std::string s(int64_t v) { return std::to_string(v); }
}  // namespace

// Slot i, allocated on first use for micro_batch rows of seq_len encoder and dec_seq_len
// decoder tokens.
T5Slot& T5Model::slot(int64_t i) {
  loom::require(i >= 0 && i < (1 << 16), who_ + ": slot " + s(i) + " is outside [0, 65536)");
  if ((size_t)i >= slots_.size()) slots_.resize(i + 1);
  if (slots_[i]) return *slots_[i];
  auto S = std::make_unique<T5Slot>();
  const Options& o = opt_;
  const int64_t B = args_.micro_batch, Ne = B * args_.seq_len, Nd = B * o.dec_seq_len;
  const int64_t C = o.n_embd;
  const DLDataType st = ctx_.stat_dtype();
  for (int64_t l = 0; l <= o.n_layer; ++l) S->eres.push_back(ctx_.alloc({Ne, C}));
  for (int64_t l = 0; l <= o.dec_layers; ++l) S->dres.push_back(ctx_.alloc({Nd, C}));
  S->eacts.resize(o.n_layer);
  for (auto& a : S->eacts) a.ensure(ctx_, o, Ne);
  S->dacts.resize(o.dec_layers);
  for (auto& a : S->dacts) a.ensure(ctx_, o, Nd);
  S->xacts.resize(o.dec_layers);
  for (auto& a : S->xacts) a.ensure(ctx_, o, Nd, Ne);
  S->mem = ctx_.alloc({Ne, C});
  S->mem_mean = ctx_.alloc(st, {Ne});
  S->mem_rstd = ctx_.alloc(st, {Ne});
  S->lnf = ctx_.alloc({Nd, C});
  S->lnf_mean = ctx_.alloc(st, {Nd});
  S->lnf_rstd = ctx_.alloc(st, {Nd});
  if (head_.vocab > 0) S->logits = ctx_.alloc({Nd, head_.vocab});
  if (ctx_.tp.active()) {
    S->lse = ctx_.alloc(st, {Nd});
    S->stats = ctx_.alloc(st, {Nd, 3});
    S->gathered = ctx_.alloc(st, {(int64_t)o.tp * Nd, 3});
    S->eids = ctx_.alloc(loom_i32(), {Ne});
    S->erows = ctx_.alloc(loom_i32(), {Ne});
    S->dids = ctx_.alloc(loom_i32(), {Nd});
    S->drows = ctx_.alloc(loom_i32(), {Nd});
  } else {
    S->losses = ctx_.alloc(st, {Nd});
  }
  S->etok = ctx_.alloc(loom_i32(), {Ne});
  S->epos = ctx_.alloc(loom_i32(), {Ne});
  S->dtok = ctx_.alloc(loom_i32(), {Nd});
  S->dpos = ctx_.alloc(loom_i32(), {Nd});
  S->targets = ctx_.alloc(loom_i32(), {Nd});
  if (o.relative) {
    S->ebias = ctx_.alloc({o.hq(), args_.seq_len, args_.seq_len});
    S->dbias = ctx_.alloc({o.hq(), o.dec_seq_len, o.dec_seq_len});
  }
  slots_[i] = std::move(S);
  return *slots_[i];
}

// position = "relative": each stack's bias for this micro-batch's (T, T) and (K, K) calls,
// and views of the gradients its layers add to.
void T5Model::relative_bias(T5Slot& S) {
  const int64_t H = opt_.hq(), T = S.es.T, K = S.ds.T;
  S.ebias_v = view(S.ebias, {H, T, T});
  S.dbias_v = view(S.dbias, {H, K, K});
  S.debias_v = view(debias_, {H, T, T});
  S.ddbias_v = view(ddbias_, {H, K, K});
  enc_rel_.forward(ctx_, S.ebias_v, S.ebucket, 0, T, T);
  dec_rel_.forward(ctx_, S.dbias_v, S.dbucket, 0, K, K);
  S.eab = {S.ebias_v, S.debias_v};
  S.dab = {S.dbias_v, S.ddbias_v};
  S.es.bias = &S.eab;
  S.ds.bias = &S.dab;
}

// One stage reads everything: the encoder's tokens and padding, the decoder's tokens and
// targets. No tensor flows between stages.
void T5Model::stage_info(loom_stage_info* out) {
  loom::require(out && out->struct_size >= LOOM_STAGE_INFO_SIZE_V2,
                who_ + ": stage_info needs out->struct_size >= LOOM_STAGE_INFO_SIZE_V2");
  out->is_first = 1;
  out->is_last = 1;
  reads_ = {LOOM_ARRAY_TOKENS, LOOM_ARRAY_PADDING_MASK, LOOM_ARRAY_DEC_TOKENS,
            LOOM_ARRAY_DEC_TARGETS};
  out->num_reads = reads_.size();
  out->reads = reads_.data();
  out->num_inputs = 0;
  out->inputs = nullptr;
  out->num_outputs = 0;
  out->outputs = nullptr;
  out->num_losses = 1;
  out->losses = kT5LossNames;
}

// The encoder's padding: each row's real tokens (padding_mask 1s, then 0s) are one sequence
// of its bidirectional attention and the keys its decoder row attends to.
void T5Model::read_padding(T5Slot& S, const loom_microbatch& mb) {
  const int64_t B = mb.batch, T = mb.seq_len;
  S.enc_len = loom::padding_lengths(loom::batch_ids(mb, LOOM_ARRAY_PADDING_MASK, who_), B, T, who_);
  S.cu_enc.assign(1, 0);
  S.at_enc.clear();
  for (int64_t b = 0; b < B; ++b) {
    S.cu_enc.push_back(S.cu_enc.back() + S.enc_len[(size_t)b]);
    S.at_enc.push_back((int32_t)(b * T));
  }
  S.at_enc.push_back((int32_t)(B * T));
  S.enc_docs = loom_attention_seqlens{};
  S.enc_docs.base = {sizeof(loom_attention_seqlens), LOOM_EXT_ATTENTION_SEQLENS, LOOM_EXT_REQUIRED,
                     nullptr};
  S.enc_docs.num_seqs = B;
  S.enc_docs.cu_seqlens_q = S.enc_docs.cu_seqlens_k = S.cu_enc.data();
  S.enc_docs.cu_seqlens_q_padded = S.enc_docs.cu_seqlens_k_padded = S.at_enc.data();
  S.es.docs = &S.enc_docs;
}

void T5Model::final_norm(const Norm& n, const DLTensor* x, Tensor& y, Tensor& mean, Tensor& rstd,
                         int64_t rows) {
  const int64_t C = opt_.n_embd;
  n.forward(ctx_, view(y, {rows, C}), view(mean, {rows}), view(rstd, {rows}), view(x, {rows, C}));
}

// logits = dec.ln_f's output wte^T + lm_head.bias, then the cross-entropy; with `grad`,
// dlogits replace the logits in place. Returns the sum of the token losses.
double T5Model::head_forward(T5Slot& S, const int32_t* targets, bool grad) {
  const int64_t N = S.nd, C = opt_.n_embd, V = head_.vocab;
  const loom::tp::Group& g = ctx_.tp;
  upload(S.targets, targets, N, true, true);
  View logits = view(S.logits, {N, V}), tgt = view(S.targets, {N}), y = view(S.lnf, {N, C});
  if (V > 0) {
    head_.forward(ctx_, logits, head_.cols, y, N, C, 0);
    loom::bias_add(ctx_.be, logits.get(), bias_);
  }
  const double scale = S.loss_scale * S.lm_weight;
  if (g.active()) {
    const double sum =
        ce_.forward(ctx_.be, g, S.logits, tgt, targets, N, S.stats, S.gathered, S.lse);
    if (grad) ce_.backward(ctx_.be, S.logits, S.logits, tgt, S.lse, N, scale);
    return sum;
  }
  View losses = view(S.losses, {N});
  loom::softmax_cross_entropy(ctx_.be, losses.get(), grad ? logits.get() : nullptr, logits, tgt,
                              scale);
  host_losses_.resize(N);
  if (ctx_.dtype.bits == 64) {
    loom::check(ctx_.host, ctx_.be.api()->to_host(ctx_.be.self(), losses.get(), host_losses_.data(),
                                                  N * sizeof(double)));
  } else {
    std::vector<float> f(N);
    loom::check(ctx_.host,
                ctx_.be.api()->to_host(ctx_.be.self(), losses.get(), f.data(), N * sizeof(float)));
    std::copy(f.begin(), f.end(), host_losses_.begin());
  }
  double sum = 0.0;
  for (int64_t i = 0; i < N; ++i) sum += host_losses_[i];
  return sum;
}

// grads_.dres = d(the last decoder layer's output) from the dlogits in S.logits.
void T5Model::head_backward(T5Slot& S) {
  const int64_t N = S.nd, C = opt_.n_embd, V = head_.vocab;
  View logits = view(S.logits, {N, V}), y = view(S.lnf, {N, C}), dln = view(grads_.dln, {N, C});
  if (V > 0) {
    head_.backward(ctx_, dln, logits, head_.cols, y, N);
    loom::bias_backward(ctx_.be, dbias_.get(), logits);
  } else {  // this rank holds only padding
    ctx_.call(&loom_ops::fill, dln.get(), 0.0);
  }
  loom::tp::CopyToTensorRegion::backward(ctx_.tp, dln);
  View x = view(S.dres[opt_.dec_layers], {N, C}), dres = view(grads_.dres, {N, C});
  dec_ln_f_.backward(ctx_, dres, dln, x, view(S.lnf_mean, {N}), view(S.lnf_rstd, {N}));
}

void T5Model::stage_forward(loom_stage_forward_args& a) {
  loom::require(a.struct_size >= LOOM_STAGE_FORWARD_ARGS_SIZE_V2,
                who_ + ": stage_forward args smaller than ABI 2.0's");
  loom::require_known_exts(a.ext, {}, who_ + ": stage_forward");
  loom::require(a.mb != nullptr && a.mb->struct_size >= LOOM_MICROBATCH_SIZE_V2,
                who_ + ": stage_forward needs a micro-batch of ABI 2.0's size");
  const loom_microbatch& mb = *a.mb;
  loom::require_known_exts(mb.ext, {}, who_ + ": stage_forward's micro-batch");
  loom::require(mb.batch > 0 && mb.batch <= args_.micro_batch && mb.seq_len > 0 &&
                    mb.seq_len <= args_.seq_len,
                who_ + ": micro-batch (" + s(mb.batch) + " x " + s(mb.seq_len) +
                    ") exceeds the create args (" + s(args_.micro_batch) + " x " +
                    s(args_.seq_len) + ")");
  T5Slot& S = slot(a.slot);
  *params_.fp8_recording() = !a.no_grad;  // an evaluation's amaxes are not the step's
  loom::require(!S.pending, who_ + ": slot " + s(a.slot) +
                                " still holds a micro-batch waiting for its stage_backward");
  const int64_t B = mb.batch, T = mb.seq_len, K = opt_.dec_seq_len, C = opt_.n_embd;
  S.es = Step{B, T, 0};
  S.ds = Step{B, K, 0};
  read_padding(S, mb);
  S.cs = CrossStep{B, K, T, S.enc_len.data(), nullptr};
  S.ne = B * T;
  S.nd = B * K;
  S.loss_scale = a.loss_scale;
  if (opt_.relative) relative_bias(S);
  const int32_t* etok = loom::batch_ids(mb, LOOM_ARRAY_TOKENS, who_);
  const int32_t* dtok = loom::batch_ids(mb, LOOM_ARRAY_DEC_TOKENS, who_, K);
  const int32_t* targets = loom::batch_ids(mb, LOOM_ARRAY_DEC_TARGETS, who_, K);

  // encoder: positions 0..T-1 of every row, then the bidirectional layers and enc.ln_f
  pos_host_.resize(std::max(S.ne, S.nd));
  for (int64_t i = 0; i < S.ne; ++i) pos_host_[i] = (int32_t)(i % T);
  upload(S.etok, etok, S.ne, true, false);
  upload(S.epos, pos_host_.data(), S.ne, false, false);
  embed(S.eres[0], etok, S.etok, S.epos, S.eids, S.erows, S.ecount, S.ne);
  for (int64_t l = 0; l < opt_.n_layer; ++l)
    enc_[l]->forward(ctx_, enc_opt_, S.es, S.eres[l], S.eres[l + 1], S.eacts[l], nullptr, 0);
  final_norm(enc_ln_f_, S.eres[opt_.n_layer], S.mem, S.mem_mean, S.mem_rstd, S.ne);

  // decoder: positions 0..K-1, the causal layers with cross-attention to mem, dec.ln_f
  for (int64_t i = 0; i < S.nd; ++i) pos_host_[i] = (int32_t)(i % K);
  upload(S.dtok, dtok, S.nd, true, false);
  upload(S.dpos, pos_host_.data(), S.nd, false, false);
  embed(S.dres[0], dtok, S.dtok, S.dpos, S.dids, S.drows, S.dcount, S.nd);
  View mem = view(S.mem, {S.ne, C});
  for (int64_t l = 0; l < opt_.dec_layers; ++l) {
    CrossActs& xa = S.xacts[l];
    View k = view(xa.k, {S.ne, opt_.kv_dim()}), v = view(xa.v, {S.ne, opt_.kv_dim()});
    dec_[l].cross().project_memory(ctx_, mem, S.ne, k, v);
    dec_[l].forward(ctx_, opt_, S.ds, S.cs, S.dres[l], xa.k, xa.v, S.dres[l + 1], S.dacts[l], xa,
                    nullptr, 0);
  }
  final_norm(dec_ln_f_, S.dres[opt_.dec_layers], S.lnf, S.lnf_mean, S.lnf_rstd, S.nd);

  // Megatron's T5 loss is the mean over the real targets (sum / loss_mask.sum()): under the
  // host's scale of 1 / (B T) that is weight B T / count.
  double count = 0;
  for (int64_t i = 0; i < S.nd; ++i) count += targets[i] != -1;
  S.lm_weight = (double)S.ne / std::max(count, 1.0);
  losses_[0] = loom_loss{LOOM_LOSS_SIZE_V2, kT5LossNames[0], head_forward(S, targets, !a.no_grad),
                         count, S.lm_weight};
  a.num_outputs = 0;
  a.outputs = nullptr;
  a.num_losses = 1;
  a.losses = losses_;
  S.pending = !a.no_grad;
}

void T5Model::stage_backward(loom_stage_backward_args& a) {
  loom::require(a.struct_size >= LOOM_STAGE_BACKWARD_ARGS_SIZE_V2,
                who_ + ": stage_backward args smaller than ABI 2.0's");
  loom::require_known_exts(a.ext, {}, who_ + ": stage_backward");
  const int64_t si = a.slot;
  loom::require(
      si >= 0 && (size_t)si < slots_.size() && slots_[si] && slots_[si]->pending,
      who_ + ": stage_backward of slot " + s(si) + ", which holds no forward with gradients");
  T5Slot& S = *slots_[si];
  *params_.fp8_recording() = true;  // dy's amaxes, and x's and W's again, are the step's
  const int64_t C = opt_.n_embd;
  head_backward(S);
  // decoder, top down; each layer's cross-attention adds its part of d(mem)
  View dmem = view(dmem_, {S.ne, C}), mem = view(S.mem, {S.ne, C});
  ctx_.call(&loom_ops::fill, dmem.get(), 0.0);
  if (opt_.relative) {  // the layers add their bias gradients to these
    ctx_.call(&loom_ops::fill, S.debias_v.get(), 0.0);
    ctx_.call(&loom_ops::fill, S.ddbias_v.get(), 0.0);
  }
  for (int64_t l = opt_.dec_layers; l-- > 0;)
    dec_[l].backward(ctx_, opt_, S.ds, S.cs, S.dres[l], mem, S.dacts[l], S.xacts[l], dmem, grads_);
  if (opt_.relative) dec_rel_.backward(ctx_, S.ddbias_v, S.dbucket, S.ds.T, S.ds.T);
  embed_backward(grads_.dres, S.dtok, S.dpos, S.dids, S.drows, S.dcount, S.nd);
  // d(mem) from this rank's heads, summed over the tensor group; then the encoder
  loom::tp::CopyToTensorRegion::backward(ctx_.tp, dmem);
  View x = view(S.eres[opt_.n_layer], {S.ne, C}), dres = view(grads_.dres, {S.ne, C});
  enc_ln_f_.backward(ctx_, dres, dmem, x, view(S.mem_mean, {S.ne}), view(S.mem_rstd, {S.ne}));
  for (int64_t l = opt_.n_layer; l-- > 0;)
    enc_[l]->backward(ctx_, enc_opt_, S.es, S.eres[l], S.eacts[l], grads_);
  if (opt_.relative) enc_rel_.backward(ctx_, S.debias_v, S.ebucket, S.es.T, S.es.T);
  embed_backward(grads_.dres, S.etok, S.epos, S.eids, S.erows, S.ecount, S.ne);
  a.num_dinputs = 0;
  a.dinputs = nullptr;
  S.pending = false;
}

void T5Model::finish_grads() {
  if (opt_.fp8.delayed()) update_fp8_scales(ctx_, params_, opt_.fp8, batch_group_, batch_group_);
}

}  // namespace loom::layers
