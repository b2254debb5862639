// Loom layer library: the C table of a model plugin built on DecoderModel. A plugin supplies
// its block spec and name through `create`, and gets every other slot, the named batch and
// loom.decode/1 from here:
//
//   loom_error* create(const loom_host* h, const loom_config* c,
//                      const loom_model_create_args* a, loom_model** out) {
//     return loom::layers::create_decoder(h, c, a, my_block_spec, "model/mine", out);
//   }
//   const loom_model_api kApi = loom::layers::decoder_api(create);
//   ... descriptor: kTransformerSchema, &kApi, kDecoderCapabilities, &kDecoderDecode.base
#pragma once

#include <string>

#include "loom/cpp/layers/decoder.hpp"

namespace loom::layers {

// A DecoderModel of `spec`'s layers as *out, errors prefixed with `who`; `bert`: BERT's
// embedding, padding mask and heads (model/bert).
loom_error* create_decoder(const loom_host* host, const loom_config* cfg,
                           const loom_model_create_args* args, const BlockSpec& spec,
                           const std::string& who, loom_model** out, Family family = Family::kGpt);

using CreateFn = loom_error* (*)(const loom_host*, const loom_config*,
                                 const loom_model_create_args*, loom_model**);
// Every slot of loom_model_api but `create`, which is the plugin's.
loom_model_api decoder_api(CreateFn create);
// The same with BERT's named batch (kBertBatchSpec) and attention needs.
loom_model_api bert_api(CreateFn create);
// model/bert-classifier's: kClassifierBatchSpec, the same attention needs.
loom_model_api bert_classifier_api(CreateFn create);

// loom.decode/1 (chaining loom.decode-slots/1) over DecoderModel, and the capability list
// naming both.
extern const loom_decode_ext kDecoderDecode;
extern const char* const kDecoderCapabilities[];

}  // namespace loom::layers
