// Loom layer library, BERT's stage code (model/bert, model/bert-classifier): the padding mask
// as the attention's sequences, the loss terms of the heads, and their backward into the
// final norm's output. The heads themselves are bert/head.cpp's.
#include <algorithm>
#include <string>

#include "loom/cpp/layers/decoder/decoder.hpp"
#include "loom/cpp/model_step.hpp"

namespace loom::layers {
namespace {
std::string s(int64_t v) { return std::to_string(v); }
}  // namespace

// BERT: d(transform output) from the output layer, summed over the vocabulary shards so that
// the replicated transform sees its whole gradient, then through the transform and the
// pooler into dx(N,C), complete on every rank. The classifier has the pooler's part only.
void DecoderModel::bert_head_backward(Slot& S, DLTensor* dx) {
  const int64_t N = S.n, C = opt_.n_embd, V = head_.vocab;
  const loom::tp::Group& g = ctx_.tp;
  const DLTensor* x = g.sequence_parallel ? S.lnf_full.get() : S.lnf.get();
  View xv = view(x, {N, C});
  if (opt_.classifier) {
    ctx_.call(&loom_ops::fill, dx, 0.0);
  } else {
    View logits = view(S.logits, {N, V}), dn = view(S.bert.dn, {N, C});
    View bn = view(S.bert.n, {N, C});
    if (V > 0) {
      head_.backward(ctx_, dn, logits, head_.cols, bn, N);
      loom::bias_backward(ctx_.be, bert_.dbias.get(), logits);
    } else {
      ctx_.call(&loom_ops::fill, dn.get(), 0.0);
    }
    if (g.active()) g.all_reduce(dn.get());
    bert_.transform_backward(ctx_, S.bert, xv, dx, N);
  }
  if (bert_.has_binary) bert_.binary_backward(ctx_, S.bert, xv, dx, S.s.B, S.s.T);
}

// model/bert-classifier: the final norm, then the pooler and the classifier on each
// sequence's [CLS]: loss term "cls" (the sum over the B sequences, weight T: their mean
// under the host's scale of 1 / (B T), as Megatron's classification loss) and "accuracy"
// (sequences whose most likely class is their label, weight 0).
void DecoderModel::classify_forward(Slot& S, const loom_microbatch& mb, bool grad) {
  const int64_t B = S.s.B, T = S.s.T;
  const DLTensor* lab = loom_microbatch_find(&mb, LOOM_ARRAY_LABELS);
  loom::require(lab && lab->device.device_type == kDLCPU && lab->dtype.code == kDLInt &&
                    lab->dtype.bits == 32 && lab->ndim == 1 && lab->shape[0] == B,
                who_ + ": the micro-batch needs labels, int32 (B) on the host");
  const int32_t* labels = static_cast<const int32_t*>(lab->data);
  for (int64_t b = 0; b < B; ++b)
    loom::require(labels[b] >= 0 && labels[b] < opt_.num_classes,
                  who_ + ": labels[" + s(b) + "] = " + s(labels[b]) + ", outside [0, " +
                      s(opt_.num_classes) + ")");
  View lv = view(S.bert.labels, {B});
  loom::check(ctx_.host, ctx_.be.api()->from_host(ctx_.be.self(), lv.get(), labels,
                                                  (size_t)B * sizeof(int32_t)));
  View xv = view(final_norm(S), {S.n, opt_.n_embd});
  double correct = 0;
  const double sum = bert_.binary_forward(ctx_, S.bert, xv, B, T, grad, S.loss_scale * (double)T,
                                          labels, &correct);
  losses_[0] = loom_loss{LOOM_LOSS_SIZE_V2, kClassifierLossNames[0], sum, (double)B, (double)T};
  losses_[1] = loom_loss{LOOM_LOSS_SIZE_V2, kClassifierLossNames[1], correct, (double)B, 0.0};
}

// BERT's padding: each row's real tokens (padding_mask 1s, then 0s) are one sequence of the
// bidirectional attention, at the start of its row; the padding rows take no part.
void DecoderModel::read_padding(Slot& S, const loom_microbatch& mb) {
  const int64_t B = mb.batch, T = mb.seq_len;
  const std::vector<int32_t> len =
      loom::padding_lengths(loom::batch_ids(mb, LOOM_ARRAY_PADDING_MASK, who_), B, T, who_);
  S.cu_docs.assign(1, 0);
  S.doc_at.clear();
  S.doc_pos.resize((size_t)(B * T));  // learned positions count from each row's start
  for (int64_t i = 0; i < B * T; ++i) S.doc_pos[(size_t)i] = (int32_t)(i % T);
  for (int64_t b = 0; b < B; ++b) {
    S.doc_at.push_back((int32_t)(b * T));
    S.cu_docs.push_back(S.cu_docs.back() + len[(size_t)b]);
  }
  S.doc_at.push_back((int32_t)(B * T));
  S.docs = loom_attention_seqlens{};
  S.docs.base = {sizeof(loom_attention_seqlens), LOOM_EXT_ATTENTION_SEQLENS, LOOM_EXT_REQUIRED,
                 nullptr};
  S.docs.num_seqs = B;
  S.docs.cu_seqlens_q = S.docs.cu_seqlens_k = S.cu_docs.data();
  S.docs.cu_seqlens_q_padded = S.docs.cu_seqlens_k_padded = S.doc_at.data();
  S.s.docs = &S.docs;
}

// BERT's sentence-order loss over the micro-batch's B sequences (with the binary head).
double DecoderModel::bert_losses(Slot& S, const loom_microbatch& mb, bool grad, double* sop) {
  const int64_t B = S.s.B, T = S.s.T;
  const DLTensor* lab = loom_microbatch_find(&mb, LOOM_ARRAY_SOP_LABELS);
  loom::require(lab && lab->device.device_type == kDLCPU && lab->dtype.code == kDLInt &&
                    lab->dtype.bits == 32 && lab->ndim == 1 && lab->shape[0] == B,
                who_ + ": the micro-batch needs sop_labels, int32 (B) on the host");
  const int32_t* labels = static_cast<const int32_t*>(lab->data);
  for (int64_t b = 0; b < B; ++b)
    loom::require(labels[b] == 0 || labels[b] == 1,
                  who_ + ": sop_labels[" + s(b) + "] = " + s(labels[b]) + ", expected 0 or 1");
  View lv = view(S.bert.labels, {B});
  loom::check(ctx_.host, ctx_.be.api()->from_host(ctx_.be.self(), lv.get(), labels,
                                                  (size_t)B * sizeof(int32_t)));
  const DLTensor* x = ctx_.tp.sequence_parallel ? S.lnf_full.get() : S.lnf.get();
  View xv = view(x, {S.n, opt_.n_embd});
  // weight T: under the host's loss scale of 1/(B*T) per micro-batch this is the mean over
  // sequences, as Megatron's sop loss
  *sop = bert_.binary_forward(ctx_, S.bert, xv, B, T, grad, S.loss_scale * (double)T);
  return (double)T;
}

// BERT's post-LN: the embeddings' sum (this rank's rows) is normalised in place by emb_ln,
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

}  // namespace loom::layers
