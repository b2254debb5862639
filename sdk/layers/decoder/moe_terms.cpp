// Loom layer library, DecoderModel: a mixture of experts' loss terms and expert loads. Under
// pipeline parallelism each stage reports the terms of the layers it holds (with
// loom.stage-losses/1, model.h), and the schedule adds them up: the balancing and z losses
// are sums over layers, each expert-load statistic belongs to one layer's stage.
#include <algorithm>
#include <string>
#include <vector>

#include "loom/cpp/comm.hpp"
#include "loom/cpp/layers/decoder/decoder.hpp"
#include "loom/cpp/layers/moe/moe.hpp"

namespace loom::layers {

// This stage's MoE layers' activations in parameter order: its layers', then (on the last
// stage, once their forward ran) multi-token prediction's depths' when they are MoE layers.
std::vector<const LayerActs*> DecoderModel::moe_acts(const Slot& S) const {
  std::vector<const LayerActs*> out;
  for (size_t l = 0; l < S.acts.size(); ++l)
    if (opt_.is_moe_layer(opt_.layer0 + (int64_t)l)) out.push_back(&S.acts[l]);
  if (opt_.mtp_moe())
    for (const MtpSlot& m : S.mtp)
      if (m.acts.moe) out.push_back(&m.acts);
  return out;
}

// losses_[1..]: the balancing (moe_aux) and z (moe_z) losses of this stage's layers (and its
// MTP depths'), then every MoE layer's share of its routed choices (the micro-batch's tokens x
// topk) that each expert kept, weight 0: this stage's layers' values, zero sum and count for
// the others'. The last stage counts the micro-batch for the two losses (count 1), the others
// add their sums only; an earlier stage's losses_[0] (the LM loss) is empty. Returns the
// number of terms.
size_t DecoderModel::moe_terms(const Slot& S, bool last) {
  const std::vector<const LayerActs*> acts = moe_acts(S);
  double aux = 0, z = 0;
  for (const LayerActs* la : acts) {
    aux += la->moe_aux;
    z += la->moe_z;
  }
  // Under context parallelism each rank's losses are its share of the micro-batch's (moe.cpp),
  // which the host sums over the context group: one rank counts the micro-batch, and the
  // weight is the whole micro-batch's tokens, as on one rank.
  const double w = (double)(S.n * ctx_.cp.size);
  const double count = last && ctx_.cp.rank == 0 ? 1.0 : 0.0;
  if (!last) losses_[0] = loom_loss{LOOM_LOSS_SIZE_V2, kMoeLossNames[0], 0.0, 0.0, 1.0};
  losses_[1] = loom_loss{LOOM_LOSS_SIZE_V2, kMoeLossNames[1], aux, count, w};
  losses_[2] = loom_loss{LOOM_LOSS_SIZE_V2, kMoeLossNames[2], z, count, w};
  for (size_t at = 3; at < loss_names_.size(); ++at)
    losses_[at] = loom_loss{LOOM_LOSS_SIZE_V2, loss_names_[at], 0.0, 0.0, 0.0};
  const double routed = (double)(S.n * opt_.moe_router.topk);
  const int64_t E = opt_.num_experts;
  size_t at = 3;  // the first load term of this stage's first MoE layer
  for (int64_t l = 0; l < opt_.layer0; ++l) at += opt_.is_moe_layer(l) ? (size_t)E : 0;
  for (const LayerActs* la : acts)
    for (int64_t e = 0; e < E; ++e, ++at)
      losses_[at] = loom_loss{LOOM_LOSS_SIZE_V2, loss_names_[at],
                              la->moe ? (double)la->moe->counts[(size_t)e] : 0.0, routed, 0.0};
  return loss_names_.size();
}

void DecoderModel::count_expert_loads(const Slot& S) {
  const size_t E = (size_t)opt_.num_experts;
  const std::vector<const LayerActs*> acts = moe_acts(S);
  if (expert_loads_.size() < acts.size() * E) expert_loads_.resize(acts.size() * E);
  for (size_t at = 0; at < acts.size(); ++at)
    for (size_t e = 0; e < E; ++e) expert_loads_[at * E + e] += (double)acts[at]->moe->counts[e];
}

// Megatron's aux-loss-free update (its finalize_model_grads): the step's loads summed over
// the ranks that split the global batch, so every layout moves the bias alike; then each
// expert's bias moves by the rate towards the mean load. Bias and loads stay on the host
// between the two downloads: E numbers per layer. A pipeline stage updates its own layers'.
void DecoderModel::update_expert_biases() {
  const int64_t E = opt_.num_experts;
  if (expert_loads_.empty()) return;  // no training forward this step (or no MoE layer here)
  sum_over(ctx_, batch_group_, expert_loads_);
  size_t at = 0;
  for (Param& bias : params_.all()) {        // the buffers, one per MoE layer (moe_acts' order)
    if (!bias.buffer || bias.f32) continue;  // (delayed FP8 scaling state: f32 buffers)
    std::vector<int64_t> load((size_t)E);
    for (int64_t e = 0; e < E; ++e)
      load[(size_t)e] = (int64_t)expert_loads_[at * (size_t)E + (size_t)e];
    update_expert_bias(ctx_, bias, load, opt_.moe_bias_rate);
    ++at;
  }
  std::fill(expert_loads_.begin(), expert_loads_.end(), 0.0);
}

}  // namespace loom::layers
