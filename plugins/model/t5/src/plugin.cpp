// model/t5: Megatron's T5, an encoder-decoder transformer with cross-attention, trained on
// dataset/t5's span corruption and generating with the encoder run once and the decoder over
// a KV cache. The model is loom/cpp/layers/t5/t5.hpp; this file is its C table.
#include <iterator>

#include "loom/cpp/layers/decoder/model_plugin.hpp"
#include "loom/cpp/layers/t5/t5.hpp"
#include "loom/cpp/tokenizer.hpp"

namespace {

using loom::layers::T5Model;
using Slots = loom::layers::ModelSlots<T5Model>;

// T5 keeps every activation: refused by check_config (`loom validate`, `loom parity`, before
// any data is read) and by create alike.
void refuse_recompute(const loom_model_create_args* a) {
  loom::require(a->struct_size < LOOM_MODEL_CREATE_ARGS_SIZE_V2_10 ||
                    a->recompute_granularity == LOOM_RECOMPUTE_NONE,
                "model/t5: train.recompute_granularity: activation recompute is not "
                "implemented for T5 (model/gpt and model/bert have it)");
}

loom_error* create(const loom_host* host, const loom_config* cfg, const loom_model_create_args* a,
                   loom_model** out) {
  return loom::guard(host, [&] {
    loom::require(a && a->struct_size >= LOOM_MODEL_CREATE_ARGS_SIZE_V2,
                  "model/t5: create args missing or too old");
    refuse_recompute(a);
    *out = reinterpret_cast<loom_model*>(new T5Model(host, cfg, *a, "model/t5"));
  });
}
// The encoder's tokens and padding (B, T); the decoder's tokens and targets (B, K), K the
// recipe's decoder_seq_len: dataset/t5's arrays.
loom_error* batch_spec(const loom_host* host, const loom_config* cfg, size_t* num,
                       const loom_array_spec** specs) {
  static int64_t enc[2] = {LOOM_DIM_BATCH, LOOM_DIM_SEQ}, dec[2] = {LOOM_DIM_BATCH, 0};
  static loom_array_spec wants[4];
  return loom::guard(host, [&] {
    loom::require(num != nullptr && specs != nullptr, "batch_spec outputs are NULL");
    dec[1] = loom::Config(host, cfg).get_int("decoder_seq_len");
    const DLDataType i32 = {kDLInt, 32, 1};
    wants[0] = {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TOKENS, i32, 2, enc};
    wants[1] = {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_PADDING_MASK, i32, 2, enc};
    wants[2] = {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_DEC_TOKENS, i32, 2, dec};
    wants[3] = {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_DEC_TARGETS, i32, 2, dec};
    *num = std::size(wants);
    *specs = wants;
  });
}
// The encoder's padding and the cross-attention's keys are variable-length sequences; the
// relative position bias is an attention bias.
loom_error* attention_requires(const loom_host* host, const loom_config* cfg,
                               const char* const** ids) {
  static const char* const kSeqlens[] = {LOOM_EXT_ATTENTION_SEQLENS, nullptr};
  static const char* const kBias[] = {LOOM_EXT_ATTENTION_SEQLENS, LOOM_EXT_ATTENTION_BIAS, nullptr};
  return loom::guard(host, [&] {
    loom::require(ids != nullptr, "attention_requires: ids is NULL");
    *ids = loom::Config(host, cfg).get_string("position") == "relative" ? kBias : kSeqlens;
  });
}
// ----- generation ----------------------------------------------------------------------------
loom_error* encode(loom_model* m, int64_t slot, const int32_t* tokens, int64_t n) {
  return Slots::call(m, [&](T5Model& x) { x.encode(slot, tokens, n); });
}
// Megatron's T5 decoder starts from the tokenizer's [BOS] (dataset/t5's decoder input).
int64_t decoder_start(loom_model* m) {
  loom_tokenizer_ref tok{nullptr, nullptr};
  const loom_host* host = Slots::self(m)->host();
  if (loom_error* err = host->get_tokenizer(host->ctx, &tok)) {
    host->error_free(err);
    return -1;
  }
  if (!loom::has_vocabulary(tok)) return -1;
  return tok.api->token_to_id(tok.self, "[BOS]", 5);
}

loom_error* check_config(const loom_host* host, const loom_config* cfg,
                         const loom_parallel_layout* layout, const void* args) {
  const auto* a = static_cast<const loom_model_create_args*>(args);
  if (a && a->struct_size >= LOOM_MODEL_CREATE_ARGS_SIZE_V2)
    if (loom_error* e = loom::guard(host, [&] { refuse_recompute(a); })) return e;
  return loom::layers::check_model_config(host, cfg, layout, args, "model/t5",
                                          loom::layers::Family::kT5);
}

const loom_model_api kApi = Slots::api(create, batch_spec, attention_requires);

const loom_encode_ext kEncode = {
    {sizeof(loom_encode_ext), LOOM_EXT_ENCODE, 0, nullptr}, encode, decoder_start};
const loom_decode_slots_ext kDecodeSlots = {
    {sizeof(loom_decode_slots_ext), LOOM_EXT_DECODE_SLOTS, 0, &kEncode.base},
    Slots::kv_clear,
    Slots::decode_slots};
const loom_decode_ext kDecode = {{sizeof(loom_decode_ext), LOOM_EXT_DECODE, 0, &kDecodeSlots.base},
                                 Slots::kv_reset,
                                 Slots::decode,
                                 Slots::max_context};
const char* const kCapabilities[] = {LOOM_EXT_DECODE, LOOM_EXT_DECODE_SLOTS, LOOM_EXT_ENCODE,
                                     LOOM_EXT_FP8_TRAINING, nullptr};

}  // namespace

LOOM_PLUGIN(.description =
                "T5 encoder-decoder (Megatron's): span-corruption pretraining, cross-attention, "
                "generation with the encoder run once",
            .params = {loom::layers::kT5Schema, static_cast<size_t>(loom::layers::kT5SchemaSize)},
            .api = &kApi, .capabilities = kCapabilities, .ext = &kDecode.base,
            .check_config = check_config)
