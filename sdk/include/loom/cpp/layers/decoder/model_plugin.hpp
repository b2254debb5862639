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

#include <memory>
#include <string>

#include "loom/cpp/layers/decoder/decoder.hpp"

namespace loom::layers {

// The C slots of a model class M (DecoderModel, T5Model): each forwards to M's method of the
// same name, every exception caught by loom::guard and returned as a loom_error.
template <class M>
struct ModelSlots {
  static M* self(loom_model* m) { return reinterpret_cast<M*>(m); }
  template <class F>
  static loom_error* call(loom_model* m, F&& f) {
    return loom::guard(self(m)->host(), [&] { f(*self(m)); });
  }
  static void destroy(loom_model* m) { delete self(m); }
  static size_t num_params(loom_model* m) { return self(m)->num_params(); }
  static loom_error* get_param(loom_model* m, size_t i, loom_model_param* out) {
    return call(m, [&](M& x) { x.get_param(i, out); });
  }
  static loom_error* init_params(loom_model* m, uint64_t seed) {
    return call(m, [&](M& x) { x.init_params(seed); });
  }
  static loom_error* zero_grad(loom_model* m) {
    return call(m, [](M& x) { x.zero_grad(); });
  }
  static double flops_per_token(loom_model* m) { return self(m)->flops_per_token(); }
  static loom_error* stage_info(loom_model* m, loom_stage_info* out) {
    return call(m, [&](M& x) { x.stage_info(out); });
  }
  static loom_error* stage_forward(loom_model* m, loom_stage_forward_args* args) {
    return call(m, [&](M& x) {
      loom::require(args != nullptr, "stage_forward args are NULL");
      x.stage_forward(*args);
    });
  }
  // loom.split-backward/1's W (a model class that has weight_backward)
  static loom_error* weight_backward(loom_model* m, loom_stage_weight_args* args) {
    return call(m, [&](M& x) {
      loom::require(args != nullptr, "weight_backward args are NULL");
      x.weight_backward(*args);
    });
  }
  static loom_error* stage_backward(loom_model* m, loom_stage_backward_args* args) {
    return call(m, [&](M& x) {
      loom::require(args != nullptr, "stage_backward args are NULL");
      x.stage_backward(*args);
    });
  }
  static loom_error* finish_grads(loom_model* m) {
    return call(m, [](M& x) { x.finish_grads(); });
  }
  // loom.decode/1 and loom.decode-slots/1
  static loom_error* kv_reset(loom_model* m, int64_t batch, int64_t max_len) {
    return call(m, [&](M& x) { x.kv_reset(batch, max_len); });
  }
  static loom_error* decode(loom_model* m, const int32_t* tokens, int64_t n, float* logits) {
    return call(m, [&](M& x) { x.decode(tokens, n, logits); });
  }
  static int64_t max_context(loom_model* m) { return self(m)->max_context(); }
  static loom_error* kv_clear(loom_model* m, int64_t slot) {
    return call(m, [&](M& x) { x.kv_clear(slot); });
  }
  static loom_error* decode_slots(loom_model* m, const int64_t* slots, int64_t num,
                                  const int32_t* tokens, int64_t n, float* logits) {
    return call(m, [&](M& x) { x.decode_slots(slots, num, tokens, n, logits); });
  }

  // The table with the plugin's own create, batch_spec and attention_requires.
  static loom_model_api api(decltype(loom_model_api::create) create,
                            decltype(loom_model_api::batch_spec) batch_spec,
                            decltype(loom_model_api::attention_requires) attention_requires) {
    return loom_model_api{LOOM_MODEL_API_SIZE_V2,
                          create,
                          destroy,
                          num_params,
                          get_param,
                          init_params,
                          zero_grad,
                          flops_per_token,
                          batch_spec,
                          attention_requires,
                          stage_info,
                          stage_forward,
                          stage_backward,
                          finish_grads,
                          nullptr};  // hold_params: a model with a residency sets it
  }
};

// loom_plugin_descriptor.check_config (ABI 2.15) for a model of `family`: create's checks of
// the options, the layout and the create args (loom_model_create_args), without an instance.
loom_error* check_model_config(const loom_host* host, const loom_config* cfg,
                               const loom_parallel_layout* layout, const void* create_args,
                               const std::string& who, Family family = Family::kGpt);

// A DecoderModel of `spec`'s layers as *out, errors prefixed with `who`; `family` and
// `hooks`: a family's options and what it adds around the layers (BERT's: bert_family).
loom_error* create_decoder(const loom_host* host, const loom_config* cfg,
                           const loom_model_create_args* args, const BlockSpec& spec,
                           const std::string& who, loom_model** out, Family family = Family::kGpt,
                           std::unique_ptr<FamilyHooks> hooks = nullptr);

using CreateFn = loom_error* (*)(const loom_host*, const loom_config*,
                                 const loom_model_create_args*, loom_model**);
// Every slot of loom_model_api but `create`, which is the plugin's.
loom_model_api decoder_api(CreateFn create);

// loom.split-backward/1 over DecoderModel (the last of kDecoderDecode's chain; a family
// without generation, BERT's, chains it alone).
extern const loom_split_backward_ext kDecoderSplit;
// loom.decode/1 (chaining loom.decode-slots/1) over DecoderModel, and the capability list
// naming both.
extern const loom_decode_ext kDecoderDecode;
extern const char* const kDecoderCapabilities[];

}  // namespace loom::layers
