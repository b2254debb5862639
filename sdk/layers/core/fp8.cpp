// Loom layer library, FP8 training's options: the host's loom.fp8-training/1 (precision.fp8,
// model.h) on the create args into Options::fp8, and what it does not cover yet, refused by
// name; delayed scaling's step end. The GEMMs: loom/cpp/fp8_linear.hpp; which weights get
// them: ParamStore::link_fp8.
#include <string>

#include "loom/cpp/layers/core/params.hpp"
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
  const char* missing = family == Family::kT5 ? "T5 (GPT-style decoders and BERT only)"
                        : o.num_experts > 0
                            ? "a mixture of experts (the experts' grouped GEMMs have no FP8 "
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
  if (f.recipe != LOOM_FP8_RECIPE_DELAYED) return;
  loom::require(f.amax_history_len >= 1, who +
                                             ": precision.fp8_amax_history_len must be >= 1, not " +
                                             std::to_string(f.amax_history_len));
  o.fp8.history_len = f.amax_history_len;
  o.fp8.most_recent = f.amax_most_recent != 0;
}

// Every rank of the tensor group casts shards of the same tensors, and every rank of `batch`
// other micro-batches of the same step: each tensor's amax of the step is the largest of
// theirs (Transformer Engine's amax reduction), and with it each rank derives the scale one
// rank would. The histories' other slots and the scales are equal on those ranks already
// (they start so, are loaded replicated, and change only here), so MAX over the whole f32
// state, padding included, leaves them as they are: one reduction per group.
void update_fp8_scales(const Ctx& c, ParamStore& ps, const Fp8Config& f,
                       const ProcessGroup& batch) {
  DLTensor* state = ps.f32_state();
  if (state == nullptr) return;  // no FP8 layer on this stage
  if (c.tp.active())
    check(c.host,
          loom::comm_all_reduce(c.tp.comm, c.tp.group, state, LOOM_REDUCE_MAX, c.tp.stream));
  if (batch.size > 1)
    check(c.host,
          loom::comm_all_reduce(batch.comm, batch.group, state, LOOM_REDUCE_MAX, batch.stream));
  const loom_fp8_api* api = find_fp8(loom_backend_ref{c.be.api(), c.be.self()});
  loom::require(api != nullptr, "FP8 delayed scaling: the backend lends no " LOOM_EXT_FP8);
  for (const Param& p : ps.all()) {
    if (!p.fp8 || !p.fp8->delayed) continue;
    const loom::tp::Fp8History& h = *p.fp8->delayed;
    // rows [row0, row0 + rows) of the weight's (input, weight, gradient) histories, in `format`
    auto update = [&](int64_t row0, int64_t rows, DLDataType format) {
      View history(h.history, {rows, h.len}, row0 * h.len);
      View scale(h.scale, {rows}, row0);
      loom_fp8_update_args a{};
      a.struct_size = LOOM_FP8_UPDATE_ARGS_SIZE_V2_32;
      a.history = history.get();
      a.scale = scale.get();
      a.format = format;
      a.margin = f.margin;
      a.flags = f.most_recent ? LOOM_FP8_MOST_RECENT : 0u;
      check(c.host, api->delayed_update(c.be.self(), &a));
    };
    if (f.hybrid) {
      update(loom::tp::Fp8History::kInput, 2, loom_e4m3());
      update(loom::tp::Fp8History::kGrad, 1, loom_e5m2());
    } else {
      update(loom::tp::Fp8History::kInput, 3, loom_e4m3());
    }
  }
}

}  // namespace loom::layers
