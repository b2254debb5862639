// Loom layer library, FP8 training's options: the host's loom.fp8-training/1 (precision.fp8,
// model.h) on the create args into Options::fp8, and what it does not cover yet, refused by
// name. The GEMMs: loom/cpp/fp8_linear.hpp; which weights get them: ParamStore::link_fp8.
#include <string>

#include "loom/cpp/layers/core/peft.hpp"

namespace loom::layers {

void parse_fp8(const loom_model_create_args& args, Family family, const std::string& who,
               Options& o) {
  if (args.struct_size < LOOM_MODEL_CREATE_ARGS_SIZE_V2_18) return;
  const loom_ext* e = loom_ext_find(args.ext, LOOM_EXT_FP8_TRAINING);
  if (!e) return;
  loom::require(e->struct_size >= LOOM_FP8_TRAINING_SIZE_V1,
                who + ": " LOOM_EXT_FP8_TRAINING " on the create args is smaller than its v1");
  const auto& f = *reinterpret_cast<const loom_fp8_training*>(e);
  loom::require(f.recipe >= LOOM_FP8_RECIPE_TENSORWISE && f.recipe <= LOOM_FP8_RECIPE_BLOCKWISE,
                who + ": FP8 recipe " + std::to_string(f.recipe) + " is not one of model.h's");
  loom::require(f.margin >= 0 && f.layers_at_start_bf16 >= 0 && f.layers_at_end_bf16 >= 0,
                who + ": FP8's margin and bf16 layer counts must be >= 0");
  // Delayed scaling's amax histories and scales are state of the model: they must be
  // checkpointed, resharded and reduced over the tensor and data groups before a run may
  // use them (loom.fp8/1's delayed_update is ready for it).
  const char* missing =
      f.recipe == LOOM_FP8_RECIPE_DELAYED ? "precision.fp8 = \"delayed\" (its amax histories are "
                                            "not model state yet: use tensorwise or blockwise)"
      : family != Family::kGpt            ? "this model family (only GPT-style decoders)"
      : o.num_experts > 0 ? "a mixture of experts (the experts' grouped GEMMs have no FP8 "
                            "path yet)"
                          : nullptr;
  loom::require(
      missing == nullptr,
      who + ": FP8 training is not implemented with " + std::string(missing ? missing : ""),
      LOOM_ERR_UNIMPLEMENTED);
  const int64_t first = f.layers_at_start_bf16, end = o.n_layer - f.layers_at_end_bf16;
  loom::require(first < end, who + ": precision.fp8_first_last_bf16 keeps " +
                                 std::to_string(f.layers_at_start_bf16) + " + " +
                                 std::to_string(f.layers_at_end_bf16) + " of the " +
                                 std::to_string(o.n_layer) + " layers in dtype: none left in FP8");
  o.fp8.recipe = f.recipe;
  o.fp8.hybrid = f.hybrid != 0;
  o.fp8.margin = f.margin;
  o.fp8.first = first;
  o.fp8.end = end;
}

}  // namespace loom::layers
