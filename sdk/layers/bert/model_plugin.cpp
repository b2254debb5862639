// Loom layer library, the C table of BERT's model plugins (model/bert, model/bert-classifier):
// decoder_api's slots with BERT's named batch and attention needs; see
// loom/cpp/layers/bert/model_plugin.hpp.
#include "loom/cpp/layers/bert/model_plugin.hpp"

#include <vector>

namespace loom::layers {
namespace {

// BERT reads tokens, targets and the padding mask, and token types and sentence-order labels
// when its options have them; its padding needs loom.attention-seqlens/1.
loom_error* bert_batch_spec(const loom_host* host, const loom_config* cfg, size_t* num,
                            const loom_array_spec** specs) {
  return loom::guard(host, [&] {
    loom::require(num != nullptr && specs != nullptr, "batch_spec outputs are NULL");
    const loom::Config c(host, cfg);
    static std::vector<loom_array_spec> wants;
    wants.assign(kBertBatchSpec, kBertBatchSpec + 3);
    if (c.get_int("num_tokentypes") > 0) wants.push_back(kBertBatchSpec[3]);
    if (c.get_bool("binary_head")) wants.push_back(kBertBatchSpec[4]);
    *num = wants.size();
    *specs = wants.data();
  });
}
loom_error* bert_attention_requires(const loom_host* host, const loom_config*,
                                    const char* const** ids) {
  static const char* const kSeqlens[] = {LOOM_EXT_ATTENTION_SEQLENS, nullptr};
  return loom::guard(host, [&] {
    loom::require(ids != nullptr, "attention_requires: ids is NULL");
    *ids = kSeqlens;
  });
}

}  // namespace

const char* const kBertCapabilities[] = {LOOM_EXT_SPLIT_BACKWARD, LOOM_EXT_FP8_TRAINING, nullptr};

loom_model_api bert_api(CreateFn create) {
  loom_model_api api = decoder_api(create);
  api.batch_spec = bert_batch_spec;
  api.attention_requires = bert_attention_requires;
  return api;
}

loom_model_api bert_classifier_api(CreateFn create) {
  loom_model_api api = bert_api(create);
  api.batch_spec = [](const loom_host* host, const loom_config* cfg, size_t* num,
                      const loom_array_spec** specs) {
    return loom::guard(host, [&] {
      loom::require(num != nullptr && specs != nullptr, "batch_spec outputs are NULL");
      const bool types = loom::Config(host, cfg).get_int("num_tokentypes") > 0;
      static const loom_array_spec kNoTypes[3] = {kClassifierBatchSpec[0], kClassifierBatchSpec[1],
                                                  kClassifierBatchSpec[3]};
      *num = 3 + (types ? 1 : 0);
      *specs = types ? kClassifierBatchSpec : kNoTypes;
    });
  };
  return api;
}

}  // namespace loom::layers
