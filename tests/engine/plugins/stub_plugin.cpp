// A stand-in plugin for the engine tests: a descriptor with a schema shaped like the real
// plugin's of the same kind/name, and a function table of NULL slots (the engine tests
// load and validate, they never create instances). Built once per kind/name with
// STUB_KIND, STUB_NAME and STUB_SCHEMA_<kind>_<name>.
#include "loom/cpp/plugin.hpp"

namespace {

using loom::param;
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
#else
constexpr const loom_param_spec* kParams = nullptr;
#endif

#if defined(STUB_SCHEMA_model_gpt) || defined(STUB_SCHEMA_grad_ddp) ||         \
    defined(STUB_SCHEMA_dataset_mock) || defined(STUB_SCHEMA_dataset_needs) || \
    defined(STUB_SCHEMA_optimizer_adamw)
constexpr size_t kNumParams = sizeof(kParams) / sizeof(kParams[0]);
#else
constexpr size_t kNumParams = 0;
#endif

// Larger than any kind's table; every slot NULL.
struct StubApi {
  size_t struct_size;
  void* slots[64];
};
const StubApi kApi = {sizeof(StubApi), {}};

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
                                            nullptr};  // ext

}  // namespace

LOOM_PLUGIN_ENTRY(kDescriptor)
