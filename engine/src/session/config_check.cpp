// check_plugin_configs (config_check.hpp).
#include "session/config_check.hpp"

#include <set>
#include <string>

#include "base/errors.hpp"
#include "loader/registry.hpp"
#include "loom/cpp/layout.hpp"
#include "recipe/dtype.hpp"
#include "recipe/parallel_layout.hpp"
#include "recipe/recipe.hpp"
#include "session/host.hpp"

namespace loom::engine {
namespace {

void log_check(loom_host_context*, loom_log_level level, const char* message) noexcept {
  host_abi::log_as("check_config", level, message);
}

// Calls `info`'s check_config, if it has one, with `section`'s config; its refusal is the
// recipe's.
void check_one(const PluginInfo& info, const loom_config& section,
               const loom_parallel_layout& layout, const void* create_args) {
  const loom_plugin_descriptor* d = info.desc;
  if (d == nullptr || d->struct_size < LOOM_PLUGIN_DESCRIPTOR_SIZE_V2_15 ||
      d->check_config == nullptr)
    return;
  // The error, log and config slots only: no instance, no backend, no comm.
  const loom_host host = host_abi::common_table(nullptr, log_check);
  if (loom_error* e = d->check_config(&host, &section, &layout, create_args)) {
    const std::string why = host_abi::error_message(e);
    host_abi::error_free(e);
    throw UsageError(why);
  }
}

}  // namespace

int32_t strategy_residency(const Recipe& recipe, Registry& registry) {
  const std::string name = recipe.get_string("parallel", selector_of_kind(LOOM_KIND_GRAD));
  const PluginInfo& info = registry.get(LOOM_KIND_GRAD, name);
  auto* api = static_cast<const loom_grad_api*>(info.desc->api);
  if (!api || api->struct_size < LOOM_GRAD_API_SIZE_V2_13 || !api->residency)
    return LOOM_RESIDENCY_NONE;
  const loom_host host = host_abi::common_table(nullptr, log_check);
  return api->residency(&host, &recipe.section("parallel"));
}

ChunkPlacement chunk_placement(const Recipe& recipe, Registry& registry,
                               const loom_parallel_layout& l, int64_t microbatches) {
  const std::string name = recipe.get_string("parallel", "schedule");
  const PluginInfo& info = registry.get(LOOM_KIND_SCHEDULE, name);
  const auto* ox = reinterpret_cast<const loom_schedule_order_ext*>(
      loom_ext_find(info.desc->ext, LOOM_EXT_SCHEDULE_ORDER));
  ChunkPlacement c;
  if (ox == nullptr || ox->base.struct_size < LOOM_SCHEDULE_ORDER_EXT_SIZE_V1) {
    for (int v = 0; v < l.virtual_stages; ++v) c.stages.push_back(v * l.pipeline + l.pipeline_rank);
    c.total = l.pipeline * l.virtual_stages;
    return c;
  }
  loom_schedule_order_args a{};
  a.struct_size = LOOM_SCHEDULE_ORDER_ARGS_SIZE_V2_19;
  a.pipeline = l.pipeline;
  a.virtual_stages = l.virtual_stages;
  a.num_microbatches = microbatches;
  const loom_host host = host_abi::common_table(nullptr, log_check);
  if (loom_error* e = ox->order(&host, &a)) {
    const std::string why = host_abi::error_message(e);
    host_abi::error_free(e);
    throw UsageError("parallel.schedule = \"" + name + "\": " + why);
  }
  c.total = l.pipeline * a.chunks;
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over the whole placement
  bool plain = true;
  for (int r = 0; r < l.pipeline; ++r)
    for (int v = 0; v < a.chunks; ++v) {
      const int32_t s = a.stages[r * a.chunks + v];
      if (s < 0 || s >= c.total)
        throw RunError("schedule/" + name + " places a chunk at stage " + std::to_string(s) +
                       " of " + std::to_string(c.total));
      if (r == l.pipeline_rank) c.stages.push_back(s);
      plain = plain && s == v * l.pipeline + r;
      hash = (hash ^ uint64_t(s)) * 1099511628211ull;
    }
  c.placement = plain ? 0 : int64_t(hash >> 1);
  return c;
}

void check_model_residency(const Recipe& recipe, const loom_model_api* api, int32_t residency) {
  if (residency != LOOM_RESIDENCY_NONE &&
      (api->struct_size < LOOM_MODEL_API_SIZE_V2_13 || api->hold_params == nullptr))
    throw UsageError("parallel.data = \"" + recipe.get_string("parallel", "data") +
                     "\" shards the parameters per layer, and model/" + recipe.plugin("model") +
                     " has no parameter residency (loom_model_api.hold_params, ABI 2.13)");
}

loom_model_create_args inference_create_args(int64_t vocab, int64_t seq_len, int64_t micro_batch,
                                             int32_t stage, int32_t stages) {
  loom_model_create_args a{};
  a.struct_size = LOOM_MODEL_CREATE_ARGS_SIZE_V2_18;
  a.ext = nullptr;  // ABI 2.18: the chain the next create options go on; none yet
  a.vocab_size = vocab;
  a.seq_len = seq_len;
  a.micro_batch = micro_batch;
  a.dtype = loom_f32();
  a.pipeline_stage = stage;
  a.pipeline_stages = stages;
  a.recompute_granularity = LOOM_RECOMPUTE_NONE;
  a.recompute_method = LOOM_RECOMPUTE_UNIFORM;
  a.recompute_num_layers = 1;
  a.residency = LOOM_RESIDENCY_NONE;
  return a;
}

loom_model_create_args model_create_args(const Recipe& recipe, int64_t vocab, int stage,
                                         int stages) {
  loom_model_create_args a =
      inference_create_args(vocab, recipe.get_int("train", "seq_len"),
                            recipe.get_int("train", "micro_batch_size"), stage, stages);
  a.dtype = compute_dtype(recipe.get_string("precision", "dtype"));
  // train.recompute_* (ABI 2.10), the module names checked by the recipe's validation.
  const std::string g = recipe.get_string("train", "recompute_granularity");
  a.recompute_granularity = g == "full"        ? LOOM_RECOMPUTE_FULL
                            : g == "selective" ? LOOM_RECOMPUTE_SELECTIVE
                                               : LOOM_RECOMPUTE_NONE;
  a.recompute_method = recipe.get_string("train", "recompute_method") == "block"
                           ? LOOM_RECOMPUTE_BLOCK
                           : LOOM_RECOMPUTE_UNIFORM;
  a.recompute_num_layers = (int32_t)recipe.get_int("train", "recompute_num_layers");
  uint32_t modules = 0;
  parse_recompute_modules(recipe.get_string("train", "recompute_modules"), &modules);
  a.recompute_modules = modules;
  // train.objective = "dpo": the model's loss becomes DPO's (loom.preference/1, ABI 2.26);
  // check_plugin_configs refuses a model that does not list it before any create sees it.
  // Borrowed by the create: one per thread, valid until this thread's next call.
  static thread_local loom_preference_objective dpo;
  if (recipe.get_string("train", "objective") == "dpo") {
    dpo = loom_preference_objective{{sizeof dpo, LOOM_EXT_PREFERENCE, LOOM_EXT_REQUIRED, nullptr},
                                    recipe.get_float("train", "dpo_beta")};
    a.ext = &dpo.base;
  }
  // precision.fp8 (loom.fp8-training/1, ABI 2.32), refused the same way for a model without it.
  static thread_local loom_fp8_training fp8;
  if (const int32_t r = fp8_recipe(recipe)) {
    fp8 = loom_fp8_training{};
    fp8.base = {sizeof fp8, LOOM_EXT_FP8_TRAINING, LOOM_EXT_REQUIRED, a.ext};
    fp8.recipe = r;
    fp8.hybrid = recipe.get_string("precision", "fp8_format") == "hybrid";
    fp8.margin = (int32_t)recipe.get_int("precision", "fp8_margin");
    fp8.amax_history_len = (int32_t)recipe.get_int("precision", "fp8_amax_history_len");
    fp8.amax_most_recent = recipe.get_string("precision", "fp8_amax_compute_algo") == "most_recent";
    if (recipe.get_bool("precision", "fp8_first_last_bf16")) {
      fp8.layers_at_start_bf16 = (int32_t)recipe.get_int("precision", "fp8_layers_at_start_bf16");
      fp8.layers_at_end_bf16 = (int32_t)recipe.get_int("precision", "fp8_layers_at_end_bf16");
    }
    a.ext = &fp8.base;
  }
  return a;
}

int32_t fp8_recipe(const Recipe& recipe) {
  const std::string r = recipe.get_string("precision", "fp8");
  return r == "tensorwise"  ? LOOM_FP8_RECIPE_TENSORWISE
         : r == "delayed"   ? LOOM_FP8_RECIPE_DELAYED
         : r == "blockwise" ? LOOM_FP8_RECIPE_BLOCKWISE
                            : 0;
}

void check_plugin_configs(Recipe& recipe, Registry& registry, const loom_parallel_layout& layout) {
  for (const PluginSection& s : plugin_sections()) {
    const PluginInfo& info = registry.get(s.kind, recipe.plugin(s.name));
    if (s.kind != LOOM_KIND_MODEL) {
      check_one(info, recipe.section(s.name), layout, nullptr);
      continue;
    }
    if (recipe.get_string("train", "objective") == "dpo" &&
        !info.has_capability(LOOM_EXT_PREFERENCE))
      throw UsageError("train.objective = \"dpo\": model/" + recipe.plugin("model") +
                       " has no preference objective (" LOOM_EXT_PREFERENCE "; its capabilities: " +
                       info.capabilities_text() + ")");
    if (fp8_recipe(recipe) != 0) {
      if (!info.has_capability(LOOM_EXT_FP8_TRAINING))
        throw UsageError("precision.fp8 = \"" + recipe.get_string("precision", "fp8") +
                         "\": model/" + recipe.plugin("model") +
                         " has no FP8 training (" LOOM_EXT_FP8_TRAINING "; its capabilities: " +
                         info.capabilities_text() + ")");
      if (!registry.get(LOOM_KIND_BACKEND, recipe.plugin("backend")).has_capability(LOOM_EXT_FP8))
        throw UsageError("precision.fp8 = \"" + recipe.get_string("precision", "fp8") +
                         "\": backend/" + recipe.plugin("backend") +
                         " does not list " LOOM_EXT_FP8 ", its FP8 casts and scaled GEMMs");
      if (recipe.get_string("precision", "dtype") == "fp64")
        throw UsageError(
            "precision.fp8 with precision.dtype = \"fp64\": fp64 is the layouts' exact check; "
            "FP8 runs with fp32, bf16 or fp16");
    }
    const int32_t residency = strategy_residency(recipe, registry);
    check_model_residency(recipe, static_cast<const loom_model_api*>(info.desc->api), residency);
    const ChunkPlacement place =
        chunk_placement(recipe, registry, layout, microbatches_per_step(recipe, layout.data));
    for (int32_t stage : place.stages) {
      loom_model_create_args a = model_create_args(recipe, 0, stage, place.total);
      a.residency = residency;
      check_one(info, recipe.section(s.name), layout, &a);
    }
  }
  for (loom_plugin_kind kind : {LOOM_KIND_GRAD, LOOM_KIND_SCHEDULE})
    check_one(registry.get(kind, recipe.get_string("parallel", selector_of_kind(kind))),
              recipe.section("parallel"), layout, nullptr);
}

void check_plugin_configs(Recipe& recipe, Registry& registry, int world) {
  const loom::layout::Degrees d = layout_degrees(recipe);
  std::set<int> stages;
  for (int rank = 0; rank < world; ++rank) {
    const loom_parallel_layout l = loom::layout::coordinates(d, world, rank);
    if (stages.insert(l.pipeline_rank).second) check_plugin_configs(recipe, registry, l);
  }
}

}  // namespace loom::engine
