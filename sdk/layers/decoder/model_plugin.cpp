// Loom layer library, the C slots of a DecoderModel plugin (everything C++ stays behind
// loom::guard); see loom/cpp/layers/decoder/model_plugin.hpp.
#include "loom/cpp/layers/decoder/model_plugin.hpp"

#include <iterator>
#include <vector>

namespace loom::layers {
namespace {

using Slots = ModelSlots<DecoderModel>;

// A decoder reads tokens (first stage) and targets (last stage), whatever its options.
loom_error* batch_spec(const loom_host* host, const loom_config*, size_t* num,
                       const loom_array_spec** specs) {
  return loom::guard(host, [&] {
    loom::require(num != nullptr && specs != nullptr, "batch_spec outputs are NULL");
    *num = std::size(kBatchSpec);
    *specs = kBatchSpec;
  });
}
// A sliding window (recipe key attention_window > 0) needs loom.attention-window/1.
loom_error* attention_requires(const loom_host* host, const loom_config* cfg,
                               const char* const** ids) {
  static const char* const kWindow[] = {LOOM_EXT_ATTENTION_WINDOW, nullptr};
  return loom::guard(host, [&] {
    loom::require(ids != nullptr, "attention_requires: ids is NULL");
    *ids = loom::Config(host, cfg).get_int("attention_window") > 0 ? kWindow : nullptr;
  });
}
}  // namespace

loom_error* create_decoder(const loom_host* host, const loom_config* cfg,
                           const loom_model_create_args* args, const BlockSpec& spec,
                           const std::string& who, loom_model** out, Family family,
                           std::unique_ptr<FamilyHooks> hooks) {
  return loom::guard(host, [&] {
    loom::require(args && args->struct_size >= LOOM_MODEL_CREATE_ARGS_SIZE_V2,
                  who + ": create args missing or too old");
    *out = reinterpret_cast<loom_model*>(
        new DecoderModel(host, cfg, *args, spec, who, family, std::move(hooks)));
  });
}

loom_model_api decoder_api(CreateFn create) {
  loom_model_api api = Slots::api(create, batch_spec, attention_requires);
  api.struct_size = LOOM_MODEL_API_SIZE_V2_13;
  api.hold_params = [](loom_model* m, int32_t hold) {
    return Slots::call(m, [&](DecoderModel& x) { x.hold_params(hold != 0); });
  };
  return api;
}

// The split backward of the zero-bubble schedules (loom.split-backward/1), last in the chain.
const loom_split_backward_ext kDecoderSplit = {
    {sizeof(loom_split_backward_ext), LOOM_EXT_SPLIT_BACKWARD, 0, nullptr}, Slots::weight_backward};
// Generation with a KV cache, the optional loom.decode/1 capability, chained to
// loom.decode-slots/1 (continuous batching), then the split backward.
const loom_decode_slots_ext kDecoderDecodeSlots = {
    {sizeof(loom_decode_slots_ext), LOOM_EXT_DECODE_SLOTS, 0, &kDecoderSplit.base},
    Slots::kv_clear,
    Slots::decode_slots};
const loom_decode_ext kDecoderDecode = {
    {sizeof(loom_decode_ext), LOOM_EXT_DECODE, 0, &kDecoderDecodeSlots.base},
    Slots::kv_reset,
    Slots::decode,
    Slots::max_context};
const char* const kDecoderCapabilities[] = {
    LOOM_EXT_DECODE,     LOOM_EXT_DECODE_SLOTS,      LOOM_EXT_TOKEN_STATS,  LOOM_EXT_SPLIT_BACKWARD,
    LOOM_EXT_PREFERENCE, LOOM_EXT_MICROBATCH_DEVICE, LOOM_EXT_FP8_TRAINING, nullptr};

}  // namespace loom::layers
