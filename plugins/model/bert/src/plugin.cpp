// model/bert: Megatron's BERT (pre-LN): word, position and token-type embeddings,
// bidirectional attention over each row's real tokens, the LM head's transform and the
// pooler with the binary sentence-order head — the layer library's decoder run with its
// BERT options, the same pre-norm layers as model/gpt. Everything else is loom/cpp/layers.
#include "loom/cpp/layers/bert/model_plugin.hpp"

namespace {

loom_error* create(const loom_host* host, const loom_config* cfg,
                   const loom_model_create_args* args, loom_model** out) {
  return loom::layers::create_decoder(host, cfg, args, loom::layers::kPreNormBlock, "model/bert",
                                      out, loom::layers::Family::kBert,
                                      loom::layers::bert_family(false));
}

loom_error* check_config(const loom_host* host, const loom_config* cfg,
                         const loom_parallel_layout* layout, const void* args) {
  return loom::layers::check_model_config(host, cfg, layout, args, "model/bert",
                                          loom::layers::Family::kBert);
}

const loom_model_api kApi = loom::layers::bert_api(create);

}  // namespace

LOOM_PLUGIN(.description =
                "BERT encoder (Megatron's, pre-LN): masked LM and the sentence-order binary head",
            .params = {loom::layers::kBertSchema,
                       static_cast<size_t>(loom::layers::kBertSchemaSize)},
            .api = &kApi, .capabilities = loom::layers::kBertCapabilities,
            .ext = &loom::layers::kDecoderSplit.base, .check_config = check_config)
