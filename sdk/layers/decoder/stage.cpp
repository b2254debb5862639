// Loom layer library, pipeline stages: per-slot activations, the stage's forward and backward (the
// embedding on the first stage, the head and loss on the last), and finish_grads (what the model's
// own parallelism leaves partial).
#include <algorithm>
#include <optional>
#include <string>

#include "loom/cpp/comm.hpp"
#include "loom/cpp/layers/decoder/decoder.hpp"
#include "loom/cpp/layers/moe/moe.hpp"
#include "loom/cpp/layers/ops/context_parallel.hpp"
#include "loom/cpp/model_step.hpp"

namespace loom::layers {

namespace {
std::string s(int64_t v) { return std::to_string(v); }
}  // namespace

// Slot i, allocated on first use for micro_batch x seq_len tokens (this rank's seq_len / CP
// under context parallelism).
Slot& DecoderModel::slot(int64_t i) {
  loom::require(i >= 0 && i < (1 << 16), who_ + ": slot " + s(i) + " is outside [0, 65536)");
  if ((size_t)i >= slots_.size()) slots_.resize(i + 1);
  if (slots_[i]) return *slots_[i];
  auto S = std::make_unique<Slot>();
  const Options& o = opt_;
  const int64_t N = args_.micro_batch * args_.seq_len / ctx_.cp.size, C = o.n_embd;
  const int64_t nl = ctx_.tp.sequence_parallel ? (N + o.tp - 1) / o.tp : N;
  const DLDataType st = ctx_.stat_dtype();
  for (size_t l = 0; l <= layers_.size(); ++l) S->res.push_back(ctx_.alloc({nl, C}));
  allocate_acts(*S, N);
  S->tokens = ctx_.alloc(loom_i32(), {N});
  S->targets = ctx_.alloc(loom_i32(), {N});
  S->positions = ctx_.alloc(loom_i32(), {N});
  if (o.first() && o.num_tokentypes > 0) S->types = ctx_.alloc(loom_i32(), {N});
  if (o.first() && o.post_norm) {
    S->emb_in = ctx_.alloc({nl, C});
    S->emb_mean = ctx_.alloc(st, {nl});
    S->emb_rstd = ctx_.alloc(st, {nl});
  }
  if (o.last() && family_) S->family = family_->make_acts(ctx_, o, N, args_.micro_batch);
  if (o.last() && o.mtp_layers > 0) mtp_alloc(*S, N);
  if (o.first() && ctx_.tp.active()) {
    S->emb_ids = ctx_.alloc(loom_i32(), {N});
    S->emb_rows = ctx_.alloc(loom_i32(), {N});
  }
  if (o.last()) {
    S->lnf = ctx_.alloc({nl, C});
    if (o.norm_mean()) S->lnf_mean = ctx_.alloc(st, {nl});
    S->lnf_rstd = ctx_.alloc(st, {nl});
    if (ctx_.tp.sequence_parallel) S->lnf_full = ctx_.alloc({N, C});
    if (head_.vocab > 0) S->logits = ctx_.alloc({N, head_.cols});
    // losses and the loss statistics: f32 under mixed precision (backend.h)
    if (ctx_.tp.active()) {
      S->lse = ctx_.alloc(st, {N});
      S->stats = ctx_.alloc(st, {N, 3});
      S->gathered = ctx_.alloc(st, {(int64_t)o.tp * N, 3});
    } else {
      S->losses = ctx_.alloc(st, {N});
    }
  }
  slots_[i] = std::move(S);
  return *slots_[i];
}

// GPT reads tokens on the first stage and targets on the last, and every stage reads packed
// documents' positions when the data has them; one tensor, the hidden state, flows between
// stages.
void DecoderModel::stage_info(loom_stage_info* out) {
  loom::require(out && out->struct_size >= LOOM_STAGE_INFO_SIZE_V2,
                who_ + ": stage_info needs out->struct_size >= LOOM_STAGE_INFO_SIZE_V2");
  out->is_first = opt_.first();
  out->is_last = opt_.last();
  reads_.clear();
  if (opt_.first()) reads_.push_back(LOOM_ARRAY_TOKENS);
  if (family_) {
    family_->reads(opt_, reads_);
  } else {
    if (opt_.last()) reads_.push_back(LOOM_ARRAY_TARGETS);
    reads_.push_back(LOOM_ARRAY_POSITIONS);
  }
  out->num_reads = reads_.size();
  out->reads = reads_.data();
  const int64_t rows = ctx_.tp.local_rows(out->batch * out->seq_len / ctx_.cp.size);
  hidden_shape_[0] = rows;
  hidden_shape_[1] = opt_.n_embd;
  hidden_io_ = loom_stage_tensor{LOOM_STAGE_TENSOR_SIZE_V2, "hidden", ctx_.dtype, 2, hidden_shape_};
  out->num_inputs = opt_.first() ? 0 : 1;
  out->inputs = &hidden_io_;
  out->num_outputs = opt_.last() ? 0 : 1;
  out->outputs = &hidden_io_;
  if (!loss_names_.empty()) {
    out->num_losses = loss_names_.size();
    out->losses = loss_names_.data();
  } else if (family_) {
    out->num_losses = family_->loss_names(opt_, &out->losses);
  } else {
    out->num_losses = 1;
    out->losses = kLossNames;
  }
}

const int32_t* DecoderModel::local_ids(const loom_microbatch& mb, const char* name,
                                       std::vector<int32_t>& buf) {
  const int32_t* all = loom::batch_ids(mb, name, who_);
  if (ctx_.cp.size == 1) return all;
  buf.resize((size_t)(mb.batch * mb.seq_len / ctx_.cp.size));
  cp_slice(ctx_.cp, all, mb.batch, mb.seq_len, buf.data());
  return buf.data();
}

// ----- first stage: the embedding ----------------------------------------------------------
void DecoderModel::embed_forward(Slot& S, const int32_t* tokens, const int32_t* types) {
  const int64_t N = S.n, nl = S.nl, C = opt_.n_embd;
  const loom::tp::Group& g = ctx_.tp;
  upload_ids(S.tokens, LOOM_ARRAY_TOKENS, tokens, N, false);
  if (emb_.tte) {
    for (int64_t i = 0; i < N; ++i)
      loom::require(types[i] >= 0 && types[i] < opt_.num_tokentypes,
                    who_ + ": token type " + s(types[i]) + " at position " + s(i) +
                        " is outside [0, " + s(opt_.num_tokentypes) + ")");
    View v = view(S.types, {N});
    loom::check(ctx_.host, ctx_.be.api()->from_host(ctx_.be.self(), v.get(), types,
                                                    (size_t)N * sizeof(int32_t)));
  }
  if (opt_.learned_positions() &&
      S.s.docs) {  // learned positions restart with each packed document
    View v = view(S.positions, {N});
    loom::check(ctx_.host, ctx_.be.api()->from_host(ctx_.be.self(), v.get(), S.doc_pos.data(),
                                                    (size_t)N * sizeof(int32_t)));
    S.positions_sent.clear();
  } else if (opt_.learned_positions()) {
    upload_positions(S.positions, S.s, &S.positions_sent);
  }
  View x0 = view(S.res[0], {nl, C}), tok = view(S.tokens, {N}), pos = view(S.positions, {N});
  View typ = view(S.types, {N});
  if (!g.active()) {
    emb_.forward(ctx_, x0, tok, pos, typ);
    return;
  }
  S.emb_count = emb_.vp.stage(ctx_.be, tokens, N, S.emb_ids, S.emb_rows);
  View yf = view(sp_.y_full, {N, C});
  emb_.vp.forward(ctx_.be, g, emb_.wte, S.emb_ids, S.emb_rows, S.emb_count, sp_.picked, yf, x0);
  if (emb_.wpe) {  // the positions of this rank's rows, after the reduction: added once
    View mine = view(S.positions, {nl}, g.sequence_parallel ? g.rank * nl : 0);
    loom::embedding_forward(ctx_.be, x0.get(), mine, emb_.wpe, true);
  }
  if (emb_.tte) {  // token types likewise
    View mine = view(S.types, {nl}, g.sequence_parallel ? g.rank * nl : 0);
    loom::embedding_forward(ctx_.be, x0.get(), mine, emb_.tte, true);
  }
}

// The embeddings' gradients from `dres` (nl, C), the gradient of the first layer's input:
// only parameter gradients, so a split backward's W runs all of it (from a copy of dres).
void DecoderModel::embed_backward(Slot& S, const DLTensor* dres_in) {
  const int64_t N = S.n, nl = S.nl, C = opt_.n_embd;
  const loom::tp::Group& g = ctx_.tp;
  View dres(dres_in, {nl, C}), tok = view(S.tokens, {N}), pos = view(S.positions, {N});
  View typ = view(S.types, {N});
  if (emb_.dwte == nullptr) return;  // frozen embeddings (LoRA): no gradient to compute
  if (!g.active()) {
    emb_.backward(ctx_, dres, tok, pos, typ);
    return;
  }
  View dyf = view(sp_.dy_full, {N, C});
  emb_.vp.backward(ctx_.be, g, emb_.dwte, S.emb_ids, S.emb_rows, S.emb_count, sp_.picked, dres,
                   dyf);
  if (emb_.wpe) {
    View mine = view(S.positions, {nl}, g.sequence_parallel ? g.rank * nl : 0);
    loom::embedding_backward(ctx_.be, emb_.dwpe, mine, dres);
  }
  if (emb_.tte) {
    View mine = view(S.types, {nl}, g.sequence_parallel ? g.rank * nl : 0);
    loom::embedding_backward(ctx_.be, emb_.dtte, mine, dres);
  }
}

// ----- last stage: final norm, head, loss --------------------------------------------------
// ln_f over this rank's rows; returns its output for all N rows (gathered from the sequence
// shards under sequence parallelism). BERT's post-LN has no ln_f: the last layer's output is
// taken as it is (copied into S.lnf, which the heads read).
const DLTensor* DecoderModel::final_norm(Slot& S) {
  const int64_t N = S.n, nl = S.nl, C = opt_.n_embd;
  View xl = view(S.res[layers_.size()], {nl, C}), lnf = view(S.lnf, {nl, C});
  View mean = view(S.lnf_mean, {nl}), rstd = view(S.lnf_rstd, {nl});
  if (opt_.post_norm)
    ctx_.call(&loom_ops::copy, lnf.get(), (const DLTensor*)xl);
  else
    ln_f_.forward(ctx_, lnf, mean, rstd, xl);
  if (!ctx_.tp.sequence_parallel) return S.lnf.get();
  View full = view(S.lnf_full, {N, C});
  loom::tp::GatherFromSequenceRegion::forward(ctx_.tp, lnf, full);
  return S.lnf_full.get();
}

// The head is column-parallel over the vocabulary: its input (ln_f's output) is replicated
// or gathered from the sequence shards. With `grad`, dlogits replace the logits in place.
double DecoderModel::head_forward(Slot& S, const int32_t* targets, bool grad,
                                  const loom_token_stats* per_token) {
  const int64_t N = S.n, C = opt_.n_embd, V = head_.vocab;
  const loom::tp::Group& g = ctx_.tp;
  upload_ids(S.targets, LOOM_ARRAY_TARGETS, targets, N, true);
  const DLTensor* x = final_norm(S);
  View logits = view(S.logits, {N, head_.cols}), tgt = view(S.targets, {N});
  const DLTensor* in = family_ ? family_->head_input(ctx_, S, x) : x;  // BERT's transform
  if (V > 0) head_.forward(ctx_, logits, head_.cols, in, N, C, 0);
  if (V > 0 && family_) family_->logits_done(ctx_, logits.get());
  if ((g.active() || per_token) && !S.stats) {
    const DLDataType st = ctx_.stat_dtype();
    S.lse = ctx_.alloc(st, {N});
    S.stats = ctx_.alloc(st, {N, 3});
    S.gathered = ctx_.alloc(st, {(int64_t)g.size * N, 3});
  }
  return lm_loss(LossBufs{S.logits, S.losses, S.stats, S.gathered, S.lse}, tgt, targets, N, grad,
                 S.loss_scale * S.lm_weight, per_token, 0);
}

// The summed cross-entropy of b.logits (N, head_.cols) against targets (host, and tgt on the
// device); with `grad`, dlogits times dscale replace the logits in place.
double DecoderModel::lm_loss(const LossBufs& b, const DLTensor* tgt, const int32_t* targets,
                             int64_t N, bool grad, double dscale, const loom_token_stats* per_token,
                             int64_t term) {
  const loom::tp::Group& g = ctx_.tp;
  if (g.active() || per_token) {  // the statistics path also tells the most likely token
    const double sum =
        ce_.forward(ctx_.be, g, b.logits, tgt, targets, N, b.stats, b.gathered, b.lse,
                    per_token ? per_token->loss : nullptr, per_token ? per_token->top1 : nullptr);
    if (grad) ce_.backward(ctx_.be, b.logits, b.logits, tgt, b.lse, N, dscale);
    return sum;
  }
  View losses = view(b.losses, {N}), logits = view(b.logits, {N, head_.cols});
  if (device_sums_ != nullptr && term < device_terms_) {  // the host reads it after the update
    View total = view(device_sums_, {1}, term);
    loom::softmax_cross_entropy(ctx_.be, losses.get(), grad ? logits.get() : nullptr, logits, tgt,
                                dscale, total.get());
    return 0.0;
  }
  loom::softmax_cross_entropy(ctx_.be, losses.get(), grad ? logits.get() : nullptr, logits, tgt,
                              dscale);
  double sum = 0.0;  // read last, so a device backend is not stalled before the backward
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
  return sum;
}

// grads_.dres = d(last layer's output) from the dlogits in S.logits.
void DecoderModel::head_backward(Slot& S) {
  const int64_t N = S.n, nl = S.nl, C = opt_.n_embd;
  const loom::tp::Group& g = ctx_.tp;
  View xl = view(S.res[layers_.size()], {nl, C}), lnf = view(S.lnf, {nl, C});
  View mean = view(S.lnf_mean, {nl}), rstd = view(S.lnf_rstd, {nl});
  View full = view(S.lnf_full, {N, C}), dln = view(grads_.dln, {nl, C});
  View dres = view(grads_.dres, {nl, C}), dxf = view(sp_.dx_full, {N, C});
  View logits = view(S.logits, {N, head_.cols});
  DLTensor* dx = g.sequence_parallel ? dxf.get() : dln.get();
  if (family_) {
    family_->head_backward(ctx_, head_, S, dx);
    if (g.sequence_parallel) {  // dx is complete on every rank: keep this rank's rows
      View mine = view(sp_.dx_full, {nl, C}, g.rank * nl * C);
      ctx_.call(&loom_ops::copy, dln.get(), (const DLTensor*)mine);
    }
  } else {
    head_input_grad(logits, g.sequence_parallel ? full.get() : lnf.get(), dx, dln, N);
  }
  if (opt_.post_norm)
    ctx_.call(&loom_ops::copy, dres.get(), (const DLTensor*)dln);
  else
    ln_f_.backward(ctx_, dres, dln, xl, mean, rstd);
}

// dln (this rank's rows) = the LM head's input gradient from the dlogits in `logits`, x the
// head's (all N rows') input; under sequence parallelism through dx (N, C), else dx is dln.
void DecoderModel::head_input_grad(const DLTensor* logits, const DLTensor* x, DLTensor* dx,
                                   DLTensor* dln, int64_t N) {
  const loom::tp::Group& g = ctx_.tp;
  if (head_.vocab > 0)
    head_.backward(ctx_, dx, logits, head_.cols, x, N);
  else  // this rank holds only padding: no contribution
    ctx_.call(&loom_ops::fill, dx, 0.0);
  if (g.sequence_parallel)
    loom::tp::GatherFromSequenceRegion::backward(g, dx, dln);
  else
    loom::tp::CopyToTensorRegion::backward(g, dln);
}

// Packed documents (Megatron's reset_position_ids and reset_attention_mask): the positions
// array restarts at 0 where a document starts and counts up by one inside it; a row starts
// a document. The documents become the attention's variable-length sequences, back to back.
void DecoderModel::read_documents(Slot& S, const loom_microbatch& mb) {
  S.s.docs = nullptr;
  S.doc_pos.clear();
  if (!loom_microbatch_find(&mb, LOOM_ARRAY_POSITIONS)) return;
  const int32_t* pos = loom::batch_ids(mb, LOOM_ARRAY_POSITIONS, who_);
  const int64_t B = mb.batch, T = mb.seq_len;
  S.doc_pos.assign(pos, pos + B * T);
  S.cu_docs.clear();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int32_t p = pos[b * T + t];
      loom::require(p == 0 || (t > 0 && p == pos[b * T + t - 1] + 1),
                    who_ + ": positions[" + s(b) + "][" + s(t) + "] = " + s(p) +
                        ": a position is 0 (a document starts; always so at a row's start) or "
                        "the previous one plus 1");
      if (p == 0) S.cu_docs.push_back((int32_t)(b * T + t));
    }
  S.cu_docs.push_back((int32_t)(B * T));
  S.docs = loom_attention_seqlens{};
  S.docs.base = {sizeof(loom_attention_seqlens), LOOM_EXT_ATTENTION_SEQLENS, LOOM_EXT_REQUIRED,
                 nullptr};
  S.docs.num_seqs = (int64_t)S.cu_docs.size() - 1;
  S.docs.cu_seqlens_q = S.docs.cu_seqlens_k = S.cu_docs.data();
  S.s.docs = &S.docs;
}

// Post-LN (BERT's): the embeddings' sum (this rank's rows) is normalised in place by emb_ln,
// its input kept for the backward.
void DecoderModel::emb_norm_forward(Slot& S) {
  const int64_t nl = S.nl, C = opt_.n_embd;
  View x0 = view(S.res[0], {nl, C}), in = view(S.emb_in, {nl, C});
  View mean = view(S.emb_mean, {nl}), rstd = view(S.emb_rstd, {nl});
  ctx_.call(&loom_ops::copy, in.get(), (const DLTensor*)x0);
  emb_ln_.forward(ctx_, x0, mean, rstd, in);
}

// grads_.dres: d(emb_ln's output) in, d(the embeddings' sum) out.
void DecoderModel::emb_norm_backward(Slot& S) {
  const int64_t nl = S.nl, C = opt_.n_embd;
  View dres = view(grads_.dres, {nl, C}), dtmp = view(grads_.dtmp, {nl, C});
  View in = view(S.emb_in, {nl, C});
  View mean = view(S.emb_mean, {nl}), rstd = view(S.emb_rstd, {nl});
  emb_ln_.backward(ctx_, dtmp, dres, in, mean, rstd);
  ctx_.call(&loom_ops::copy, dres.get(), (const DLTensor*)dtmp);
}

// The last stage's loss terms: the LM's next-token (or BERT's masked) cross-entropy and the
// mixture of experts' terms, or a family's own (the classifier's in place of the LM head).
void DecoderModel::last_forward(Slot& S, const loom_microbatch& mb, loom_stage_forward_args& a,
                                const loom_token_stats* per_token) {
  a.losses = losses_.data();
  if (family_ && !family_->lm_head()) {
    a.num_losses = family_->classify(ctx_, S, mb, final_norm(S), !a.no_grad, losses_.data(), who_);
    return;
  }
  announce_head(false);
  const int32_t* targets = local_ids(mb, LOOM_ARRAY_TARGETS, cp_targets_);
  if (opt_.dpo_beta > 0) {
    a.num_losses = preference_forward(S, mb, targets, !a.no_grad);
    return;
  }
  double count = 0;
  for (int64_t i = 0; i < S.n; ++i) count += targets[i] != -1;
  // GPT's is the sum over all positions (weight 1); a family may weigh it (BERT: the mean
  // over its masked tokens).
  S.lm_weight = family_ ? family_->lm_weight(S, targets, count, who_) : 1.0;
  losses_[0] = loom_loss{LOOM_LOSS_SIZE_V2, kLossNames[0],
                         head_forward(S, targets, !a.no_grad, per_token), count, S.lm_weight};
  a.num_losses = 1;
  double mtp_sum = 0, mtp_count = 0;  // before the MoE terms: the depths may be MoE layers
  if (opt_.mtp_layers > 0) mtp_sum = mtp_forward(S, targets, !a.no_grad, mtp_count);
  if (opt_.num_experts > 0) a.num_losses = moe_terms(S, true);
  if (opt_.mtp_layers > 0) {  // the last term: the depths' summed losses at mtp_scale / depths
    a.num_losses = loss_names_.size();
    losses_[a.num_losses - 1] = loom_loss{LOOM_LOSS_SIZE_V2, "mtp", mtp_sum, mtp_count,
                                          opt_.mtp_scale / (double)opt_.mtp_layers};
  }
  if (family_)
    a.num_losses =
        family_->more_losses(ctx_, S, mb, !a.no_grad, losses_.data(), a.num_losses, who_);
}

// ----- the stage ---------------------------------------------------------------------------
void DecoderModel::stage_forward(loom_stage_forward_args& a) {
  loom::require(a.struct_size >= LOOM_STAGE_FORWARD_ARGS_SIZE_V2,
                who_ + ": stage_forward args smaller than ABI 2.0's");
  loom::require_known_exts(a.ext, {LOOM_EXT_STAGE_LOSSES, LOOM_EXT_DEVICE_LOSSES},
                           who_ + ": stage_forward");
  device_sums_ = nullptr, device_terms_ = 0;
  if (const auto* dl =
          reinterpret_cast<const loom_device_losses*>(loom_ext_find(a.ext, LOOM_EXT_DEVICE_LOSSES));
      dl && dl->base.struct_size >= LOOM_DEVICE_LOSSES_SIZE_V1 && dl->sums && !a.no_grad) {
    loom::require(dl->sums->ndim == 1 && loom_dtype_eq(dl->sums->dtype, loom_f64()),
                  who_ + ": loom.device-losses/1's sums must be a (n) f64 tensor");
    device_sums_ = dl->sums, device_terms_ = dl->sums->shape[0];
  }
  loom::require(a.mb != nullptr && a.mb->struct_size >= LOOM_MICROBATCH_SIZE_V2,
                who_ + ": stage_forward needs a micro-batch of ABI 2.0's size");
  const loom_microbatch& mb = *a.mb;
  loom::require_known_exts(
      mb.ext, {LOOM_EXT_TOKEN_STATS, LOOM_EXT_PREFERENCE_ROWS, LOOM_EXT_MICROBATCH_DEVICE},
      who_ + ": stage_forward's micro-batch");
  const auto* per_token =
      reinterpret_cast<const loom_token_stats*>(loom_ext_find(mb.ext, LOOM_EXT_TOKEN_STATS));
  loom::require(!per_token || (per_token->base.struct_size >= LOOM_TOKEN_STATS_SIZE_V1 &&
                               per_token->loss && per_token->top1),
                who_ + ": loom.token-stats/1 needs its loss and top1 arrays");
  bind_device_batch(mb, per_token != nullptr);
  loom::require(mb.batch > 0 && mb.batch <= args_.micro_batch && mb.seq_len > 0 &&
                    mb.seq_len <= args_.seq_len,
                who_ + ": micro-batch (" + s(mb.batch) + " x " + s(mb.seq_len) +
                    ") exceeds the create args (" + s(args_.micro_batch) + " x " +
                    s(args_.seq_len) + ")");
  Slot& S = slot(a.slot);
  loom::require(!S.pending && !S.weights_pending,
                who_ + ": slot " + s(a.slot) + " still holds a micro-batch waiting for its " +
                    (S.pending ? "stage_backward" : "weight_backward"));
  S.s = Step{mb.batch, mb.seq_len / ctx_.cp.size, 0};  // this rank's chunks under CP
  if (family_)
    family_->sequences(S, mb, who_);  // BERT's padding
  else
    read_documents(S, mb);
  loom::require(ctx_.cp.size == 1 || (!S.s.docs && !per_token),
                who_ +
                    ": context parallelism with packed sequences (data.pack_sequences) or "
                    "per-token statistics (loom eval) is not implemented",
                LOOM_ERR_UNIMPLEMENTED);
  S.n = S.s.N();
  S.nl = ctx_.tp.local_rows(S.n);
  // Under context parallelism each rank sums the losses of its chunks only, and the host
  // averages gradients over data x context: times CP, that average is the sum over chunks.
  S.loss_scale = a.loss_scale * ctx_.cp.size;
  // the MoE terms' weight (moe_terms.cpp), the micro-batch's tokens on every context rank, at
  // the scale the LM loss's gradient has here (the host averages over the context ranks)
  S.s.moe_grad_scale = a.no_grad ? 0.0 : S.loss_scale * (double)(S.n * ctx_.cp.size);
  *params_.fp8_recording() = !a.no_grad;  // an evaluation's amaxes are not the step's
  const int64_t C = opt_.n_embd;
  unit_need(0, false);
  if (opt_.first()) {
    embed_forward(
        S, local_ids(mb, LOOM_ARRAY_TOKENS, cp_tokens_),
        opt_.num_tokentypes > 0 ? loom::batch_ids(mb, LOOM_ARRAY_TOKEN_TYPES, who_) : nullptr);
    if (opt_.post_norm) emb_norm_forward(S);
  } else {
    loom::require(a.num_inputs == 1 && a.inputs != nullptr && a.inputs[0] != nullptr,
                  who_ + ": stage " + s(opt_.stage) +
                      " is not the first: stage_forward needs one input, the hidden state");
    const DLTensor* input = a.inputs[0];
    loom::require(loom_tensor_numel(input) == S.nl * C && loom_dtype_eq(input->dtype, ctx_.dtype),
                  who_ + ": stage input has " + s(loom_tensor_numel(input)) +
                      " elements; expected (" + s(S.nl) + ", " + s(C) + ") in the compute dtype");
    View x0 = view(S.res[0], {S.nl, C});
    View in(input, {S.nl, C});
    ctx_.call(&loom_ops::copy, x0.get(), (const DLTensor*)in);
  }
  layers_forward(S);
  a.num_outputs = 0;
  a.outputs = nullptr;
  a.num_losses = 0;
  a.losses = nullptr;
  if (opt_.last()) {
    last_forward(S, mb, a, per_token);
  } else {
    if (opt_.num_experts > 0) {  // this stage's layers' share of the balancing losses
      loom::require(loom_ext_find(a.ext, LOOM_EXT_STAGE_LOSSES) != nullptr,
                    who_ + ": stage " + s(opt_.stage) +
                        " holds mixture-of-experts layers whose balancing losses and loads the "
                        "schedule must add up over the stages (" LOOM_EXT_STAGE_LOSSES
                        "); this schedule does not chain it on stage_forward",
                    LOOM_ERR_UNIMPLEMENTED);
      a.num_losses = moe_terms(S, false);
      a.losses = losses_.data();
    }
    S.out = view(S.res[layers_.size()], {S.nl, C});
    S.out_ptr = S.out.get();
    a.num_outputs = 1;
    a.outputs = &S.out_ptr;
  }
  if (opt_.moe_expert_bias && !a.no_grad) count_expert_loads(S);  // MTP's depths' too
  unit_done(0, false);
  S.pending = !a.no_grad;
}

void DecoderModel::stage_backward(loom_stage_backward_args& a) {
  loom::require(a.struct_size >= LOOM_STAGE_BACKWARD_ARGS_SIZE_V2,
                who_ + ": stage_backward args smaller than ABI 2.0's");
  loom::require_known_exts(a.ext, {LOOM_EXT_SPLIT_BACKWARD}, who_ + ": stage_backward");
  const int64_t si = a.slot;
  loom::require(
      si >= 0 && (size_t)si < slots_.size() && slots_[si] && slots_[si]->pending,
      who_ + ": stage_backward of slot " + s(si) + ", which holds no forward with gradients");
  Slot& S = *slots_[si];
  *params_.fp8_recording() = true;  // a recomputed forward's amaxes are the step's
  // A split backward's B: the parameter gradients are recorded for weight_backward.
  const bool split = loom_ext_find(a.ext, LOOM_EXT_SPLIT_BACKWARD) != nullptr;
  if (split)
    loom::require(params_.residency() == LOOM_RESIDENCY_NONE,
                  who_ + ": a split backward (" LOOM_EXT_SPLIT_BACKWARD
                         ") with a parameter residency (FSDP) is not implemented",
                  LOOM_ERR_UNIMPLEMENTED);
  std::optional<RecordWeightGrads> record;
  if (split) record.emplace(ctx_.be, &S.weights);
  const int64_t C = opt_.n_embd;
  unit_need(0, true);
  if (opt_.last()) {
    if (opt_.mtp_layers > 0) mtp_backward(S);  // first: head_backward's scratch is the layers'
    head_backward(S);
    if (opt_.mtp_layers > 0) {
      View dres = view(grads_.dres, {S.nl, C}), carry = view(mtp_carry_, {S.nl, C});
      ctx_.call(&loom_ops::add, dres.get(), (const DLTensor*)dres, (const DLTensor*)carry);
    }
  } else {
    const DLTensor* doutput = a.num_doutputs == 1 && a.doutputs ? a.doutputs[0] : nullptr;
    loom::require(doutput != nullptr && loom_tensor_numel(doutput) == S.nl * C,
                  who_ + ": stage_backward needs doutput of (" + s(S.nl) + ", " + s(C) + ")");
    View dres = view(grads_.dres, {S.nl, C});
    View d(doutput, {S.nl, C});
    ctx_.call(&loom_ops::copy, dres.get(), (const DLTensor*)d);
  }
  layers_backward(S);
  if (opt_.first()) {
    announce_head(true);
    if (opt_.post_norm) emb_norm_backward(S);
    View dres = view(grads_.dres, {S.nl, C});
    weight_grad_reading(
        ctx_.be, [this, &S](const Backend&, const DLTensor* d) { embed_backward(S, d); },
        (const DLTensor*)dres);
    a.num_dinputs = 0;
    a.dinputs = nullptr;
  } else {
    dinput_ = view(grads_.dres, {S.nl, C});
    dinput_ptr_ = dinput_.get();
    a.num_dinputs = 1;
    a.dinputs = &dinput_ptr_;
  }
  unit_done(0, true);
  S.pending = false;
  S.weights_pending = split;
}

void DecoderModel::weight_backward(const loom_stage_weight_args& a) {
  loom::require(a.struct_size >= LOOM_STAGE_WEIGHT_ARGS_SIZE_V2_19,
                who_ + ": weight_backward args smaller than ABI 2.19's");
  loom::require_known_exts(a.ext, {}, who_ + ": weight_backward");
  const int64_t si = a.slot;
  loom::require(si >= 0 && (size_t)si < slots_.size() && slots_[si] && slots_[si]->weights_pending,
                who_ + ": weight_backward of slot " + s(si) +
                    ", whose split backward's first half (B) has not run");
  Slot& S = *slots_[si];
  S.weights.run();
  S.weights_pending = false;
}

// Sequence-parallel replicated parameters (norms, row-parallel biases, wpe) saw only this
// rank's tokens, and QK-norm's weights only this rank's heads: sum over the tensor group. The tied
// embedding's two copies (first and last stage) each hold part of the gradient: sum over the
// embedding group, so both step alike.
void DecoderModel::finish_grads() {
  if (opt_.moe_expert_bias) update_expert_biases();
  if (opt_.fp8.delayed())
    update_fp8_scales(ctx_, params_, opt_.fp8, batch_group_, expert_batch_group_);
  // (When the host moves each unit's gradients at its end, unit_done summed them.)
  if (params_.residency() < LOOM_RESIDENCY_GRADS)
    for (Param& p : params_.all())
      if (tp_summed(p)) ctx_.tp.all_reduce(p.grad.get());
  if (embedding_group_ && !params_.at("wte").frozen)
    loom::check(ctx_.host,
                loom::comm_all_reduce(comm_, embedding_group_, params_.at("wte").grad.get(),
                                      LOOM_REDUCE_SUM, ctx_.be.stream()));
}

}  // namespace loom::layers
