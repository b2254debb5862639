// Loom layer library, BERT's family hooks around DecoderModel (decoder/family.hpp; model/bert
// and model/bert-classifier): the padding mask as the attention's sequences, the LM head's
// transform and bias, the pooler with the sentence-order or classifier head, their loss terms
// and their backward into the final norm's output. The heads themselves are head.cpp's.
#include <algorithm>
#include <string>

#include "loom/cpp/layers/bert/bert.hpp"
#include "loom/cpp/model_step.hpp"

namespace loom::layers {
namespace {

std::string s(int64_t v) { return std::to_string(v); }

BertActs& acts(Slot& S) { return static_cast<BertActs&>(*S.family); }

// The micro-batch's per-sequence labels `name`, int32 (B) on the host, each checked by `ok`
// (which names the rule), then copied into a.labels for the head.
template <class Ok>
const int32_t* upload_labels(const Ctx& c, BertActs& a, const loom_microbatch& mb, const char* name,
                             int64_t B, const std::string& who, Ok ok) {
  const DLTensor* lab = loom_microbatch_find(&mb, name);
  loom::require(lab && lab->device.device_type == kDLCPU && lab->dtype.code == kDLInt &&
                    lab->dtype.bits == 32 && lab->ndim == 1 && lab->shape[0] == B,
                who + ": the micro-batch needs " + name + ", int32 (B) on the host");
  const int32_t* labels = static_cast<const int32_t*>(lab->data);
  for (int64_t b = 0; b < B; ++b) {
    const char* rule = ok(labels[b]);
    loom::require(rule == nullptr,
                  who + ": " + name + "[" + s(b) + "] = " + s(labels[b]) + (rule ? rule : ""));
  }
  View lv = view(a.labels, {B});
  loom::check(c.host,
              c.be.api()->from_host(c.be.self(), lv.get(), labels, (size_t)B * sizeof(int32_t)));
  return labels;
}

// The final norm's output, all N rows (gathered under sequence parallelism).
View final_rows(const Ctx& c, Slot& S, int64_t C) {
  return view(c.tp.sequence_parallel ? S.lnf_full.get() : S.lnf.get(), {S.n, C});
}

class BertFamily final : public FamilyHooks {
 public:
  explicit BertFamily(bool classifier) : classifier_(classifier) {}

  bool lm_head() const override { return !classifier_; }

  void declare(const Options& o, ParamStore& ps, double std, int64_t vrows) const override {
    const int64_t C = o.n_embd;
    if (!classifier_) {
      ps.add("lm_head.dense.weight", {C, C}, 1, -1, Init::kNormal, std);
      ps.add("lm_head.dense.bias", {C}, 0, -1, Init::kZeros);
      ps.add("lm_head.norm.weight", {C}, 0, -1, Init::kOnes);
      ps.add("lm_head.norm.bias", {C}, 0, -1, Init::kZeros);
      ps.add("lm_head.bias", {vrows}, 0, 0, Init::kZeros);
    }
    if (classifier_ || o.binary_head) {
      ps.add("pooler.dense.weight", {C, C}, 1, -1, Init::kNormal, std);
      ps.add("pooler.dense.bias", {C}, 0, -1, Init::kZeros);
      const std::string head = classifier_ ? "classifier" : "binary_head";
      ps.add(head + ".weight", {classifier_ ? o.num_classes : 2, C}, 1, -1, Init::kNormal, std);
      ps.add(head + ".bias", {classifier_ ? o.num_classes : 2}, 0, -1, Init::kZeros);
    }
  }

  void make(const Options& o, ParamStore& ps, int64_t real_vocab) override {
    head_ = BertHead::make(o, ps, real_vocab);
  }

  void reads(const Options& o, std::vector<const char*>& out) const override {
    if (o.last()) out.push_back(classifier_ ? LOOM_ARRAY_LABELS : LOOM_ARRAY_TARGETS);
    if (o.first() && o.num_tokentypes > 0) out.push_back(LOOM_ARRAY_TOKEN_TYPES);
    if (o.last() && o.binary_head) out.push_back(LOOM_ARRAY_SOP_LABELS);
    out.push_back(LOOM_ARRAY_PADDING_MASK);
  }

  size_t loss_names(const Options& o, const char* const** names) const override {
    *names = classifier_ ? kClassifierLossNames : kBertLossNames;
    return classifier_ || o.binary_head ? 2 : 1;
  }

  std::unique_ptr<FamilyActs> make_acts(const Ctx& c, const Options& o, int64_t N,
                                        int64_t B) const override {
    auto a = std::make_unique<BertActs>();
    a->ensure(c, N, B, o.n_embd, classifier_ ? o.num_classes : 2, !classifier_);
    return a;
  }

  // Each row's real tokens (padding_mask 1s, then 0s) are one sequence of the bidirectional
  // attention, at the start of its row; the padding rows take no part.
  void sequences(Slot& S, const loom_microbatch& mb, const std::string& who) const override {
    const int64_t B = mb.batch, T = mb.seq_len;
    const std::vector<int32_t> len =
        loom::padding_lengths(loom::batch_ids(mb, LOOM_ARRAY_PADDING_MASK, who), B, T, who);
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

  // model/bert-classifier: the pooler and the classifier on each sequence's [CLS]: loss term
  // "cls" (the sum over the B sequences, weight T: their mean under the host's scale of
  // 1 / (B T), as Megatron's classification loss) and "accuracy" (sequences whose most likely
  // class is their label, weight 0).
  size_t classify(const Ctx& c, Slot& S, const loom_microbatch& mb, const DLTensor* x, bool grad,
                  loom_loss* out, const std::string& who) const override {
    const int64_t B = S.s.B, T = S.s.T, K = head_.classes;
    const std::string range = ", outside [0, " + s(K) + ")";
    const int32_t* labels =
        upload_labels(c, acts(S), mb, LOOM_ARRAY_LABELS, B, who,
                      [&](int32_t v) { return v >= 0 && v < K ? nullptr : range.c_str(); });
    View xv = view(x, {S.n, head_.C});
    double correct = 0;
    const double sum = head_.binary_forward(c, acts(S), xv, B, T, grad, S.loss_scale * (double)T,
                                            labels, &correct);
    out[0] = loom_loss{LOOM_LOSS_SIZE_V2, kClassifierLossNames[0], sum, (double)B, (double)T};
    out[1] = loom_loss{LOOM_LOSS_SIZE_V2, kClassifierLossNames[1], correct, (double)B, 0.0};
    return 2;
  }

  // Padding takes no part: its targets must be -1. The masked LM is the mean over the
  // micro-batch's predicted tokens, as Megatron's (sum / loss_mask.sum()): under the host's
  // scale of 1 / (B T) that is weight B T / count.
  double lm_weight(const Slot& S, const int32_t* targets, double count,
                   const std::string& who) const override {
    for (int64_t i = 0; i < S.n; ++i)
      loom::require(targets[i] == -1 || S.cu_docs[i / S.s.T + 1] - S.cu_docs[i / S.s.T] > i % S.s.T,
                    who + ": targets[" + s(i / S.s.T) + "][" + s(i % S.s.T) +
                        "] is set on a padding position");
    return (double)S.n / std::max(count, 1.0);
  }

  // The LM head's transform of x: what the output layer multiplies.
  const DLTensor* head_input(const Ctx& c, Slot& S, const DLTensor* x) const override {
    BertActs& a = acts(S);
    head_.transform_forward(c, a, x, S.n);
    a.n_rows = view(a.n, {S.n, head_.C});
    return a.n_rows.get();
  }

  void logits_done(const Ctx& c, DLTensor* logits) const override {
    loom::bias_add(c.be, logits, head_.bias);
  }

  // The sentence-order loss over the micro-batch's B sequences (with the binary head), weight
  // T: under the host's loss scale of 1/(B*T) per micro-batch this is the mean over
  // sequences, as Megatron's sop loss.
  size_t more_losses(const Ctx& c, Slot& S, const loom_microbatch& mb, bool grad, loom_loss* out,
                     size_t at, const std::string& who) const override {
    if (!head_.has_binary) return at;
    const int64_t B = S.s.B, T = S.s.T;
    upload_labels(c, acts(S), mb, LOOM_ARRAY_SOP_LABELS, B, who,
                  [](int32_t v) { return v == 0 || v == 1 ? nullptr : ", expected 0 or 1"; });
    const double sop = head_.binary_forward(c, acts(S), final_rows(c, S, head_.C), B, T, grad,
                                            S.loss_scale * (double)T);
    out[at] = loom_loss{LOOM_LOSS_SIZE_V2, kBertLossNames[1], sop, (double)B, (double)T};
    return at + 1;
  }

  // d(transform output) from the output layer, summed over the vocabulary shards so that the
  // replicated transform sees its whole gradient, then through the transform and the pooler
  // into dx(N,C), complete on every rank. The classifier has the pooler's part only.
  void head_backward(const Ctx& c, const LmHead& lm, Slot& S, DLTensor* dx) const override {
    const int64_t N = S.n, C = head_.C, V = lm.vocab;
    BertActs& a = acts(S);
    View xv = final_rows(c, S, C);
    if (classifier_) {
      c.call(&loom_ops::fill, dx, 0.0);
    } else {
      View logits = view(S.logits, {N, V}), dn = view(a.dn, {N, C}), bn = view(a.n, {N, C});
      if (V > 0) {
        lm.backward(c, dn, logits, lm.cols, bn, N);
        View dbias = head_.dbias;  // the hooks are const; the gradient is the parameter's
        loom::bias_backward(c.be, dbias.get(), logits);
      } else {
        c.call(&loom_ops::fill, dn.get(), 0.0);
      }
      if (c.tp.active()) c.tp.all_reduce(dn.get());
      head_.transform_backward(c, a, xv, dx, N);
    }
    if (head_.has_binary) head_.binary_backward(c, a, xv, dx, S.s.B, S.s.T);
  }

 private:
  bool classifier_;
  BertHead head_;
};

}  // namespace

std::unique_ptr<FamilyHooks> bert_family(bool classifier) {
  return std::make_unique<BertFamily>(classifier);
}

}  // namespace loom::layers
