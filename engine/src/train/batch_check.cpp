// The named batch (ABI 2): the arrays a model's batch_spec asks for against those the run's
// data provides, checked by `loom validate` and before a run creates anything.
#include "train/batch_check.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <iterator>

#include "base/errors.hpp"
#include "data/chat_format.hpp"
#include "loader/registry.hpp"
#include "loom/cpp/describe.hpp"
#include "session/host.hpp"
#include "train/train_run.hpp"

namespace loom::engine {
namespace {

void log_model(loom_host_context*, loom_log_level level, const char* message) noexcept {
  host_abi::log_as("model", level, message);
}

std::string describe(const loom_array_spec& a) {
  std::string r = std::string(a.name) + " (" + loom::dtype_str(a.dtype);
  for (int32_t d = 0; d < a.ndim; ++d) {
    r += d == 0 ? " " : " x ";
    r += a.shape[d] == LOOM_DIM_BATCH ? "B"
         : a.shape[d] == LOOM_DIM_SEQ ? "T"
                                      : std::to_string(a.shape[d]);
  }
  return r + ")";
}

}  // namespace

// Every array the model reads must be one the data provides, with its dtype and shape: a
// model that reads what is not there would fail mid-step, or read the wrong thing.
void check_batch_spec(const loom_array_spec* wants, size_t num_wants,
                      const loom_array_spec* provides, size_t num_provides,
                      const std::string& model) {
  std::string provided;
  for (size_t j = 0; j < num_provides; ++j)
    provided += (provided.empty() ? "" : ", ") + describe(provides[j]);
  for (size_t i = 0; i < num_wants; ++i) {
    const loom_array_spec& want = wants[i];
    const loom_array_spec* have = nullptr;
    for (size_t j = 0; j < num_provides; ++j)
      if (std::string(provides[j].name) == want.name) have = &provides[j];
    const bool same = have && loom_dtype_eq(have->dtype, want.dtype) && have->ndim == want.ndim &&
                      std::equal(want.shape, want.shape + want.ndim, have->shape);
    if (!same)
      throw UsageError("model/" + model + " reads the micro-batch array " + describe(want) +
                       ", which the data does not provide; it provides " + provided);
  }
}

Recipe& check_model_batch(Recipe& recipe, Registry& registry) {
  // serve.chat_format names a chat format (data/chat_format.hpp): refused here, which `loom
  // run` and `loom validate` both pass, rather than when a checkpoint of it is served.
  if (const std::string f = recipe.get_string("serve", "chat_format"); !f.empty()) {
    try {
      ChatFormat::named(f);
    } catch (const UsageError& e) {
      throw UsageError(std::string("serve.chat_format: ") + e.what());
    }
  }
  const std::string model = recipe.plugin("model");
  const PluginInfo& info = registry.get(LOOM_KIND_MODEL, model);
  const auto* api = static_cast<const loom_model_api*>(info.desc->api);
  if (api->struct_size < LOOM_MODEL_API_SIZE_V2 || api->batch_spec == nullptr)
    throw UsageError("model/" + model +
                     " leaves batch_spec NULL: ABI 2 needs the arrays a micro-batch carries");
  // A host with the error and config slots only: batch_spec sees no instance, no backend.
  const loom_host host = host_abi::common_table(nullptr, log_model);
  size_t num = 0;
  const loom_array_spec* wants = nullptr;
  if (loom_error* e = api->batch_spec(&host, &recipe.section("model"), &num, &wants)) {
    const std::string why = host_abi::error_message(e);
    host_abi::error_free(e);
    throw UsageError("model/" + model + ": batch_spec: " + why);
  }
  const std::vector<loom_array_spec> provides = Feed::provides(recipe, registry);
  check_batch_spec(wants, num, provides.data(), provides.size(), model);

  // Ring context parallelism merges partial attention (ABI 2.7): the plugin must list it, or
  // the first backward would be refused mid-run.
  const std::string attention = recipe.plugin("attention");
  const PluginInfo& attn = registry.get(LOOM_KIND_ATTENTION, attention);
  const int64_t context = recipe.get_int("parallel", "context");
  if (context > 1 && recipe.get_string("parallel", "cp_comm_type") == "p2p" &&
      !attn.has_capability(LOOM_EXT_ATTENTION_PARTIAL))
    throw UsageError("parallel.context = " + std::to_string(context) +
                     " with cp_comm_type = \"p2p\" (ring attention) merges partial attention ('" +
                     LOOM_EXT_ATTENTION_PARTIAL + "'), and attention/" + attention +
                     " does not list it (its capabilities: " + attn.capabilities_text() +
                     "); use attention/reference or attention/flash-cpu, or cp_comm_type = "
                     "\"a2a\"");
  // What the model will ask of the attention plugin (a sliding window's extension) must be
  // on that plugin's capability list: otherwise the first attention call is refused mid-run.
  if (api->attention_requires == nullptr) return recipe;
  const char* const* ids = nullptr;
  if (loom_error* e = api->attention_requires(&host, &recipe.section("model"), &ids)) {
    const std::string why = host_abi::error_message(e);
    host_abi::error_free(e);
    throw UsageError("model/" + model + ": attention_requires: " + why);
  }
  for (; ids && *ids; ++ids)
    if (!attn.has_capability(*ids))
      throw UsageError("model/" + model + " with this recipe needs '" + *ids +
                       "' of its attention plugin, and attention/" + attention +
                       " does not list it (its capabilities: " + attn.capabilities_text() +
                       "); choose an attention plugin that does (loom plugins describe "
                       "attention/NAME)");
  return recipe;
}

}  // namespace loom::engine
