// Loom layer library, FP8 training's options: the host's loom.fp8-training/1 (precision.fp8,
// model.h) on the create args into Options::fp8, and what it does not cover yet, refused by
// name; which weights get FP8 GEMMs (ParamStore::link_fp8) and delayed scaling's state
// (ParamStore::add_fp8_state) and step end. The GEMMs: loom/cpp/fp8_linear.hpp.
#include <memory>
#include <string>
#include <vector>

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
  if (family == Family::kT5) {  // each stack keeps its own first and last layers
    o.fp8.dec_end = o.dec_layers - f.layers_at_end_bf16;
    loom::require(first < o.fp8.dec_end, who + ": precision.fp8_first_last_bf16 keeps " +
                                             std::to_string(f.layers_at_start_bf16) + " + " +
                                             std::to_string(f.layers_at_end_bf16) + " of the " +
                                             std::to_string(o.dec_layers) +
                                             " decoder layers in dtype: none left in FP8");
  }
  if (f.recipe != LOOM_FP8_RECIPE_DELAYED) return;
  loom::require(f.amax_history_len >= 1, who +
                                             ": precision.fp8_amax_history_len must be >= 1, not " +
                                             std::to_string(f.amax_history_len));
  o.fp8.history_len = f.amax_history_len;
  o.fp8.most_recent = f.amax_most_recent != 0;
}

// Whether weight p gets FP8 GEMMs: a linear layer's matrix of transformer layer l ("h.<l>.",
// T5's "enc.h.<l>." and "dec.h.<l>.") with c.first <= l < the stack's end, not an adapter's
// (its own GEMMs keep the compute dtype).
static bool fp8_weight(const Param& p, const Fp8Config& c) {
  if (!p.linear || p.adapter) return false;
  const bool dec = p.name.starts_with("dec.h.");
  const size_t at = dec || p.name.starts_with("enc.h.") ? 6 : p.name.starts_with("h.") ? 2 : 0;
  if (at == 0) return false;  // embeddings, head, MTP: the compute dtype
  const int64_t l = std::stoll(p.name.substr(at, p.name.find('.', at) - at));
  return l >= c.first && l < (dec ? c.dec_end : c.end);
}

static std::string fp8_base(const std::string& weight) {
  const std::string w = ".weight";
  const bool suffixed = weight.size() > w.size() && weight.ends_with(w);
  return suffixed ? weight.substr(0, weight.size() - w.size()) : weight;
}

void ParamStore::add_fp8_state(const Fp8Config& c) {
  if (!c.delayed()) return;
  std::vector<size_t> weights;
  for (size_t i = 0; i < params_.size(); ++i)
    if (fp8_weight(params_[i], c)) weights.push_back(i);
  for (const size_t i : weights) {
    // an expert weight (E/EP, out, in): a history and scales per local expert, split over the
    // expert group as it is (its index taken now: add may move params_)
    const int64_t experts = params_[i].ep_size > 0 ? params_[i].shape[0] : 0;
    const int32_t ep_size = params_[i].ep_size, ep_rank = params_[i].ep_rank;
    const std::string b = fp8_base(params_[i].name);
    auto lead = [&](std::vector<int64_t> shape) {
      if (experts > 0) shape.insert(shape.begin(), experts);
      return shape;
    };
    for (const bool history : {true, false}) {
      Param& s = history
                     ? add(b + std::string(loom::kFp8HistorySuffix), lead({3, c.history_len}), 0,
                           -1, Init::kZeros)
                     // scales of 1 at first, as Transformer Engine's
                     : add(b + std::string(loom::kFp8ScaleSuffix), lead({3}), 0, -1, Init::kOnes);
      s.buffer = s.f32 = true;
      s.ep_size = ep_size;
      s.ep_rank = ep_rank;
    }
  }
}

void ParamStore::link_fp8(const Fp8Config& c) {
  if (!c.on()) return;
  auto gemms = std::make_shared<loom::tp::Fp8Linear>();
  gemms->recipe = c.recipe;
  gemms->hybrid = c.hybrid;
  gemms->margin = c.margin;
  // The GEMMs of one weight (or of local expert e's rows of an expert weight): shared, or
  // with their own views of the delayed state.
  auto linked = [&](const std::string& base, bool expert, int64_t e) {
    if (!c.delayed()) return std::shared_ptr<const loom::tp::Fp8Linear>(gemms);
    auto state = std::make_shared<loom::tp::Fp8History>();
    const int64_t len = c.history_len, h0 = expert ? e * 3 * len : 0, s0 = expert ? e * 3 : 0;
    state->history = View(at(base + std::string(loom::kFp8HistorySuffix)).value, {3, len}, h0);
    state->scale = View(at(base + std::string(loom::kFp8ScaleSuffix)).value, {3}, s0);
    state->len = len;
    state->recording = fp8_recording_;
    auto own = std::make_shared<loom::tp::Fp8Linear>(*gemms);
    own->delayed = std::move(state);
    return std::shared_ptr<const loom::tp::Fp8Linear>(std::move(own));
  };
  for (Param& p : params_) {
    if (!fp8_weight(p, c)) continue;
    const std::string b = fp8_base(p.name);
    if (p.ep_size == 0) {
      p.fp8 = linked(b, false, 0);
      continue;
    }
    p.fp8_experts.clear();
    for (int64_t e = 0; e < p.shape[0]; ++e) p.fp8_experts.push_back(linked(b, true, e));
  }
}

// Every rank of the tensor group casts shards of the same tensors, and every rank of `batch`
// other micro-batches of the same step: each tensor's amax of the step is the largest of
// theirs (Transformer Engine's amax reduction), and with it each rank derives the scale one
// rank would. The histories' other slots and the scales are equal on those ranks already
// (they start so, are loaded replicated, and change only here), so MAX over the whole f32
// state, padding included, leaves them as they are: one reduction per group. An expert's
// state lives on the ranks that hold the expert: its tensor group, and the expert-data group
// (`expert_batch`) across data x context, whose ranks run it on the other tokens.
void update_fp8_scales(const Ctx& c, ParamStore& ps, const Fp8Config& f, const ProcessGroup& batch,
                       const ProcessGroup& expert_batch) {
  for (const bool experts : {false, true}) {
    DLTensor* state = ps.f32_state(experts);
    if (state == nullptr) continue;  // no FP8 layer (of that kind) on this stage
    if (c.tp.active())
      check(c.host,
            loom::comm_all_reduce(c.tp.comm, c.tp.group, state, LOOM_REDUCE_MAX, c.tp.stream));
    const ProcessGroup& g = experts ? expert_batch : batch;
    if (g.size > 1)
      check(c.host, loom::comm_all_reduce(g.comm, g.group, state, LOOM_REDUCE_MAX, g.stream));
  }
  const loom_fp8_api* api = find_fp8(loom_backend_ref{c.be.api(), c.be.self()});
  loom::require(api != nullptr, "FP8 delayed scaling: the backend lends no " LOOM_EXT_FP8);
  // rows [row0, row0 + rows) of one weight's (input, weight, gradient) histories, in `format`
  auto update = [&](const loom::tp::Fp8History& h, int64_t row0, int64_t rows, DLDataType format) {
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
  auto update_all = [&](const loom::tp::Fp8History& h) {
    if (f.hybrid) {
      update(h, loom::tp::Fp8History::kInput, 2, loom_e4m3());
      update(h, loom::tp::Fp8History::kGrad, 1, loom_e5m2());
    } else {
      update(h, loom::tp::Fp8History::kInput, 3, loom_e4m3());
    }
  };
  for (const Param& p : ps.all()) {
    if (p.fp8 && p.fp8->delayed) update_all(*p.fp8->delayed);
    for (const auto& e : p.fp8_experts)
      if (e->delayed) update_all(*e->delayed);
  }
}

}  // namespace loom::layers
