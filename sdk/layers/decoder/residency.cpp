// Loom layer library, parameter residency (loom_model_create_args ABI 2.13; the host's fully
// sharded strategy, parallel.data = "fsdp", or overlap_param_gather): the parameters form
// units, unit 0 the embedding, final norm and head, unit 1 + l layer l of this stage. Before
// every forward or backward of a unit the host is told (unit_needed), so that it can
// complete an all-gather it started. Under LOOM_RESIDENCY_GRADS a unit's gradients exist from
// the start of its backward to its end (ZeRO-2); under LOOM_RESIDENCY_PARAMS its values too,
// from just before each forward or backward that reads them to just after (ZeRO-3). The host
// fills the values (unit_needed, fill 1) and takes the gradients (unit_grads); in between the
// model computes exactly as it always does, so the numbers change only by the order of the
// data-parallel sums.
#include <string>

#include "loom/cpp/layers/decoder/decoder.hpp"

namespace loom::layers {

void DecoderModel::setup_residency() {
  if (args_.struct_size < LOOM_MODEL_CREATE_ARGS_SIZE_V2_13 ||
      args_.residency == LOOM_RESIDENCY_NONE)
    return;
  const int32_t r = args_.residency;
  loom::require(
      r == LOOM_RESIDENCY_NOTIFY || r == LOOM_RESIDENCY_GRADS || r == LOOM_RESIDENCY_PARAMS,
      who_ + ": residency " + std::to_string(r) + " is unknown");
  loom::require(args_.unit_needed != nullptr && (r == LOOM_RESIDENCY_NOTIFY || args_.unit_grads),
                who_ + ": a residency needs the host's unit_needed and unit_grads");
  check_residency(opt_, r, host_layout(ctx_.host).virtual_stages, who_);
  params_.set_residency(r);
}

// Every parameter's unit, by name: "h.<l>." is layer l's, the rest (embedding, final norm,
// head) unit 0; buffers none.
void DecoderModel::assign_units() {
  for (Param& p : params_.all()) {
    p.unit = p.buffer ? -1 : 0;
    if (p.buffer || p.name.compare(0, 2, "h.") != 0) continue;
    const int64_t l = std::stoll(p.name.substr(2));
    p.unit = (int32_t)(1 + l - opt_.layer0);
  }
}

// The modules that view unit u's parameters, made (again) from the current views.
void DecoderModel::make_unit(size_t u) {
  const Options& o = opt_;
  ParamStore& ps = params_;
  if (u > 0) {
    const int64_t l = o.layer0 + (int64_t)u - 1;
    layers_[u - 1] = layer_spec(l).make(o, ps, "h." + std::to_string(l));
    return;
  }
  if (o.first()) emb_ = Embedding::make(o, ps, ctx_);
  if (o.first() && o.post_norm) emb_ln_ = Norm::make(o, ps, "emb_ln");
  if (o.last()) {
    if (!o.post_norm) ln_f_ = Norm::make(o, ps, "ln_f");
    if (!family_ || family_->lm_head()) {
      head_ = LmHead::make(o, ps, ctx_);
      if (!family_) head_.pad_logits(ctx_);  // BERT adds its own bias over `vocab` columns
      ce_.shard = head_.shard;
    }
    if (family_) family_->make(o, ps, head_.vocab);
    if (o.mtp_layers > 0) mtp_make();
  }
}

void DecoderModel::unit_need(size_t u, bool backward) {
  if (params_.residency() == LOOM_RESIDENCY_NONE || u >= params_.num_units()) return;
  const bool fill = !params_.has_values(u);
  if (fill) params_.alloc_values(ctx_, u);
  const bool grads = backward && !params_.has_grads(u);
  if (grads) params_.alloc_grads(ctx_, u);
  if (fill || grads) make_unit(u);
  loom::check(ctx_.host, args_.unit_needed(args_.residency_user, (int32_t)u, fill ? 1 : 0));
}

void DecoderModel::announce_head(bool backward) {
  if (params_.residency() == LOOM_RESIDENCY_NOTIFY) unit_need(0, backward);
}

void DecoderModel::unit_done(size_t u, bool backward) {
  if (params_.residency() < LOOM_RESIDENCY_GRADS || u >= params_.num_units()) return;
  if (backward) {
    // The unit's partial gradients summed over the tensor group first: the host takes them
    // now, where finish_grads sums them when nothing moves them. The same sums per
    // micro-batch instead of once per step: only the order of the additions differs.
    for (Param& p : params_.all())
      if (p.unit == (int32_t)u && tp_summed(p)) ctx_.tp.all_reduce(p.grad.get());
    loom::check(ctx_.host, args_.unit_grads(args_.residency_user, (int32_t)u));
    params_.free_grads(u);
  }
  if (!held_ && params_.residency() == LOOM_RESIDENCY_PARAMS) params_.free_values(u);
}

// hold: every unit's values resident until released. Release also frees the gradients the
// model was created with: from then on they exist only inside a backward.
void DecoderModel::hold_params(bool hold) {
  if (params_.residency() == LOOM_RESIDENCY_NONE) return;
  held_ = hold;
  for (size_t u = 0; u < params_.num_units(); ++u) {
    if (hold) {
      unit_need(u, false);
      continue;
    }
    if (params_.residency() >= LOOM_RESIDENCY_GRADS) params_.free_grads(u);
    if (params_.residency() == LOOM_RESIDENCY_PARAMS) params_.free_values(u);
  }
}

}  // namespace loom::layers
