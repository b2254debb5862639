// Loom layer library: the C table of a BERT model plugin (model/bert, model/bert-classifier),
// DecoderModel with BERT's family hooks (bert.hpp):
//
//   return loom::layers::create_decoder(h, c, a, loom::layers::kPreNormBlock, "model/bert",
//                                       out, Family::kBert, loom::layers::bert_family(false));
//   const loom_model_api kApi = loom::layers::bert_api(create);
#pragma once

#include "loom/cpp/layers/bert/bert.hpp"
#include "loom/cpp/layers/decoder/model_plugin.hpp"

namespace loom::layers {

// decoder_api's slots with BERT's named batch (kBertBatchSpec) and attention needs.
loom_model_api bert_api(CreateFn create);
// model/bert-classifier's: kClassifierBatchSpec, the same attention needs.
loom_model_api bert_classifier_api(CreateFn create);
// Both list the split backward of the zero-bubble schedules (ext: &kDecoderSplit.base).
extern const char* const kBertCapabilities[];

}  // namespace loom::layers
