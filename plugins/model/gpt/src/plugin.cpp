// model/gpt: GPT-2 and the Llama family (RMSNorm, SwiGLU, RoPE, GQA, untied head through
// options) — the layer library's decoder with the pre-norm block. Everything else is
// loom/cpp/layers.
#include "loom/cpp/layers/decoder/model_plugin.hpp"

namespace {

loom_error* create(const loom_host* host, const loom_config* cfg,
                   const loom_model_create_args* args, loom_model** out) {
  return loom::layers::create_decoder(host, cfg, args, loom::layers::kPreNormBlock, "model/gpt",
                                      out);
}

loom_error* check_config(const loom_host* host, const loom_config* cfg,
                         const loom_parallel_layout* layout, const void* args) {
  return loom::layers::check_model_config(host, cfg, layout, args, "model/gpt",
                                          loom::layers::Family::kGpt);
}

const loom_model_api kApi = loom::layers::decoder_api(create);

}  // namespace

LOOM_PLUGIN(.description =
                "GPT-2 decoder; Llama family through options (rmsnorm, swiglu, rope, GQA, untied)",
            .params = {loom::layers::kTransformerSchema,
                       static_cast<size_t>(loom::layers::kTransformerSchemaSize)},
            .api = &kApi, .capabilities = loom::layers::kDecoderCapabilities,
            .ext = &loom::layers::kDecoderDecode.base, .check_config = check_config)
