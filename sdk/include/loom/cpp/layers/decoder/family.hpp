// Loom layer library (loom/cpp/layers/decoder/decoder.hpp has the overview): what a model
// family adds around DecoderModel's layers, the way Megatron's model classes (GPTModel,
// BertModel) wrap one TransformerBlock. DecoderModel calls a family's hooks at fixed points of
// a stage; GPT has none (its own LM head and next-token loss are the decoder's). BERT's and
// the classifier's are bert/family.cpp's: the padding mask as the attention's sequences, the
// LM head's transform and bias, the pooler with the sentence-order or classifier head.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/cpp/layers/core/params.hpp"
#include "loom/cpp/layers/ops/head.hpp"
#include "loom/model.h"

namespace loom::layers {

struct Slot;

// What a family keeps per slot (its heads' activations), made with the slot.
struct FamilyActs {
  virtual ~FamilyActs() = default;
};

class FamilyHooks {
 public:
  virtual ~FamilyHooks() = default;
  // ----- set-up
  // The decoder's LM head over the vocabulary (the classifier has none), and whether its
  // logits' padding columns are masked by the head (false: the family adds its own bias
  // over the real vocabulary).
  virtual bool lm_head() const = 0;
  // The last stage's head parameters after the LM head's (checkpoint order): replicated,
  // every rank computes them whole. `vrows`: this rank's rows of the padded vocabulary.
  virtual void declare(const Options& o, ParamStore& ps, double std, int64_t vrows) const = 0;
  // Their modules over the current views (unit 0; made again whenever its memory moves).
  virtual void make(const Options& o, ParamStore& ps, int64_t real_vocab) = 0;
  // What a stage reads of the micro-batch after its tokens, and the loss terms it reports.
  virtual void reads(const Options& o, std::vector<const char*>& out) const = 0;
  virtual size_t loss_names(const Options& o, const char* const** names) const = 0;
  // A new slot's own buffers (last stage): N tokens, B sequences.
  virtual std::unique_ptr<FamilyActs> make_acts(const Ctx& c, const Options& o, int64_t N,
                                                int64_t B) const = 0;
  // ----- forward
  // The attention's sequences of one micro-batch (S.s.docs), in place of packed documents.
  virtual void sequences(Slot& S, const loom_microbatch& mb, const std::string& who) const = 0;
  // Without an LM head (lm_head() false): the last stage's loss terms from x (N,C), the final
  // norm's output, into `out`; returns their count.
  virtual size_t classify(const Ctx& c, Slot& S, const loom_microbatch& mb, const DLTensor* x,
                          bool grad, loom_loss* out, const std::string& who) const = 0;
  // The lm term's weight in the objective, checking the micro-batch's targets.
  virtual double lm_weight(const Slot& S, const int32_t* targets, double count,
                           const std::string& who) const = 0;
  // What the LM head multiplies: x (N,C) or the family's transform of it.
  virtual const DLTensor* head_input(const Ctx& c, Slot& S, const DLTensor* x) const = 0;
  // After the LM head's forward: logits (N, V) of this rank's vocabulary shard.
  virtual void logits_done(const Ctx& c, DLTensor* logits) const = 0;
  // Loss terms after the lm term (and before the MoE ones): written from out[at]; returns
  // the new count.
  virtual size_t more_losses(const Ctx& c, Slot& S, const loom_microbatch& mb, bool grad,
                             loom_loss* out, size_t at, const std::string& who) const = 0;
  // ----- backward
  // dx (N,C), complete on every rank: d(the final norm's output) from the dlogits in S.logits
  // (through head, the decoder's LM head) and the family's heads.
  virtual void head_backward(const Ctx& c, const LmHead& head, Slot& S, DLTensor* dx) const = 0;
};

}  // namespace loom::layers
