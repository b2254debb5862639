// Loom layer library, DecoderModel: its construction (the parameter list, the layer stack, the
// groups it joins), gradient readiness, and the batch arrays' upload.
#include "loom/cpp/layers/decoder/decoder.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "loom/cpp/layers/moe/moe.hpp"
#include "loom/cpp/layers/ops/context_parallel.hpp"

namespace loom::layers {

// ----- the model ---------------------------------------------------------------------------
DecoderModel::DecoderModel(const loom_host* host, const loom_config* cfg,
                           const loom_model_create_args& a, const BlockSpec& spec, std::string who,
                           Family family, std::unique_ptr<FamilyHooks> hooks)
    : who_(std::move(who)), spec_(&spec) {
  family_ = std::move(hooks);
  args_ = copy_create_args(a);  // an older host's lack the recompute
  ctx_ = model_context(host, a.dtype, who_);
  ctx_.sp = &sp_;
  ctx_.mla = &mla_;
  opt_ = parse_options(loom::Config(host, cfg), a, ctx_.tp, who_, family,
                       host_layout(host).virtual_stages);
  join_expert_group(host);
  join_context_group(host);
  // The expert loads of a step, and delayed FP8 scaling's amaxes, span the whole global batch.
  if (opt_.moe_expert_bias || opt_.fp8.delayed()) {
    const loom_parallel_layout l = host_layout(host);
    if (l.data * l.context > 1)
      batch_group_ = join_group(host, ctx_.be, LOOM_GROUP_DATA_CONTEXT, l.data * l.context);
    // An expert's amaxes span the ranks that hold it: data x context without expert
    // parallelism, the expert-data group (data x context / EP) with it.
    expert_batch_group_ = batch_group_;
    if (opt_.fp8.delayed() && opt_.ep > 1) {
      const int size = l.data * l.context / (int)opt_.ep;
      expert_batch_group_ =
          size > 1 ? join_group(host, ctx_.be, LOOM_GROUP_EXPERT_DATA, size) : ProcessGroup{};
    }
  }
  if (opt_.num_experts > 0) {  // the loss terms, then the per-expert statistics
    for (int64_t l = 0; l < opt_.n_layer; ++l)
      if (opt_.is_moe_layer(l))
        for (int64_t e = 0; e < opt_.num_experts; ++e)
          moe_load_names_.push_back("moe_load.h" + std::to_string(l) + ".e" + std::to_string(e));
    if (opt_.mtp_moe())  // multi-token prediction's depths after the layers (moe_acts' order)
      for (int64_t k = 0; k < opt_.mtp_layers; ++k)
        for (int64_t e = 0; e < opt_.num_experts; ++e)
          moe_load_names_.push_back("moe_load.mtp" + std::to_string(k) + ".e" + std::to_string(e));
    loss_names_.assign(std::begin(kMoeLossNames), std::end(kMoeLossNames));
    for (const std::string& n : moe_load_names_) loss_names_.push_back(n.c_str());
    losses_.resize(loss_names_.size());
  }
  if (opt_.dpo_beta > 0) {  // DPO's terms in place of the LM's (parse_preference refuses MoE, MTP)
    loss_names_.assign(std::begin(kPreferenceLossNames), std::end(kPreferenceLossNames));
    losses_.resize(loss_names_.size());
  }
  if (opt_.mtp_layers > 0) {  // its term last, after the expert loads
    if (loss_names_.empty()) loss_names_.push_back(kLossNames[0]);
    loss_names_.push_back("mtp");
    losses_.resize(std::max(losses_.size(), loss_names_.size()));
  }
  if (opt_.post_norm) spec_ = &kPostNormBlock;
  if (ctx_.tp.active())
    loom::require(ctx_.be.ops().struct_size >= LOOM_OPS_SIZE_V2,
                  who_ +
                      ": tensor parallelism needs a backend with the ABI 1.1 ops "
                      "(vocab_ce_stats, vocab_ce_backward)",
                  LOOM_ERR_UNIMPLEMENTED);
  // the tied embedding's copies, or multi-token prediction's copy of wte on the last stage
  if (opt_.stages > 1 && (opt_.tie_embeddings || opt_.mtp_layers > 0) &&
      (opt_.first() || opt_.last())) {
    loom::check(host, host->get_comm(host->ctx, &comm_));
    loom::check(host, host->get_group(host->ctx, LOOM_GROUP_EMBEDDING, &embedding_group_));
  }
  setup_recompute();  // before build, which may allocate the first slot
  setup_residency();
  build();
  plan_grad_ready();
}

// ABI 2.12's gradient readiness: the get_param index runs of each layer's parameters, which
// that layer's backward completes. Left out: buffers (no gradient) and the tensor- or
// sequence-parallel partial ones, which finish_grads still sums over the tensor group. The
// embedding and the head are never announced (the tied embedding gets its last contribution there,
// or from another stage): the host reduces them after finish_grads.
void DecoderModel::plan_grad_ready() {
  if (args_.struct_size < LOOM_MODEL_CREATE_ARGS_SIZE_V2_12 || args_.grad_ready == nullptr) return;
  ready_runs_.resize(layers_.size());
  std::vector<Param>& all = params_.all();
  for (size_t l = 0; l < layers_.size(); ++l) {
    const std::string prefix = "h." + std::to_string(opt_.layer0 + (int64_t)l) + ".";
    for (size_t i = 0; i < all.size(); ++i) {
      const Param& p = all[i];
      if (p.buffer || p.frozen || p.sp_partial || p.tp_partial ||
          p.name.compare(0, prefix.size(), prefix) != 0)
        continue;
      auto& runs = ready_runs_[l];
      if (!runs.empty() && runs.back().first + runs.back().second == (int64_t)i)
        ++runs.back().second;
      else
        runs.emplace_back((int64_t)i, 1);
    }
  }
}

void DecoderModel::announce_layer(size_t l) const {
  if (ready_runs_.empty()) return;
  for (const auto& [first, count] : ready_runs_[l])
    args_.grad_ready(args_.grad_ready_user, first, count);
}

// Expert parallelism (parallel.expert > 1): this rank's slab of every MoE layer's experts,
// and the group its tokens are dispatched over.
void DecoderModel::join_expert_group(const loom_host* host) {
  check_expert_layout(opt_, host_layout(host), ctx_.tp.size, who_);
  if (opt_.ep > 1) ctx_.ep = join_group(host, ctx_.be, LOOM_GROUP_EXPERT, opt_.ep);
}

// Context parallelism (parallel.context > 1): this rank's chunks of every sample, and the
// ring its keys and values go round (context_parallel.hpp).
void DecoderModel::join_context_group(const loom_host* host) {
  const loom_parallel_layout l = host_layout(host);
  ctx_.cp_a2a = check_context_layout(opt_, l, args_.seq_len, who_);
  check_pipeline_placement(opt_, l, who_);
  if (l.context <= 1) return;
  loom::require(ctx_.cp_a2a || (ctx_.attn.api->struct_size >= LOOM_ATTENTION_API_SIZE_V2_7 &&
                                ctx_.attn.api->merge != nullptr),
                who_ + ": parallel.context = " + std::to_string(l.context) +
                    " merges partial attention with the attention plugin's merge (ABI 2.7); "
                    "this one has none (attention/reference and attention/flash-cpu have it)",
                LOOM_ERR_UNIMPLEMENTED);
  ctx_.cp = join_group(host, ctx_.be, LOOM_GROUP_CONTEXT, l.context);
}

// Layer l's kind: the model's, or a MoE layer's where the options put one.
const BlockSpec& DecoderModel::layer_spec(int64_t l) const {
  if (!opt_.hybrid.empty()) return hybrid_block(opt_.layer_kind(l));
  return opt_.is_moe_layer(l) ? kMoeBlock : *spec_;
}

// Declares this stage's parameters (local shards) in HF GPT-2 order, allocates them, and
// fills the layer slots. Names keep the global layer numbers.
void DecoderModel::build() {
  const Options& o = opt_;
  const int64_t C = o.n_embd, tp = o.tp;
  const bool sp = ctx_.tp.sequence_parallel;
  ParamStore& ps = params_;
  ParamDeclarer d(o, ps, sp);
  const double std = d.std;
  const int64_t vrows = o.padded_vocab / tp;
  if (o.first()) {
    ps.add("wte", {vrows, C}, 1, 0, Init::kNormal, std);
    if (o.learned_positions())
      ps.add("wpe", {o.max_seq_len, C}, 1, -1, Init::kNormal, std).sp_partial = sp;
    if (o.num_tokentypes > 0)
      ps.add("tokentype", {o.num_tokentypes, C}, 1, -1, Init::kNormal, std).sp_partial = sp;
    if (o.post_norm) d.norm("emb_ln");
  }
  for (int64_t l = o.layer0; l < o.layer1; ++l) layer_spec(l).declare(d, "h." + std::to_string(l));
  if (o.last()) {
    if (!o.post_norm) d.norm("ln_f");
    const bool lm = !family_ || family_->lm_head();
    if (lm && !o.tie_embeddings) {
      ps.add("lm_head.weight", {vrows, C}, 1, 0, Init::kNormal, std);
    } else if (lm && !o.first()) {  // the head's own copy of the tied embedding (Megatron's)
      ps.add("wte", {vrows, C}, 1, 0, Init::kNormal, std).pipeline_duplicate = 1;
    }
    if (family_) family_->declare(o, ps, std, vrows);  // BERT's heads, the classifier
    if (o.mtp_layers > 0) mtp_declare(d);
  }
  ps.add_fp8_state(o.fp8);  // last: the parameters before keep their get_param indices
  if (o.lora.on()) ps.freeze_base();
  assign_units();
  ps.allocate(ctx_);
  ps.link_lora(o.lora);
  ps.link_fp8(o.fp8);
  layers_.resize((size_t)(o.layer1 - o.layer0));
  for (size_t u = 0; u <= layers_.size(); ++u) make_unit(u);

  const int64_t N = args_.micro_batch * args_.seq_len / ctx_.cp.size;  // this rank's tokens
  grads_.ensure(ctx_, o, N);
  if (sp) {
    sp_.y_full = ctx_.alloc({N, C});
    sp_.x_full = ctx_.alloc({N, C});
    sp_.dy_full = ctx_.alloc({N, C});
    sp_.dx_full = ctx_.alloc({N, C});
  }
  if (ctx_.tp.active() && o.first()) sp_.picked = ctx_.alloc({N, C});
  slot(0);  // the first slot up front: a single-stage run allocates everything at create
}

void DecoderModel::get_param(size_t i, loom_model_param* out) {
  // The tied embedding is one tensor on the first stage and a copy on the last.
  // (and multi-token prediction's copy on the last stage of a pipeline)
  const bool tied = (opt_.tie_embeddings || (opt_.mtp_layers > 0 && opt_.stages > 1)) &&
                    i < params_.size() && params_[i].name == "wte";
  params_.describe(i, out, who_, tied ? "embedding" : nullptr);
}

void DecoderModel::zero_grad() { params_.zero_grads(ctx_); }

void DecoderModel::upload_ids(Tensor& dst, const char* name, const int32_t* src, int64_t n,
                              bool allow_ignore) {
  View v = view(dst, {n});
  if (device_arrays_ != nullptr && name != nullptr) {  // the host checked them (model.h)
    for (size_t k = 0; k < device_mb_->num_arrays; ++k)
      if (device_mb_->names[k] && std::strcmp(device_mb_->names[k], name) == 0) {
        const DLTensor* on_device = &device_arrays_->arrays[k];
        loom::require(
            loom_tensor_numel(on_device) == n && loom_dtype_eq(on_device->dtype, loom_i32()),
            who_ + ": " LOOM_EXT_MICROBATCH_DEVICE "'s " + name + " is not " + std::to_string(n) +
                " i32 ids");
        ctx_.call(&loom_ops::copy, v.get(), on_device);
        return;
      }
    loom::require(false, who_ + ": " LOOM_EXT_MICROBATCH_DEVICE " has no array " + name);
  }
  // A clear error instead of an out-of-range read.
  for (int64_t i = 0; i < n; ++i)
    loom::require((src[i] >= 0 && src[i] < opt_.vocab) || (allow_ignore && src[i] == -1),
                  std::string(who_ + ": ") + (allow_ignore ? "target" : "token") + " id " +
                      std::to_string(src[i]) + " at position " + std::to_string(i) +
                      " is outside the vocabulary [0, " + std::to_string(opt_.vocab) + ")");
  loom::check(ctx_.host,
              ctx_.be.api()->from_host(ctx_.be.self(), v.get(), src, (size_t)n * sizeof(int32_t)));
}

void DecoderModel::upload_positions(Tensor& dst, const Step& s, std::vector<int32_t>* sent) {
  pos_host_.resize(s.N());
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)  // under context parallelism this rank's chunks'
      pos_host_[b * s.T + t] = (int32_t)(s.start(b) + cp_position(ctx_.cp, s.T / 2, t));
  if (sent != nullptr && *sent == pos_host_) return;
  View v = view(dst, {s.N()});
  loom::check(ctx_.host, ctx_.be.api()->from_host(ctx_.be.self(), v.get(), pos_host_.data(),
                                                  pos_host_.size() * sizeof(int32_t)));
  if (sent != nullptr) *sent = pos_host_;
}

void DecoderModel::bind_device_batch(const loom_microbatch& mb, bool per_token) {
  device_mb_ = nullptr, device_arrays_ = nullptr;
  const auto* ext = reinterpret_cast<const loom_microbatch_device*>(
      loom_ext_find(mb.ext, LOOM_EXT_MICROBATCH_DEVICE));
  if (ext == nullptr) return;
  loom::require(ext->base.struct_size >= LOOM_MICROBATCH_DEVICE_SIZE_V1 &&
                    (ext->arrays != nullptr || mb.num_arrays == 0),
                who_ + ": " LOOM_EXT_MICROBATCH_DEVICE " needs its arrays");
  // What reads the host's ids for device work, which a replayed step would not see again.
  const char* why = ctx_.cp.size > 1          ? "context parallelism slices them"
                    : ctx_.tp.active()        ? "the vocabulary-parallel embedding sorts them"
                    : family_ != nullptr      ? "this family reads its own arrays"
                    : opt_.mtp_layers > 0     ? "multi-token prediction shifts them"
                    : opt_.num_experts > 0    ? "the experts' routing is read on the host"
                    : opt_.num_tokentypes > 0 ? "token types are uploaded"
                    : opt_.dpo_beta > 0       ? "DPO's rows are the host's"
                    : per_token               ? "per-token statistics are the host's"
                    : loom_microbatch_find(&mb, LOOM_ARRAY_POSITIONS)
                        ? "packed documents are read there"
                        : nullptr;
  if (why != nullptr)
    throw loom::Error(
        LOOM_ERR_UNIMPLEMENTED,
        who_ + ": " LOOM_EXT_MICROBATCH_DEVICE " (a replayed step, train.cuda_graph): " + why +
            " on the host");
  device_mb_ = &mb, device_arrays_ = ext;
}

// Megatron / llm.c convention: 6 FLOPs per matmul parameter per token (forward 2, backward
// 4), counting the LM head once (over the real vocabulary) and no embedding lookups, plus
// attention scores and weighted sum: 12 * n_layer * (n_head * head_dim) * seq_len, without
// halving for the causal mask (6 per score and per weighted value: q's and v's head sizes).
double DecoderModel::flops_per_token() const {
  const Options& o = opt_;
  // the whole model's, whatever this rank holds (global extents, all layers)
  const double C = (double)o.n_embd, q = (double)(o.n_head * o.head_dim);
  const double kv = (double)(o.n_kv_head * o.head_dim), F = (double)o.ffn_hidden;
  double attn = C * (q + 2 * kv) + q * C;
  // MLA: the down- and up-projections and c_proj over the heads' values; the scores over q's
  // head size, the weighted sum over v's
  double att_width = 2 * q;
  if (o.mla) {
    const double H = (double)o.n_head, dq = (double)o.head_dim, dv = (double)o.v_head_dim;
    const double r = (double)o.kv_lora_rank, qr = (double)o.q_lora_rank;
    attn = (qr > 0 ? C * qr + qr * H * dq : C * H * dq) + C * (r + (double)o.qk_pos_dim) +
           r * H * ((double)o.qk_head_dim + dv) + H * dv * C;
    att_width = H * (dq + dv);
  }
  const double mlp = C * (o.gated() ? 2 * F : F) + F * C;
  // a MoE layer: the router, and the k experts each token visits (Megatron's "active"
  // parameters), dropped choices included
  const double Fe = (double)o.moe_ffn_hidden, E = (double)o.num_experts;
  const double Fs = (double)o.moe_shared_hidden;
  const double moe = C * E + (double)o.moe_router.topk * (C * (o.gated() ? 2 * Fe : Fe) + Fe * C) +
                     C * (o.gated() ? 2 * Fs : Fs) + Fs * C;
  // a Mamba-2 layer: in_proj and out_proj, and the scan counted as the state's multiply-adds
  // (its update and its read-out, 2 per state element) as if they were weights
  const double di = (double)(o.mamba_heads * o.mamba_head_dim);
  const double gs = (double)(o.mamba_groups * o.mamba_state);
  const double mamba =
      C * (2 * di + 2 * gs + (double)o.mamba_heads) + di * C + 2 * di * (double)o.mamba_state;
  double matmul = (double)o.vocab * C;
  int64_t attention_layers = 0;
  for (int64_t l = 0; l < o.n_layer; ++l) {
    const char kind = o.layer_kind(l);
    const bool attends = kind == 0 || kind == '*';
    attention_layers += attends;
    if (attends) matmul += attn;
    if (kind == 'M') matmul += mamba;
    if (kind == 0 || kind == '-' || kind == 'E') matmul += o.is_moe_layer(l) ? moe : mlp;
  }
  // multi-token prediction: each depth's eh_proj, a layer of the last one's kind and the head
  matmul +=
      (double)o.mtp_layers * (2 * C * C + attn + (o.mtp_moe() ? moe : mlp) + (double)o.vocab * C);
  attention_layers += o.mtp_layers;
  // Each query attends to min(T, window) keys under a sliding window.
  const int64_t keys =
      o.attention_window > 0 ? std::min(args_.seq_len, o.attention_window) : args_.seq_len;
  return 6.0 * matmul + 6.0 * (double)attention_layers * att_width * (double)keys;
}

}  // namespace loom::layers
