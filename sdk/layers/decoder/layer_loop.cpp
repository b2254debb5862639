// Loom layer library, the layer loop of one slot: this stage's layers forward, then backward
// in reverse, each bracketed by its residency unit (unit_need/unit_done, residency.cpp) and
// each backward announcing its finished gradients (ABI 2.12). Under full recompute a group's
// forward runs again, from the group's input, just before its last layer's backward
// (recompute.cpp decides the groups and where their activations live).
#include "loom/cpp/layers/decoder/decoder.hpp"
#include "loom/cpp/layers/moe/moe.hpp"

namespace loom::layers {

void DecoderModel::layers_forward(Slot& S) {
  for (size_t l = 0; l < layers_.size(); ++l) {
    LayerActs& a = layer_acts(S, l);
    unit_need(1 + l, false);
    layers_[l]->forward(ctx_, opt_, S.s, S.res[l], S.res[l + 1], a, nullptr, 0);
    unit_done(1 + l, false);
    if (&a == &S.acts[l]) continue;
    // what the step reports of a recomputed MoE layer: its losses and expert loads
    LayerActs& kept = S.acts[l];
    kept.moe_aux = a.moe_aux;
    kept.moe_z = a.moe_z;
    if (a.moe) {
      if (!kept.moe) kept.moe = std::make_shared<MoeActs>();
      kept.moe->counts = a.moe->counts;
    }
  }
}

void DecoderModel::layers_backward(Slot& S) {
  for (size_t l = layers_.size(); l-- > 0;) {
    const int64_t first = group_first(l);
    if (first >= 0 && (int64_t)l == group_last(l)) {  // the group's forward again, from its input
      for (size_t j = (size_t)first; j <= l; ++j) unit_need(1 + j, true);
      for (size_t j = (size_t)first; j <= l; ++j)
        layers_[j]->forward(ctx_, opt_, S.s, S.res[j], S.res[j + 1], layer_acts(S, j), nullptr, 0);
    } else if (first < 0) {
      unit_need(1 + l, true);
    }
    layers_[l]->backward(ctx_, opt_, S.s, S.res[l], layer_acts(S, l), grads_);
    // its gradients are complete for this pass (ABI 2.12): at once, or after a split
    // backward's W has added them
    loom::weight_grad(ctx_.be, [this, l] { announce_layer(l); });
    unit_done(1 + l, true);
  }
}

}  // namespace loom::layers
