// Loom layer library (loom/cpp/layers/decoder/decoder.hpp has the overview): BERT's heads on the
// last stage, as Megatron's BertModel has them, and the family hooks that put them around
// DecoderModel's layers (model/bert, model/bert-classifier).
#pragma once

#include <memory>

#include "loom/cpp/layers/decoder/decoder.hpp"
#include "loom/cpp/layers/ops/linear.hpp"
#include "loom/cpp/layers/ops/norm.hpp"

namespace loom::layers {

// BERT's batch (model/bert): tokens, token types and the padding mask on the first stage...
// the padding mask on every stage, the masked tokens' targets on the last, and with the
// binary head its sentence-order labels (B) and loss term "sop".
#define LOOM_ARRAY_SOP_LABELS "sop_labels" /* int32 (B): 1 = the segments were swapped */
inline constexpr int64_t kSampleShape[1] = {LOOM_DIM_BATCH};
inline constexpr loom_array_spec kBertBatchSpec[5] = {
    {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TOKENS, {kDLInt, 32, 1}, 2, kBatchShape},
    {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TARGETS, {kDLInt, 32, 1}, 2, kBatchShape},
    {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_PADDING_MASK, {kDLInt, 32, 1}, 2, kBatchShape},
    {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TOKEN_TYPES, {kDLInt, 32, 1}, 2, kBatchShape},
    {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_SOP_LABELS, {kDLInt, 32, 1}, 1, kSampleShape}};
inline constexpr const char* kBertLossNames[2] = {"lm", "sop"};
// model/bert-classifier's: tokens, padding mask, token types and each sequence's class label;
// the loss term "cls" and "accuracy", the share of sequences whose most likely class is the
// label (weight 0: reported, not trained on).
#define LOOM_ARRAY_LABELS "labels" /* int32 (B): a sequence's class */
inline constexpr loom_array_spec kClassifierBatchSpec[4] = {
    {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TOKENS, {kDLInt, 32, 1}, 2, kBatchShape},
    {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_PADDING_MASK, {kDLInt, 32, 1}, 2, kBatchShape},
    {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TOKEN_TYPES, {kDLInt, 32, 1}, 2, kBatchShape},
    {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_LABELS, {kDLInt, 32, 1}, 1, kSampleShape}};
inline constexpr const char* kClassifierLossNames[2] = {"cls", "accuracy"};

// What one micro-batch's BERT heads save for their backward (N tokens, B sequences).
struct BertActs : FamilyActs {
  Tensor h, g, n, n_mean, n_rstd;   // (N,C) dense out, activation out, norm out; (N) stats
  Tensor dn;                        // (N,C) the gradient through the transform
  Tensor pre, pooled, dpooled;      // (B,C) pooler dense out, tanh out, its gradient
  Tensor blogits, blosses, labels;  // (B,K), (B) losses, i32 (B) labels of K classes
  View n_rows;                      // n's (N,C) rows, the LM head's input
  // `lm`: the LM head's transform buffers too (model/bert, not the classifier).
  void ensure(const Ctx& c, int64_t N, int64_t B, int64_t C, int64_t K, bool lm);
};

// bert/head.cpp. Every tensor-parallel rank runs both heads on all N rows of x, the final
// norm's output (gathered first under sequence parallelism): their parameters are
// replicated and get the same complete gradient on every rank, so nothing is reduced for
// them. The LM head's output layer is the tied embedding's vocabulary shard, plus its own
// bias shard (lm_head.bias, split like wte).
//   LM head:  n = LayerNorm(act(x Wd^T + bd)); logits = n wte^T + bias
//   pooler:   pooled = tanh(x[CLS] Wp^T + bp), x[CLS] the first token of each sequence
//   binary:   sop logits = pooled Wb^T + bb (B, 2), or with model/bert-classifier the
//             classifier's logits (B, num_classes) in place of the binary head (and no LM head)
struct BertHead {
  Linear dense, pooler, binary;
  Norm norm;
  loom_act_kind act = LOOM_ACT_GELU;
  View bias, dbias;  // lm_head.bias over this rank's real vocabulary rows
  bool has_binary = false;
  int64_t C = 0, classes = 2;

  static BertHead make(const Options& o, ParamStore& ps, int64_t real_vocab);
  // a.n = the transform of x(N,C), which the output layer multiplies.
  void transform_forward(const Ctx& c, BertActs& a, const DLTensor* x, int64_t N) const;
  // dx(N,C) (=) from d(n) in a.dn, complete on every rank; a.dn and dx serve as scratch.
  void transform_backward(const Ctx& c, BertActs& a, const DLTensor* x, DLTensor* dx,
                          int64_t N) const;
  // The sum of the B sequences' losses (sentence order, or the classifier's); with `grad`,
  // a.blogits becomes their gradient at dloss. x rows T apart are the [CLS] tokens. With
  // `correct`, the count of sequences whose most likely class is their label.
  double binary_forward(const Ctx& c, BertActs& a, const DLTensor* x, int64_t B, int64_t T,
                        bool grad, double dloss, const int32_t* labels = nullptr,
                        double* correct = nullptr) const;
  // dx rows T apart += the pooler's input gradient.
  void binary_backward(const Ctx& c, BertActs& a, const DLTensor* x, DLTensor* dx, int64_t B,
                       int64_t T) const;
};

// BERT's hooks around DecoderModel (family.cpp), or with `classifier` model/bert-classifier's
// (the pooler and a classifier in place of the LM head).
std::unique_ptr<FamilyHooks> bert_family(bool classifier);

}  // namespace loom::layers
