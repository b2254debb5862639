// Loom layer library, multi-token prediction (Megatron-Core's MultiTokenPredictionBlock,
// DeepSeek-V3's MTP modules; model/gpt's mtp_num_layers): on the last stage, after the
// main head, depth k = 1..D predicts the token k + 1 ahead of each position:
//   en = enorm(wte[t_{i+k}]),  hn = hnorm(h_{k-1}[i])     h_0: the last layer's output
//   x  = eh_proj([en | hn])                                (C, 2C), Megatron's order
//   h_k = layer_k(x)                                       a layer of the last layer's kind
//   loss_k[i] = CE(head(final_norm_k(h_k))[i], t_{i+k+1})
// The embedding and the head are the model's (a pipeline's last stage holds a copy of wte,
// kept equal over the embedding group as the tied head's is). A row's tokens k ahead come
// from the targets (t_{i+k} = targets[i+k-1]); past the row's end (a packed document's) the
// target is -1 (no loss), as Megatron rolls the labels and masks the last k positions. The term
// "mtp" sums the depths' token losses, weighted mtp_loss_scaling_factor / D.
#include <algorithm>
#include <string>

#include "loom/cpp/layers/decoder/decoder.hpp"

namespace loom::layers {

namespace {
std::string depth_prefix(int64_t k) { return "mtp." + std::to_string(k); }
}  // namespace

void DecoderModel::mtp_declare(ParamDeclarer& d) {
  const Options& o = opt_;
  const int64_t C = o.n_embd;
  ParamStore& ps = params_;
  // a pipeline's last stage without the tied head's copy gets one of wte for the tokens ahead
  if (!o.first() && !o.tie_embeddings)
    ps.add("wte", {o.padded_vocab / o.tp, C}, 1, 0, Init::kNormal, d.std).pipeline_duplicate = 1;
  for (int64_t k = 0; k < o.mtp_layers; ++k) {
    const std::string p = depth_prefix(k);
    d.norm(p + ".enorm");
    d.norm(p + ".hnorm");
    ps.add(p + ".eh_proj.weight", {C, 2 * C}, 1, -1, Init::kNormal, d.std);
    layer_spec(o.n_layer - 1).declare(d, p + ".layer");
    d.norm(p + ".final_norm");
  }
}

void DecoderModel::mtp_make() {
  const Options& o = opt_;
  ParamStore& ps = params_;
  mtp_emb_ = Embedding::make(o, ps, ctx_);
  mtp_.resize((size_t)o.mtp_layers);
  for (int64_t k = 0; k < o.mtp_layers; ++k) {
    const std::string p = depth_prefix(k);
    MtpDepth& m = mtp_[(size_t)k];
    m.enorm = Norm::make(o, ps, p + ".enorm");
    m.hnorm = Norm::make(o, ps, p + ".hnorm");
    m.eh = make_linear(ps.at(p + ".eh_proj.weight"), nullptr, 0, o.n_embd);
    m.layer = layer_spec(o.n_layer - 1).make(o, ps, p + ".layer");
    m.final_norm = Norm::make(o, ps, p + ".final_norm");
  }
}

void DecoderModel::mtp_alloc(Slot& S, int64_t N) {
  const int64_t C = opt_.n_embd;
  const DLDataType st = ctx_.stat_dtype();
  S.mtp.resize((size_t)opt_.mtp_layers);
  for (MtpSlot& m : S.mtp) {
    m.ids = ctx_.alloc(loom_i32(), {N});
    m.labels = ctx_.alloc(loom_i32(), {N});
    if (ctx_.tp.active()) {
      m.emb_ids = ctx_.alloc(loom_i32(), {N});
      m.emb_rows = ctx_.alloc(loom_i32(), {N});
    }
    for (Tensor* t : {&m.emb, &m.en, &m.hn, &m.x, &m.out, &m.lnf}) *t = ctx_.alloc({N, C});
    m.cat = ctx_.alloc({N, 2 * C});
    for (Tensor* t : {&m.en_rstd, &m.hn_rstd, &m.lnf_rstd}) *t = ctx_.alloc(st, {N});
    if (opt_.norm_mean())
      for (Tensor* t : {&m.en_mean, &m.hn_mean, &m.lnf_mean}) *t = ctx_.alloc(st, {N});
    m.acts.ensure(ctx_, opt_, N);
    if (head_.vocab > 0) m.logits = ctx_.alloc({N, head_.cols});
    m.losses = ctx_.alloc(st, {N});
    m.lse = ctx_.alloc(st, {N});
    m.stats = ctx_.alloc(st, {N, 3});
    m.gathered = ctx_.alloc(st, {(int64_t)ctx_.tp.size * N, 3});
  }
  if (!mtp_carry_) {
    mtp_carry_ = ctx_.alloc({N, C});
    mtp_dcat_ = ctx_.alloc({N, 2 * C});
    mtp_den_ = ctx_.alloc({N, C});
    mtp_demb_ = ctx_.alloc({N, C});
  }
  if (ctx_.tp.active() && !sp_.picked) sp_.picked = ctx_.alloc({N, C});
}

// Depth k's hidden input: the last layer's output (k = 0), else the depth before's.
const DLTensor* DecoderModel::mtp_input(const Slot& S, int64_t k) const {
  return k == 0 ? S.res[layers_.size()].get() : S.mtp[(size_t)k - 1].out.get();
}

// Every depth's forward; returns the sum of their token losses, `count` their targets.
double DecoderModel::mtp_forward(Slot& S, const int32_t* targets, bool grad, double& count) {
  const int64_t N = S.n, B = S.s.B, T = S.s.T, C = opt_.n_embd;
  // Where each position's sequence ends: its row's end, or with packed documents its
  // document's, so that no depth reads or predicts a token of the next document (Megatron
  // rolls the labels within each packed sequence and masks the last positions of each).
  std::vector<int64_t> end((size_t)N);
  for (int64_t at = 0; at < N; ++at) end[(size_t)at] = (at / T + 1) * T;
  if (S.s.docs)
    for (size_t d = 0; d + 1 < S.cu_docs.size(); ++d)
      for (int64_t at = S.cu_docs[d]; at < S.cu_docs[d + 1]; ++at)
        end[(size_t)at] = S.cu_docs[d + 1];
  const loom::tp::Group& g = ctx_.tp;
  const double dscale = S.loss_scale * opt_.mtp_scale / (double)opt_.mtp_layers;
  std::vector<int32_t> ids((size_t)N), labels((size_t)N);
  double sum = 0;
  count = 0;
  for (int64_t k = 0; k < opt_.mtp_layers; ++k) {
    MtpDepth& d = mtp_[(size_t)k];
    MtpSlot& m = S.mtp[(size_t)k];
    // depth k+1: position i reads the token k+1 ahead, targets[i+k], and predicts the one
    // after it, targets[i+k+1], within its sequence; a -1 target (ignored) stays -1, its
    // token id 0
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < T; ++i) {
        const int64_t at = b * T + i, e = end[(size_t)at];
        const int64_t ahead = at + k < e ? targets[at + k] : -1;
        const int64_t next = at + k + 1 < e ? targets[at + k + 1] : -1;
        ids[(size_t)at] = (int32_t)std::max<int64_t>(ahead, 0);
        labels[(size_t)at] = (int32_t)(ahead < 0 ? -1 : next);
        count += labels[(size_t)at] != -1;
      }
    upload_ids(m.ids, nullptr, ids.data(), N, false);
    upload_ids(m.labels, nullptr, labels.data(), N, true);
    View tok = view(m.ids, {N}), emb = view(m.emb, {N, C});
    if (!g.active()) {
      mtp_emb_.forward(ctx_, emb, tok, nullptr);
    } else {
      m.emb_count = mtp_emb_.vp.stage(ctx_.be, ids.data(), N, m.emb_ids, m.emb_rows);
      mtp_emb_.vp.forward(ctx_.be, g, mtp_emb_.wte, m.emb_ids, m.emb_rows, m.emb_count, sp_.picked,
                          nullptr, emb);
    }
    View en = view(m.en, {N, C}), hn = view(m.hn, {N, C}), cat = view(m.cat, {N, 2 * C});
    d.enorm.forward(ctx_, en, view(m.en_mean, {N}), view(m.en_rstd, {N}), emb);
    const DLTensor* prev = mtp_input(S, k);
    d.hnorm.forward(ctx_, hn, view(m.hn_mean, {N}), view(m.hn_rstd, {N}), view(prev, {N, C}));
    loom::copy_strided(ctx_.be, cat, 2 * C, 0, en, C, 0, N, C);
    loom::copy_strided(ctx_.be, cat, 2 * C, C, hn, C, 0, N, C);
    View x = view(m.x, {N, C}), out = view(m.out, {N, C}), lnf = view(m.lnf, {N, C});
    d.eh.forward(ctx_.be, x, cat, N);
    d.layer->forward(ctx_, opt_, S.s, x, out, m.acts, nullptr, 0);
    d.final_norm.forward(ctx_, lnf, view(m.lnf_mean, {N}), view(m.lnf_rstd, {N}), out);
    if (head_.vocab > 0)
      head_.forward(ctx_, view(m.logits, {N, head_.cols}), head_.cols, lnf, N, C, 0);
    sum += lm_loss(LossBufs{m.logits, m.losses, m.stats, m.gathered, m.lse}, view(m.labels, {N}),
                   labels.data(), N, grad, dscale, nullptr, (int64_t)loss_names_.size() - 1);
  }
  return sum;
}

// mtp_carry_ = the depths' gradient of the last layer's output, from the deepest depth down:
// each depth's head and next depth's hnorm give d(h_k); its layer, eh_proj and norms give the
// embedding's gradient and d(h_{k-1}). Uses the layers' gradient scratch (grads_).
void DecoderModel::mtp_backward(Slot& S) {
  const int64_t N = S.n, C = opt_.n_embd;
  View carry = view(mtp_carry_, {N, C}), dres = view(grads_.dres, {N, C});
  View dln = view(grads_.dln, {N, C}), dcat = view(mtp_dcat_, {N, 2 * C});
  View den = view(mtp_den_, {N, C}), demb = view(mtp_demb_, {N, C});
  ctx_.call(&loom_ops::fill, carry.get(), 0.0);
  for (int64_t k = opt_.mtp_layers - 1; k >= 0; --k) {
    MtpDepth& d = mtp_[(size_t)k];
    MtpSlot& m = S.mtp[(size_t)k];
    View lnf = view(m.lnf, {N, C}), out = view(m.out, {N, C});
    // d(h_k): the head through final_norm, plus what depth k+1's hnorm sent down
    head_input_grad(view(m.logits, {N, head_.cols}), lnf, dln, dln, N);  // no SP here
    d.final_norm.backward(ctx_, dres, dln, out, view(m.lnf_mean, {N}), view(m.lnf_rstd, {N}));
    ctx_.call(&loom_ops::add, dres.get(), (const DLTensor*)dres, (const DLTensor*)carry);
    d.layer->backward(ctx_, opt_, S.s, view(m.x, {N, C}), m.acts, grads_);  // dres: d(x)
    d.eh.backward(ctx_.be, dcat, false, dres, view(m.cat, {N, 2 * C}), N);
    loom::copy_strided(ctx_.be, den, C, 0, dcat, 2 * C, 0, N, C);
    loom::copy_strided(ctx_.be, dln, C, 0, dcat, 2 * C, C, N, C);  // d(hn)
    d.enorm.backward(ctx_, demb, den, view(m.emb, {N, C}), view(m.en_mean, {N}),
                     view(m.en_rstd, {N}));
    const DLTensor* prev = mtp_input(S, k);
    d.hnorm.backward(ctx_, carry, dln, view(prev, {N, C}), view(m.hn_mean, {N}),
                     view(m.hn_rstd, {N}));
    // the embedding's rows: parameter gradients only (a split backward's W runs them)
    weight_grad_reading(
        ctx_.be,
        [this, &m, N](const Backend&, const DLTensor* dy) {
          View tok = view(m.ids, {N});
          if (!ctx_.tp.active()) return mtp_emb_.backward(ctx_, dy, tok, nullptr);
          mtp_emb_.vp.backward(ctx_.be, ctx_.tp, mtp_emb_.dwte, m.emb_ids, m.emb_rows, m.emb_count,
                               sp_.picked, dy, nullptr);
        },
        (const DLTensor*)demb);
  }
}

}  // namespace loom::layers
