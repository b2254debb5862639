// Loom layer library, activation recompute (Megatron's --recompute-granularity, -method,
// -num-layers and -modules; loom_model_create_args ABI 2.10): the layers' forward and backward
// of one slot with either
//   selective: every layer keeps what its backward needs except the chosen modules' outputs
//     (the attention core's output and lse, the MLP activation, the pre-norm outputs), whose
//     tensors alias one scratch set all layers share and backward refills (LayerActs::ensure,
//     the blocks' backward);
//   full: a recomputed layer keeps nothing but the residual stream; its activations live in a
//     scratch set for one group, and the group's forward runs again just before its last
//     layer's backward. uniform: the stage's layers in groups of recompute_num_layers; block:
//     the first recompute_num_layers layers, each its own group, the rest keep everything.
// The recomputation is the same calls on the same inputs and parameters, so losses and
// gradients are bitwise those without recompute (tests/training/recompute.sh). This file
// plans and allocates; the layer loop (layer_loop.cpp) asks it where each layer's
// activations live and when a group runs again.
#include <algorithm>

#include "loom/cpp/layers/decoder/decoder.hpp"

namespace loom::layers {

void DecoderModel::setup_recompute() {
  if (args_.struct_size < LOOM_MODEL_CREATE_ARGS_SIZE_V2_10) return;
  rc_granularity_ = args_.recompute_granularity;
  rc_method_ = args_.recompute_method;
  rc_layers_ = args_.recompute_num_layers;
  rc_modules_ = args_.recompute_modules;
  const std::string key = who_ + ": train.recompute_granularity = ";
  loom::require(rc_granularity_ == LOOM_RECOMPUTE_NONE ||
                    rc_granularity_ == LOOM_RECOMPUTE_SELECTIVE ||
                    rc_granularity_ == LOOM_RECOMPUTE_FULL,
                key + std::to_string(rc_granularity_) + " is unknown");
  if (rc_granularity_ == LOOM_RECOMPUTE_SELECTIVE) {
    loom::require(
        rc_modules_ != 0 && (rc_modules_ & ~7u) == 0,
        key + "\"selective\" needs train.recompute_modules (core_attn, mlp_act, layernorm)");
    // A post-norm layer's norm outputs are its residual stream, kept anyway.
    loom::require(!(rc_modules_ & LOOM_RECOMPUTE_LAYERNORM) || !opt_.post_norm,
                  who_ +
                      ": train.recompute_modules has layernorm; the post-norm layers "
                      "(norm_position = \"post\") keep their norm outputs as their residual "
                      "stream, so there is nothing to recompute (drop layernorm)");
  }
  if (rc_granularity_ == LOOM_RECOMPUTE_FULL)
    loom::require(rc_method_ == LOOM_RECOMPUTE_UNIFORM || rc_method_ == LOOM_RECOMPUTE_BLOCK,
                  key + "\"full\" needs train.recompute_method uniform or block");
  loom::require(rc_layers_ >= 1, who_ + ": train.recompute_num_layers = " +
                                     std::to_string(rc_layers_) + " must be at least 1");
}

int64_t DecoderModel::group_first(size_t l) const {
  if (rc_granularity_ != LOOM_RECOMPUTE_FULL) return -1;
  if (rc_method_ == LOOM_RECOMPUTE_BLOCK) return (int64_t)l < rc_layers_ ? (int64_t)l : -1;
  return (int64_t)l / rc_layers_ * rc_layers_;
}

int64_t DecoderModel::group_last(size_t l) const {
  const int64_t first = group_first(l);
  if (first < 0) return -1;
  if (rc_method_ == LOOM_RECOMPUTE_BLOCK) return first;
  return std::min<int64_t>(first + rc_layers_, (int64_t)layers_.size()) - 1;
}

// Slot activations for `tokens` tokens: a recomputed layer has none of its own.
void DecoderModel::allocate_acts(Slot& S, int64_t tokens) {
  S.acts.resize(layers_.size());
  if (rc_granularity_ == LOOM_RECOMPUTE_SELECTIVE) {
    rc_shared_.ensure(ctx_, opt_, tokens, rc_modules_, nullptr, true);
    for (auto& a : S.acts) a.ensure(ctx_, opt_, tokens, rc_modules_, &rc_shared_);
    return;
  }
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (group_first(l) >= 0) continue;
    S.acts[l].ensure(ctx_, opt_, tokens);
  }
  if (rc_granularity_ == LOOM_RECOMPUTE_FULL) {
    const size_t group = rc_method_ == LOOM_RECOMPUTE_BLOCK ? 1 : (size_t)rc_layers_;
    rc_group_.resize(std::min(group, layers_.size()));
    for (auto& a : rc_group_) a.ensure(ctx_, opt_, tokens);
  }
}

LayerActs& DecoderModel::layer_acts(Slot& S, size_t l) {
  const int64_t first = group_first(l);
  return first < 0 ? S.acts[l] : rc_group_[l - (size_t)first];
}

}  // namespace loom::layers
