// Loom layer library: the checks a model's create makes of its configuration, as functions
// that need no instance, so that loom_plugin_descriptor.check_config (ABI 2.15) runs the very
// same ones for `loom validate`.
#include <algorithm>
#include <cstring>
#include <string>

#include "loom/cpp/layers/core/options.hpp"
#include "loom/cpp/layers/decoder/model_plugin.hpp"

namespace loom::layers {
namespace {
std::string s(int64_t v) { return std::to_string(v); }
}  // namespace

Ctx model_context(const loom_host* host, DLDataType dtype, const std::string& who) {
  Ctx c;
  c.host = host;
  c.be = loom::Backend(host);
  loom::check(host, host->get_attention(host->ctx, &c.attn));
  check_model_dtype(dtype, who);
  c.dtype = dtype;
  c.tp = loom::tp::Group::from_host(host);
  return c;
}

loom_model_create_args copy_create_args(const loom_model_create_args& a) {
  loom_model_create_args out{};
  std::memcpy(&out, &a, std::min(a.struct_size, sizeof out));
  return out;
}

void check_model_dtype(DLDataType dtype, const std::string& who) {
  // bf16/f16: mixed precision (parameter values and activations in that dtype; parameter
  // gradients, normalisation statistics and losses in f32).
  const bool ok = loom_dtype_eq(dtype, loom_f32()) || loom_dtype_eq(dtype, loom_f64()) ||
                  loom_dtype_eq(dtype, loom_bf16()) || loom_dtype_eq(dtype, loom_f16());
  loom::require(ok,
                who + ": dtype must be f32, bf16 or f16 (or f64 for tests); got code " +
                    s(dtype.code) + " bits " + s(dtype.bits),
                LOOM_ERR_UNIMPLEMENTED);
}

void check_expert_layout(Options& o, const loom_parallel_layout& l, int tp_size,
                         const std::string& who) {
  if (l.struct_size >= LOOM_PARALLEL_LAYOUT_SIZE_V2_9 && l.expert_tensor > 1) {
    const std::string et = "parallel.expert_tensor = " + s(l.expert_tensor);
    loom::require(o.num_experts > 0,
                  who + ": " + et +
                      " splits the experts of a mixture of experts; this model has "
                      "none (num_experts = 0)");
    loom::require(l.expert_tensor == tp_size,
                  who + ": " + et + " must be 1 or the tensor-parallel size (" + s(tp_size) + ")");
    loom::require(o.moe_ffn_hidden % l.expert_tensor == 0,
                  who + ": " + et + " splits each expert's moe_ffn_hidden_size = " +
                      s(o.moe_ffn_hidden) + ", which is not divisible");
    loom::require(o.moe_shared_hidden % l.expert_tensor == 0,
                  who + ": " + et +
                      " splits the shared expert's moe_shared_expert_intermediate_size = " +
                      s(o.moe_shared_hidden) + ", which is not divisible");
    o.etp = l.expert_tensor;
  }
  if (l.expert <= 1) return;
  const std::string ep = s(l.expert);
  loom::require(o.num_experts > 0, who + ": parallel.expert = " + ep +
                                       " splits the experts of a mixture of experts; this "
                                       "model has none (num_experts = 0)");
  loom::require(o.num_experts % l.expert == 0, who + ": num_experts = " + s(o.num_experts) +
                                                   " is not divisible by parallel.expert = " + ep);
  o.ep = l.expert;
  o.ep_rank = l.expert_rank;
}

void check_pipeline_placement(const Options& o, const loom_parallel_layout& l,
                              const std::string& who) {
  loom::require(
      !(o.tie_embeddings && o.stages > 1 && o.last() && l.pipeline > 1 && l.pipeline_rank == 0),
      who + ": the schedule places the last pipeline stage on rank 0 with the first " +
          "(a V), and the two copies of the tied embedding would share one process; " +
          "set model.tie_embeddings = false for zb-v and dualpipev",
      LOOM_ERR_UNIMPLEMENTED);
  loom::require(
      !(o.mtp_layers > 0 && o.stages > 1 && o.last() && l.pipeline > 1 && l.pipeline_rank == 0),
      who + ": the schedule places the last pipeline stage on rank 0 with the first (a V), " +
          "and multi-token prediction's copy of the embedding would share one process with " +
          "it; run mtp_num_layers with 1f1b, interleaved-1f1b or zb-h1",
      LOOM_ERR_UNIMPLEMENTED);
}

bool check_context_layout(const Options& o, const loom_parallel_layout& l, int64_t seq_len,
                          const std::string& who) {
  if (l.context <= 1) return false;
  const std::string cp = "parallel.context = " + s(l.context);
  loom::require(!o.bert && o.attention_window == 0,
                who + ": " + cp +
                    " runs causal GPT, Llama and mixture-of-experts models for now (no BERT or "
                    "sliding window)",
                LOOM_ERR_UNIMPLEMENTED);
  loom::require(o.mtp_layers == 0,
                who + ": " + cp +
                    " with mtp_num_layers is not implemented: the tokens each depth looks ahead "
                    "to sit in other context ranks' chunks",
                LOOM_ERR_UNIMPLEMENTED);
  loom::require(!o.has_kind('M'),
                who + ": " + cp +
                    " with Mamba layers is not implemented: each context rank's scan would "
                    "start from the state the ranks before it end with (Megatron passes it "
                    "along the ring); run hybrids with tensor, sequence and pipeline parallelism",
                LOOM_ERR_UNIMPLEMENTED);
  loom::require(seq_len % (2 * l.context) == 0,
                who + ": " + cp + " cuts each sample into 2 x " + s(l.context) +
                    " chunks; seq_len = " + s(seq_len) + " is not divisible");
  const bool a2a = l.struct_size >= LOOM_PARALLEL_LAYOUT_SIZE_V2_8 && l.cp_comm_type == LOOM_CP_A2A;
  if (a2a)
    loom::require(o.hq() % l.context == 0 && o.hkv() % l.context == 0,
                  who + ": " + cp + " with cp_comm_type = \"a2a\" splits this rank's " + s(o.hq()) +
                      " query and " + s(o.hkv()) + " key/value heads; both must be divisible");
  return a2a;
}

void check_t5_layout(const loom::tp::Group& tp, const loom_parallel_layout& l,
                     const std::string& who) {
  loom::require(!tp.sequence_parallel,
                who +
                    ": T5 runs tensor parallelism without sequence parallelism "
                    "(parallel.sequence_parallel = false)",
                LOOM_ERR_UNIMPLEMENTED);
  loom::require(l.context <= 1,
                who + ": context parallelism (parallel.context = " + s(l.context) +
                    ") runs causal decoder models only",
                LOOM_ERR_UNIMPLEMENTED);
}

void check_residency(const Options& o, int32_t residency, int virtual_stages,
                     const std::string& who) {
  if (residency == LOOM_RESIDENCY_NONE) return;
  const std::string key =
      who + (residency == LOOM_RESIDENCY_NOTIFY
                 ? ": completing the parameter all-gather per layer (parallel.overlap_param_gather)"
                 : ": a fully sharded strategy (parallel.data = \"fsdp\")");
  // What the units cannot carry yet, refused by name rather than computed wrong. Units are
  // numbered per model chunk: a rank of virtual stages holds two chunks' unit 1. Moving
  // gradients: a tied embedding across stages, whose two copies' gradients the embedding
  // group sums after the backward (summing them at the unit's end would block the last stage
  // inside its backward, before it sends its input gradient on); BERT's heads. (Context
  // parallelism: the shards are over data x context, whose reduce-scatter sums the context
  // ranks' partial gradients. Experts under expert parallelism: a unit's parameters of
  // another reduce group, sharded over the expert-data group. The tensor group's partial
  // gradients, sequence-parallel norms and QK-norm's under TP: summed at the unit's end.)
  auto refuse = [&](bool bad, const std::string& what) {
    loom::require(!bad, key + " with " + what + " is not implemented");
  };
  if (residency == LOOM_RESIDENCY_NOTIFY) {
    refuse(o.stages > 1, "pipeline parallelism (parallel.pipeline > 1)");
    return;
  }
  refuse(virtual_stages > 1, "virtual pipeline stages (parallel.virtual_stages > 1)");
  refuse(o.lora.on(), "LoRA (model.peft = \"lora\", whose frozen base the units do not hold)");
  refuse(o.stages > 1 && o.tie_embeddings,
         "a tied embedding across pipeline stages (model.tie_embeddings = true)");
  refuse(o.bert || o.post_norm, "BERT's post-norm layers and heads");
}

loom_error* check_model_config(const loom_host* host, const loom_config* cfg,
                               const loom_parallel_layout* layout, const void* create_args,
                               const std::string& who, Family family) {
  return loom::guard(host, [&] {
    const auto* given = static_cast<const loom_model_create_args*>(create_args);
    loom::require(layout && layout->struct_size >= LOOM_PARALLEL_LAYOUT_SIZE_V2 && given &&
                      given->struct_size >= LOOM_MODEL_CREATE_ARGS_SIZE_V2,
                  who + ": check_config: layout or create args missing or too old");
    loom_model_create_args a = *given;
    // Nothing below depends on the vocabulary's size, only on its being there.
    if (a.vocab_size <= 0) a.vocab_size = 1;
    loom::tp::Group tp;
    tp.size = layout->tensor > 0 ? layout->tensor : 1;
    tp.rank = layout->tensor_rank;
    tp.sequence_parallel = layout->sequence_parallel != 0 && tp.size > 1;
    check_model_dtype(a.dtype, who);
    if (family == Family::kT5) check_t5_layout(tp, *layout, who);
    Options o = parse_options(loom::Config(host, cfg), a, tp, who, family, layout->virtual_stages);
    if (family == Family::kT5) return;
    check_expert_layout(o, *layout, tp.size, who);
    check_context_layout(o, *layout, a.seq_len, who);
    check_pipeline_placement(o, *layout, who);
    if (a.struct_size >= LOOM_MODEL_CREATE_ARGS_SIZE_V2_13)
      check_residency(o, a.residency, layout->virtual_stages, who);
  });
}

}  // namespace loom::layers
