// model/bert-classifier: Megatron's Classification model (tasks/glue: MNLI): BERT's embedding
// and layers, the final LayerNorm, the pooler (tanh of a dense layer on [CLS]) and a
// num_classes-way classifier on the pooled vector, instead of the LM and binary heads. It
// finetunes a model/bert checkpoint (checkpoint.finetune, with checkpoint.finetune_fresh =
// "classifier": the classifier starts fresh, the rest is loaded).
#include "loom/cpp/layers/bert/model_plugin.hpp"

namespace {

loom_error* create(const loom_host* host, const loom_config* cfg,
                   const loom_model_create_args* args, loom_model** out) {
  return loom::layers::create_decoder(
      host, cfg, args, loom::layers::kPreNormBlock, "model/bert-classifier", out,
      loom::layers::Family::kBertClassifier, loom::layers::bert_family(true));
}

loom_error* check_config(const loom_host* host, const loom_config* cfg,
                         const loom_parallel_layout* layout, const void* args) {
  return loom::layers::check_model_config(host, cfg, layout, args, "model/bert-classifier",
                                          loom::layers::Family::kBertClassifier);
}

const loom_model_api kApi = loom::layers::bert_classifier_api(create);

}  // namespace

LOOM_PLUGIN(.description =
                "BERT with a sequence(-pair) classifier on the pooled [CLS] (Megatron's "
                "Classification: MNLI finetuning)",
            .params = {loom::layers::kBertClassifierSchema,
                       static_cast<size_t>(loom::layers::kBertClassifierSchemaSize)},
            .api = &kApi, .capabilities = loom::layers::kBertCapabilities,
            .ext = &loom::layers::kDecoderSplit.base, .check_config = check_config)
