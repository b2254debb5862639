// Every plugin's own configuration check (loom_plugin_descriptor.check_config, ABI 2.15): what
// its create would refuse for a configuration reason, found without creating anything, so that
// `loom validate` and a run refuse it alike, with exit 2, before any data is read.
#pragma once

#include <vector>

#include "loom/loom.h"

namespace loom::engine {

class Recipe;
class Registry;

// The recipe's plugins (every section's, the gradient strategy and the schedule) checked at
// `layout`, this rank's; throws UsageError with the first plugin's refusal.
void check_plugin_configs(Recipe& recipe, Registry& registry, const loom_parallel_layout& layout);
// The same for every pipeline stage of a world of `world` ranks (`loom validate`).
void check_plugin_configs(Recipe& recipe, Registry& registry, int world);

// What a model's create gets after its config, less the host callbacks TrainRun adds: the
// recipe's seq_len, micro-batch, compute dtype and recompute settings, pipeline `stage` of
// `stages`, vocabulary `vocab` (0: not known).
loom_model_create_args model_create_args(const Recipe& recipe, int64_t vocab, int stage,
                                         int stages);
// precision.fp8's LOOM_FP8_RECIPE_* (model.h), 0 for "none".
int32_t fp8_recipe(const Recipe& recipe);
// The create args of a model that only loads weights and runs forward (checkpoint convert,
// generation): f32, every field to 2.18's ext, no recompute (one layer per group, the
// recipe's default, which a model checks once struct_size covers 2.10), no residency, no
// extension.
loom_model_create_args inference_create_args(int64_t vocab, int64_t seq_len, int64_t micro_batch,
                                             int32_t stage, int32_t stages);

// Where the schedule (parallel.schedule) places this rank's model chunks, as its
// loom.schedule-order/1 says: `stages`, the pipeline stage of each chunk (their count is
// the chunks per rank), of `total` stages; without the extension, chunk v of rank r holds
// stage v*P + r for the layout's virtual stages. With `microbatches` > 0 the schedule also
// says whether it runs that many a step; its refusal throws UsageError (the recipe's).
// `placement` is 0 for v*P + r and otherwise a fingerprint of the whole placement, which
// a checkpoint records: a resume reads its files as they are only under the same one.
struct ChunkPlacement {
  std::vector<int32_t> stages;
  int32_t total = 1;
  int64_t placement = 0;
};
ChunkPlacement chunk_placement(const Recipe& recipe, Registry& registry,
                               const loom_parallel_layout& layout, int64_t microbatches);

// The residency the gradient strategy (parallel.data) needs of the model
// (loom_grad_api.residency, ABI 2.13), and the refusal of a model without one.
int32_t strategy_residency(const Recipe& recipe, Registry& registry);
void check_model_residency(const Recipe& recipe, const loom_model_api* api, int32_t residency);

}  // namespace loom::engine
