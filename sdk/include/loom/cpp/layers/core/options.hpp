// Loom layer library (loom/cpp/layers/decoder/decoder.hpp has the overview): the transformer's
// shape and its recipe keys.
#pragma once

#include <string>
#include <vector>

#include "loom/cpp/layers/core/context.hpp"

namespace loom::layers {

// The model family around the transformer layers: each plugin names its own.
enum class Family { kGpt, kBert, kBertClassifier, kT5 };

// A mixture of experts' router (moe/moe_router.hpp routes by it).
struct RouterConfig {
  int64_t experts = 8, topk = 2;
  std::string score = "softmax";           // "softmax" | "sigmoid"
  bool pre_softmax = false;                // softmax only: top-k after the softmax over all experts
  double capacity_factor = 0.0;            // <= 0: dropless
  int64_t num_groups = 0, group_topk = 0;  // group-limited routing (DeepSeek-V3); 0: off
  double topk_scaling_factor = 0.0;        // > 0: the combine weights times this
  std::string drop_policy = "probs";       // "probs" | "position"
};

// LoRA on the transformer's projections (model/gpt's peft keys, core/peft.cpp): adapters of
// `rank` on the targets, scaled by alpha / rank; every other parameter frozen.
struct LoraConfig {
  enum Target : uint32_t { kQkv = 1, kProj = 2, kFc1 = 4, kFc2 = 8 };
  int64_t rank = 0;  // 0: no LoRA (peft = "none")
  double alpha = 32.0;
  uint32_t targets = 0;  // Target bits
  bool on() const { return rank > 0; }
  bool targets_any(uint32_t t) const { return on() && (targets & t) != 0; }
  double scale() const { return alpha / (double)rank; }
};

// FP8 training (the host's loom.fp8-training/1, precision.fp8; core/fp8.cpp): the linear GEMMs
// of transformer layers [first, end) in FP8 by `recipe` (loom/cpp/fp8_linear.hpp).
struct Fp8Config {
  int32_t recipe = 0;  // LOOM_FP8_RECIPE_* (model.h); 0: off
  bool hybrid = true;  // gradients e5m2
  int32_t margin = 0;
  int64_t first = 0, end = 0;  // global layer indices (T5: of the encoder's stack)
  int64_t dec_end = 0;         // T5's decoder stack: its layers [first, dec_end)
  // delayed scaling: the amax history's length, and the scale from its newest amax alone
  // (Megatron's fp8_amax_compute_algo = "most_recent") rather than the window's largest
  int64_t history_len = 1;
  bool most_recent = true;
  bool on() const { return recipe != 0; }
  bool delayed() const { return recipe == LOOM_FP8_RECIPE_DELAYED; }
};

// ----- options (options.cpp) --------------------------------------------------------------
struct Options {
  int64_t n_layer = 12, n_head = 12, n_kv_head = 12, n_embd = 768, ffn_hidden = 3072;
  int64_t max_seq_len = 1024, pad_vocab_to = 128;
  // The block's slots, each a backend op kind (Megatron-Core's normalization and
  // activation_func/gated_linear_unit): the layers call the op of that kind and never branch
  // on it, so a new kind is a backend.h value and a recipe word.
  loom_norm_kind norm = LOOM_NORM_LAYER;   // "layernorm" | "rmsnorm"
  loom_act_kind act = LOOM_ACT_GELU_TANH;  // "gelu" | "swiglu"
  bool rope = false, bias = true, tie_embeddings = true;
  bool no_position = false;  // position = "none": neither wpe nor RoPE (Mamba hybrids)
  bool learned_positions() const { return !rope && !relative && !no_position; }
  double rope_theta = 10000.0, norm_eps = 1e-5, init_std = 0.02;
  int64_t attention_window = 0;  // > 0: sliding-window attention over this many positions
  // RoPE's frequency scaling (ops/rope.cpp): "none", Llama 3.1's "llama3" (factor, low and
  // high frequency factors, the original context) or "yarn" (factor, beta_fast/slow, the
  // original context, mscale and mscale_all_dim: DeepSeek-V3's, also MLA's softmax scale)
  std::string rope_scaling = "none";
  double rope_factor = 8.0, rope_low_freq = 1.0, rope_high_freq = 4.0;
  int64_t rope_original_max = 8192;
  double yarn_beta_fast = 32.0, yarn_beta_slow = 1.0, yarn_mscale = 1.0, yarn_mscale_all_dim = 0.0;
  // Qwen's attention (model/gpt): qk_norm normalises each head's q and k (the `norm` kind over
  // head_dim, weights q_norm/k_norm shared by the heads) before RoPE; qkv_bias gives c_attn a
  // bias (always when `bias`, alone with add_qkv_bias).
  bool qk_norm = false, qkv_bias = true;
  // DeepSeek's multi-head latent attention (model/gpt, ops/mla.hpp): queries from a
  // q_lora_rank latent (0: from the input), keys and values from a kv_lora_rank one; each
  // head's q and k of qk_head_dim + qk_pos_dim (head_dim), the last qk_pos_dim rotated (the
  // key's part shared by the heads), its v of v_head_dim padded to head_dim for the attention.
  bool mla = false;
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_head_dim = 0, qk_pos_dim = 0, v_head_dim = 0;
  // BERT (model/bert): bidirectional attention within each row's real tokens (the batch's
  // padding_mask), token-type embeddings, and on the last stage the LM head's transform
  // (dense, GELU, LayerNorm, output bias) and the pooler with the binary (SOP) head.
  bool bert = false, binary_head = false;
  // BERT's post-LN (norm_position = "post", the original BERT's): each layer normalises after
  // its residual adds (kPostNormBlock), the embeddings' sum is normalised (emb_ln), and there
  // is no final ln_f.
  bool post_norm = false;
  // model/bert-classifier: the pooler and a num_classes-way classifier on [CLS] instead of
  // the LM head (Megatron's Classification model, for MNLI)
  bool classifier = false;
  int64_t num_tokentypes = 0, num_classes = 0;
  // T5 (model/t5): an encoder of n_layer bidirectional layers and a decoder of dec_layers
  // causal layers with cross-attention, over encoder rows of seq_len and decoder rows of
  // dec_seq_len tokens. `bidirectional` marks the encoder's copy of the options.
  bool t5 = false, bidirectional = false;
  int64_t dec_layers = 0, dec_seq_len = 0;
  // T5's relative position bias (position = "relative", Megatron's
  // --position-embedding-type relative): no wpe; a (heads, buckets) table per stack
  bool relative = false;
  int64_t rel_buckets = 32, rel_max_distance = 128;
  // A mixture of experts (model/gpt, Megatron's --num-experts and --moe-*): num_experts > 0
  // makes the layers moe_layer_freq picks MoE layers (kMoeBlock) of num_experts experts of
  // moe_ffn_hidden columns, routed by moe_router.
  int64_t num_experts = 0, moe_ffn_hidden = 0;
  std::vector<uint8_t> moe_layers;  // (n_layer) 1: a MoE layer (moe_layer_freq's pattern)
  int64_t moe_shared_hidden = 0;    // a shared expert every token goes through (0: none)
  bool moe_shared_gate = false;     // its output scaled by sigmoid(x . shared.gate) (Qwen2-MoE)
  RouterConfig moe_router;
  double moe_aux_coeff = 0.0, moe_z_coeff = 0.0;
  std::string moe_balancing = "aux_loss";  // "aux_loss" | "seq_aux_loss" | "none"
  int64_t ep = 1, ep_rank = 0;  // expert parallelism: this rank holds experts [ep_rank*E/ep, ..)
  // Expert tensor parallelism (parallel.expert_tensor = tensor): each expert's MLP columns
  // split over the tensor group as a dense MLP's are; 1 = every expert whole on each rank.
  int64_t etp = 1;
  // DeepSeek-V3's aux-loss-free balancing (moe_router_enable_expert_bias): a per-expert bias
  // buffer added to the sigmoid scores for the top-k only, moved by moe_bias_rate after each
  // step towards the mean load.
  bool moe_expert_bias = false;
  double moe_bias_rate = 1e-3;
  // Multi-token prediction (model/gpt, Megatron's --mtp-num-layers, DeepSeek-V3's MTP): after
  // the last layer, mtp_layers depths each predict one token further ahead with a layer of
  // the model's kind, the embedding and head shared; their mean loss times mtp_scale joins the
  // objective as the term "mtp".
  int64_t mtp_layers = 0;
  double mtp_scale = 0.1;
  // A hybrid stack (model/gpt, Megatron's --hybrid-override-pattern): one character per
  // layer, each layer a single sublayer x + mixer(norm(x)) of kind 'M' (Mamba-2, ssm/mamba.hpp),
  // '*' (attention), '-' (MLP) or 'E' (a mixture of experts). Empty: every layer is the
  // transformer's attention then MLP.
  std::string hybrid;
  // Mamba-2's mixer (Megatron's --mamba-*): heads of mamba_head_dim channels in mamba_groups
  // groups sharing B and C, a state of mamba_state per channel, a causal convolution of
  // mamba_conv taps over x, B and C, and the scan's chunk length.
  int64_t mamba_heads = 0, mamba_head_dim = 64, mamba_groups = 8, mamba_state = 128;
  int64_t mamba_conv = 4, mamba_chunk = 128;
  LoraConfig lora;  // parameter-efficient finetuning (peft = "lora")
  Fp8Config fp8;    // precision.fp8 (core/fp8.cpp)
  // > 0: the objective is DPO's sigmoid loss with this beta in place of the LM loss (the host's
  // loom.preference/1 on the create args, train.objective = "dpo"; decoder/preference.cpp)
  double dpo_beta = 0.0;
  char layer_kind(int64_t l) const { return hybrid.empty() ? 0 : hybrid[(size_t)l]; }
  bool has_kind(char k) const { return hybrid.find(k) != std::string::npos; }
  // This tensor rank's extents of the mixer: heads and groups split over the group.
  int64_t m_heads() const { return mamba_heads / tp; }
  int64_t m_groups() const { return mamba_groups / tp; }
  int64_t m_inner() const { return m_heads() * mamba_head_dim; }                   // x, z, y
  int64_t m_conv_dim() const { return m_inner() + 2 * m_groups() * mamba_state; }  // x|B|C
  int64_t m_in_proj() const { return m_inner() + m_conv_dim() + m_heads(); }       // z|xBC|dt
  bool is_moe_layer(int64_t l) const {
    return num_experts > 0 && (size_t)l < moe_layers.size() && moe_layers[(size_t)l];
  }
  // Multi-token prediction's depths are layers of the last layer's kind (Megatron's MTP block
  // spec takes the decoder's last layer spec): a mixture of experts in DeepSeek-V3.
  bool mtp_moe() const { return mtp_layers > 0 && is_moe_layer(n_layer - 1); }
  bool causal() const { return !bert && !bidirectional; }
  // derived from the options and the create args
  int64_t head_dim = 64, vocab = 0, padded_vocab = 0;
  // Tensor parallelism: heads and MLP columns split over tp ranks. The accessors below give
  // this rank's local extents (the whole model's at tp = 1).
  int64_t tp = 1;
  int64_t hq() const { return n_head / tp; }
  int64_t hkv() const { return n_kv_head / tp; }
  int64_t ffn() const { return ffn_hidden / tp; }
  bool gated() const { return act == LOOM_ACT_SWIGLU; }           // c_fc holds [gate; up]
  bool norm_mean() const { return norm == LOOM_NORM_LAYER; }      // saves a mean (and has a bias)
  int64_t fc_out() const { return gated() ? 2 * ffn() : ffn(); }  // local c_fc rows
  int64_t q_dim() const { return hq() * head_dim; }
  int64_t kv_dim() const { return hkv() * head_dim; }
  // Pipeline: this model holds stage `stage` of `stages`, layers [layer0, layer1); the first
  // and last stages' layer counts when uneven (loom::layout::StageSplit; 0 = even).
  int64_t stage = 0, stages = 1, layer0 = 0, layer1 = 0;
  int64_t pp_first = 0, pp_last = 0;
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
};

// The recipe keys of Options (model/gpt's [model] section); a plugin may use them as its
// schema, or add its own.
extern const loom_param_spec kTransformerSchema[];
extern const size_t kTransformerSchemaSize;
// model/bert's: the transformer's keys (activation "gelu_erf" by default, as Megatron's
// BERT) and binary_head, num_tokentypes.
extern const loom_param_spec kBertSchema[];
extern const size_t kBertSchemaSize;
// model/bert-classifier's: the transformer's keys, num_tokentypes and num_classes.
extern const loom_param_spec kBertClassifierSchema[];
extern const size_t kBertClassifierSchemaSize;
// model/t5's: the transformer's keys (activation "gelu_erf"), kv_channels, decoder_layers and
// decoder_seq_len (Megatron's --kv-channels, --decoder-num-layers, --decoder-seq-length).
extern const loom_param_spec kT5Schema[];
extern const size_t kT5SchemaSize;

// `who` ("model/gpt") prefixes every error; `family` says which schema's keys to read;
// `virtual_stages` is the layout's (an uneven split gives each rank's layers to its chunks).
Options parse_options(const loom::Config& cfg, const loom_model_create_args& args,
                      const loom::tp::Group& tp, const std::string& who,
                      Family family = Family::kGpt, int64_t virtual_stages = 1);

// ----- the configuration checks of a model's create (model_check.cpp) ----------------------
// Each throws loom::Error naming `who` and the keys; create and check_config share them.
void check_model_dtype(DLDataType dtype, const std::string& who);
// A model's context from its host: the backend, the attention plugin, the compute dtype
// (checked) and the tensor-parallel group (DecoderModel's and T5Model's create).
Ctx model_context(const loom_host* host, DLDataType dtype, const std::string& who);
// As much of the host's create args as its struct_size holds (an older host's lack the later
// fields, which stay zero).
loom_model_create_args copy_create_args(const loom_model_create_args& a);
// parallel.expert and expert_tensor against the mixture of experts; sets o.ep, o.ep_rank, o.etp.
void check_expert_layout(Options& o, const loom_parallel_layout& l, int tp_size,
                         const std::string& who);
// parallel.context against the model and seq_len; true: cp_comm_type "a2a".
bool check_context_layout(const Options& o, const loom_parallel_layout& l, int64_t seq_len,
                          const std::string& who);
// A schedule that places the last stage on pipeline rank 0 with the first (a V: zb-v,
// dualpipev) puts both copies of a tied embedding in one process, where the embedding
// group's all-reduce cannot sum them: refused by name until it can.
void check_pipeline_placement(const Options& o, const loom_parallel_layout& l,
                              const std::string& who);
// A residency (loom_model_create_args.residency) against what the units cannot carry yet.
void check_residency(const Options& o, int32_t residency, int virtual_stages,
                     const std::string& who);
// What T5 does not run: sequence or context parallelism.
void check_t5_layout(const loom::tp::Group& tp, const loom_parallel_layout& l,
                     const std::string& who);

}  // namespace loom::layers
