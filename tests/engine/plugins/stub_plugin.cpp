// A stand-in plugin for the engine tests: a descriptor with a schema shaped like the real
// plugin's of the same kind/name, and a function table whose mandatory slots abort when
// called (the engine tests load and validate, they never create instances; the host refuses
// a table with a NULL mandatory slot) and whose optional slots are NULL, but for a model's
// batch_spec, which `loom validate` asks: model/gpt reads tokens and targets as the real one
// does, model/typed also token_types, which GPT samples do not provide. Built once per
// kind/name with STUB_KIND, STUB_NAME and STUB_SCHEMA_<kind>_<name>.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "loom/cpp/plugin.hpp"

namespace {

using loom::param;

// Every mandatory slot: the stand-in is never meant to run.
[[noreturn]] void stub_slot() {
  std::fputs("stub plugin " STUB_NAME ": a slot was called; stubs only validate\n", stderr);
  std::abort();
}
template <class F>
void stub(F& slot) {
  slot = reinterpret_cast<F>(&stub_slot);
}
constexpr double kInf = 1e300;

#if defined(STUB_SCHEMA_model_gpt)
constexpr loom_param_spec kParams[] = {
    param("n_layer", LOOM_PARAM_INT, "12", "transformer layers", 1, kInf),
    param("n_head", LOOM_PARAM_INT, "12", "attention heads", 1, kInf),
    param("n_embd", LOOM_PARAM_INT, "768", "hidden size", 1, kInf),
    param("activation", LOOM_PARAM_STRING, "gelu", "MLP activation", 1, 0, "gelu|swiglu"),
    param("dropout", LOOM_PARAM_FLOAT, "0.0", "dropout probability", 0, 1),
    param("bias", LOOM_PARAM_BOOL, "true", "linear layers have biases"),
    param("name", LOOM_PARAM_STRING, "", "free-form label"),
};
#elif defined(STUB_SCHEMA_grad_ddp)
constexpr loom_param_spec kParams[] = {
    param("bucket_mb", LOOM_PARAM_INT, "25", "gradient bucket size in MiB", 1, kInf),
};
#elif defined(STUB_SCHEMA_dataset_mock)
constexpr loom_param_spec kParams[] = {
    param("num_documents", LOOM_PARAM_INT, "64", "documents to make up", 1, kInf),
};
#elif defined(STUB_SCHEMA_dataset_needs)
constexpr loom_param_spec kParams[] = {
    param("path", LOOM_PARAM_STRING, nullptr, "the data file (required)"),
};
#elif defined(STUB_SCHEMA_optimizer_adamw)
constexpr loom_param_spec kParams[] = {
    param("beta1", LOOM_PARAM_FLOAT, "0.9", "first-moment decay", 0, 1),
    param("weight_decay", LOOM_PARAM_FLOAT, "0.1", "decoupled weight decay", 0, kInf),
};
#elif defined(STUB_SCHEMA_attention_fussy)  // a plugin with a train.deterministic switch
constexpr loom_param_spec kParams[] = {
    param("deterministic", LOOM_PARAM_BOOL, "false", "the same bits on every run"),
};
#else
constexpr const loom_param_spec* kParams = nullptr;
#endif

#if defined(STUB_SCHEMA_model_gpt) || defined(STUB_SCHEMA_grad_ddp) ||         \
    defined(STUB_SCHEMA_dataset_mock) || defined(STUB_SCHEMA_dataset_needs) || \
    defined(STUB_SCHEMA_optimizer_adamw) || defined(STUB_SCHEMA_attention_fussy)
constexpr size_t kNumParams = sizeof(kParams) / sizeof(kParams[0]);
#else
constexpr size_t kNumParams = 0;
#endif

#if defined(STUB_SCHEMA_model_gpt) || defined(STUB_SCHEMA_model_typed)
const int64_t kBT[2] = {LOOM_DIM_BATCH, LOOM_DIM_SEQ};
const loom_array_spec kArrays[] = {
    {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TOKENS, {kDLInt, 32, 1}, 2, kBT},
    {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TARGETS, {kDLInt, 32, 1}, 2, kBT},
    {LOOM_ARRAY_SPEC_SIZE_V2, "token_types", {kDLInt, 32, 1}, 2, kBT}};
loom_error* batch_spec(const loom_host*, const loom_config*, size_t* num,
                       const loom_array_spec** specs) {
  *num = std::string(STUB_NAME) == "typed" ? 3 : 2;
  *specs = kArrays;
  return nullptr;
}
loom_model_api make_api() {
  loom_model_api api{};
  api.struct_size = sizeof(loom_model_api);
  stub(api.create);
  stub(api.destroy);
  stub(api.num_params);
  stub(api.get_param);
  stub(api.init_params);
  stub(api.zero_grad);
  stub(api.flops_per_token);
  api.batch_spec = batch_spec;
  stub(api.stage_info);
  stub(api.stage_forward);
  stub(api.stage_backward);
  stub(api.finish_grads);
  return api;
}
const loom_model_api kApi = make_api();
#else
// Larger than any kind's table. Every kind's mandatory slots (those the host calls without
// a NULL check) lead its table: that many are set, the optional ones after them stay NULL.
struct StubApi {
  size_t struct_size;
  void* slots[64];
};
constexpr int mandatory_slots(loom_plugin_kind kind) {
  switch (kind) {
    case LOOM_KIND_BACKEND:
      return 10;  // create .. get_ext
    case LOOM_KIND_COMM:
      return 16;  // create .. recv
    case LOOM_KIND_ATTENTION:
      return 4;  // create .. backward
    case LOOM_KIND_GRAD:
    case LOOM_KIND_SCHEDULE:
      return 3;  // create, destroy, reduce / run
    case LOOM_KIND_OPTIMIZER:
      return 5;  // create .. get_state
    case LOOM_KIND_TOKENIZER:
      return 6;  // create .. decode
    case LOOM_KIND_DATASET:
      return 4;  // create .. document
    default:
      return 0;
  }
}
StubApi make_api() {
  StubApi api{sizeof(StubApi), {}};
  for (int i = 0; i < mandatory_slots(STUB_KIND); ++i)
    api.slots[i] = reinterpret_cast<void*>(&stub_slot);
  return api;
}
const StubApi kApi = make_api();
#endif

const loom_plugin_descriptor kDescriptor = {LOOM_PLUGIN_DESCRIPTOR_SIZE_V2,
                                            LOOM_ABI_MAJOR,
                                            LOOM_ABI_MINOR,
                                            STUB_KIND,
                                            STUB_NAME,
                                            "0.0.1",
                                            "Loom tests",
                                            "Apache-2.0",
                                            "stand-in for engine tests",
                                            kParams,
                                            kNumParams,
                                            &kApi,
                                            nullptr,   // capabilities
                                            nullptr,   // ext
                                            nullptr};  // check_config

}  // namespace

LOOM_PLUGIN_ENTRY(kDescriptor)
