// Loom layer library, recipe keys: the schema table and its reading into Options.
#include "loom/cpp/layers/core/options.hpp"

#include <string>
#include <tuple>

#include "loom/cpp/layer_pattern.hpp"
#include "loom/cpp/layers/core/peft.hpp"
#include "loom/cpp/layout.hpp"

namespace loom::layers {

using loom::param;

// The transformer's keys, with the activation's default and the position encodings a model
// offers.
#define LOOM_TRANSFORMER_PARAMS(ACTIVATION, POSITIONS, POSITION_DOC)                               \
  param("n_layer", LOOM_PARAM_INT, "12", "number of transformer layers", 1, 4096),                 \
      param("n_head", LOOM_PARAM_INT, "12", "query attention heads", 1, 4096),                     \
      param("n_kv_head", LOOM_PARAM_INT, "0",                                                      \
            "key/value heads: 0 = n_head (multi-head), fewer = grouped-query attention", 0, 4096), \
      param("n_embd", LOOM_PARAM_INT, "768", "model width; a multiple of n_head", 1, 1 << 20),     \
      param("ffn_hidden", LOOM_PARAM_INT, "0",                                                     \
            "MLP hidden size; 0 = 4*n_embd (gelu) or 8*n_embd/3 rounded up to 256 (swiglu)", 0,    \
            1 << 24),                                                                              \
      param("norm", LOOM_PARAM_STRING, "layernorm", "normalisation layer", 1, 0,                   \
            "layernorm|rmsnorm"),                                                                  \
      param("activation", LOOM_PARAM_STRING, ACTIVATION,                                           \
            "MLP activation: gelu (tanh form, GPT-2's), gelu_erf (exact, BERT's), swiglu, "        \
            "which makes c_fc (2*ffn_hidden, n_embd) = [gate; up], or squared_relu (max(x, "       \
            "0)^2: Nemotron-H's, Megatron's --squared-relu)",                                      \
            1, 0, "gelu|gelu_erf|swiglu|squared_relu"),                                            \
      param("position", LOOM_PARAM_STRING, "learned", POSITION_DOC, 1, 0, POSITIONS),              \
      param("rope_theta", LOOM_PARAM_FLOAT, "10000.0", "RoPE base frequency", 1.0, 1e12),          \
      param("rope_scaling", LOOM_PARAM_STRING, "none",                                             \
            "RoPE frequency scaling for long contexts: Llama 3.1's (llama3) or YaRN "              \
            "(DeepSeek-V3's)",                                                                     \
            1, 0, "none|llama3|yarn"),                                                             \
      param("rope_scaling_factor", LOOM_PARAM_FLOAT, "8.0",                                        \
            "the context's extension factor (Llama 3.1: 8, DeepSeek-V3's YaRN: 40)", 1.0, 1e6),    \
      param("rope_original_max_position", LOOM_PARAM_INT, "8192",                                  \
            "the context the model was trained at before scaling (HF's "                           \
            "original_max_position_embeddings)",                                                   \
            1, 1 << 30),                                                                           \
      param("rope_low_freq_factor", LOOM_PARAM_FLOAT, "1.0", "llama3: low_freq_factor", 0.0, 1e6), \
      param("rope_high_freq_factor", LOOM_PARAM_FLOAT, "4.0", "llama3: high_freq_factor", 0.0,     \
            1e6),                                                                                  \
      param("yarn_beta_fast", LOOM_PARAM_FLOAT, "32.0", "yarn: beta_fast (rotations)", 0.0, 1e6),  \
      param("yarn_beta_slow", LOOM_PARAM_FLOAT, "1.0", "yarn: beta_slow (rotations)", 0.0, 1e6),   \
      param("yarn_mscale", LOOM_PARAM_FLOAT, "1.0", "yarn: mscale", 0.0, 1e6),                     \
      param("yarn_mscale_all_dim", LOOM_PARAM_FLOAT, "0.0",                                        \
            "yarn: mscale_all_dim (> 0: the attention factor is mscale's over it, and MLA's "      \
            "softmax scale is multiplied by its mscale squared)",                                  \
            0.0, 1e6),                                                                             \
      param("bias", LOOM_PARAM_BOOL, "true", "biases in linear layers and layernorms"),            \
      param("tie_embeddings", LOOM_PARAM_BOOL, "true",                                             \
            "LM head reuses wte; false adds lm_head.weight"),                                      \
      param("norm_eps", LOOM_PARAM_FLOAT, "1e-5", "epsilon of layernorm / rmsnorm", 0.0, 1.0),     \
      param("init_std", LOOM_PARAM_FLOAT, "0.02",                                                  \
            "std of the normal init of matrices and embeddings", 0.0, 10.0),                       \
      param("max_seq_len", LOOM_PARAM_INT, "1024",                                                 \
            "longest sequence: rows of the learned position table wpe", 1, 1 << 24),               \
      param("attention_window", LOOM_PARAM_INT, "0",                                               \
            "sliding-window attention: each position sees its last N positions, itself "           \
            "included (Mistral's sliding_window); 0 = full causal. Needs an attention plugin "     \
            "with loom.attention-window/1",                                                        \
            0, 1 << 30),                                                                           \
      param("pad_vocab_to", LOOM_PARAM_INT, "128",                                                 \
            "pad the embedding vocabulary to a multiple of this (the padded logits are set to "    \
            "-inf: they take no part in the loss)",                                                \
            1, 1 << 20)

// model/gpt's mixture of experts, with Megatron's flag names.
#define LOOM_MOE_PARAMS                                                                           \
  param("num_experts", LOOM_PARAM_INT, "0",                                                       \
        "experts of each MoE layer (Megatron's --num-experts); 0 = a dense model", 0, 1 << 16),   \
      param("moe_router_topk", LOOM_PARAM_INT, "2", "experts per token", 1, 1 << 16),             \
      param("moe_ffn_hidden_size", LOOM_PARAM_INT, "0",                                           \
            "hidden size of each expert's MLP; 0 = ffn_hidden", 0, 1 << 24),                      \
      param("moe_shared_expert_intermediate_size", LOOM_PARAM_INT, "0",                           \
            "hidden size of the shared expert every token also goes through; 0 = none", 0,        \
            1 << 24),                                                                             \
      param("moe_shared_expert_gate", LOOM_PARAM_BOOL, "false",                                   \
            "scale the shared expert's output per token by sigmoid(x . shared.gate.weight), "     \
            "Qwen2-MoE's shared_expert_gate"),                                                    \
      param("moe_layer_freq", LOOM_PARAM_STRING, "1",                                             \
            "which layers are MoE layers (Megatron's --moe-layer-freq): an integer N, every "     \
            "N-th layer from layer 0; or a pattern of one 0 (dense) or 1 (MoE) per layer, "       \
            "Megatron's list expression: \"[0]*3+[1]*5\", \"([1]*3+[0])*2\", \"[0,1,1]\""),       \
      param("moe_router_num_groups", LOOM_PARAM_INT, "0",                                         \
            "group-limited routing (DeepSeek-V3's n_group): the experts in this many groups, "    \
            "each token's top-k drawn from its moe_router_group_topk best; 0 = off",              \
            0, 1 << 16),                                                                          \
      param("moe_router_group_topk", LOOM_PARAM_INT, "0",                                         \
            "groups each token may use (DeepSeek-V3's topk_group); a group scores the sum of "    \
            "its moe_router_topk / moe_router_group_topk best routing scores",                    \
            0, 1 << 16),                                                                          \
      param("moe_router_topk_scaling_factor", LOOM_PARAM_FLOAT, "0.0",                            \
            "multiply the combine weights by this (DeepSeek-V3's routed_scaling_factor, 2.5); "   \
            "0 = 1",                                                                              \
            0.0, 1e6),                                                                            \
      param("moe_router_score_function", LOOM_PARAM_STRING, "softmax",                            \
            "softmax, or sigmoid (DeepSeek-V3's, weights normalised over the chosen experts)", 1, \
            0, "softmax|sigmoid"),                                                                \
      param("moe_router_pre_softmax", LOOM_PARAM_BOOL, "false",                                   \
            "softmax over all experts before the top-k (otherwise over the k chosen logits)"),    \
      param("moe_router_load_balancing_type", LOOM_PARAM_STRING, "aux_loss",                      \
            "the balancing loss: Switch's over the micro-batch, per sequence, or none", 1, 0,     \
            "aux_loss|seq_aux_loss|none"),                                                        \
      param("moe_aux_loss_coeff", LOOM_PARAM_FLOAT, "0.0",                                        \
            "coefficient of the balancing loss (Megatron's examples: 1e-2)", 0.0, 1e6),           \
      param("moe_z_loss_coeff", LOOM_PARAM_FLOAT, "0.0",                                          \
            "coefficient of the router z-loss (ST-MoE: 1e-3)", 0.0, 1e6),                         \
      param("moe_expert_capacity_factor", LOOM_PARAM_FLOAT, "0.0",                                \
            "tokens each expert keeps, as a factor of N k / E; 0 = dropless", 0.0, 1e6),          \
      param("moe_token_drop_policy", LOOM_PARAM_STRING, "probs",                                  \
            "over capacity, keep the likeliest tokens (probs) or the first (position)", 1, 0,     \
            "probs|position"),                                                                    \
      param("moe_router_enable_expert_bias", LOOM_PARAM_BOOL, "false",                            \
            "DeepSeek-V3's aux-loss-free balancing: a per-expert bias on the sigmoid scores "     \
            "picks the experts (never weighs them), moved after each step towards the mean "      \
            "load (needs moe_router_score_function = \"sigmoid\")"),                              \
      param("moe_router_bias_update_rate", LOOM_PARAM_FLOAT, "1e-3",                              \
            "how far each step moves an expert's bias (sign of mean load - its load)", 0.0, 1e6)

// model/gpt's attention variants, with Megatron's flag names (Qwen's head size, QK-norm and
// q/k/v biases).
#define LOOM_ATTENTION_PARAMS                                                                     \
  param("kv_channels", LOOM_PARAM_INT, "0",                                                       \
        "projection size of one attention head (Megatron's --kv-channels, HF's head_dim); 0 = "   \
        "n_embd / n_head",                                                                        \
        0, 1 << 16),                                                                              \
      param("qk_layernorm", LOOM_PARAM_BOOL, "false",                                             \
            "normalise each head's query and key (the model's norm over kv_channels, one weight " \
            "shared by the heads) before RoPE: Qwen3's q_norm / k_norm"),                         \
      param("add_qkv_bias", LOOM_PARAM_BOOL, "false",                                             \
            "a bias on the q/k/v projection even when bias = false (Qwen2's attention_bias)"),    \
      param("multi_latent_attention", LOOM_PARAM_BOOL, "false",                                   \
            "DeepSeek's multi-head latent attention (Megatron's --multi-latent-attention): keys " \
            "and values from a kv_lora_rank latent, queries from a q_lora_rank one, RoPE on a "   \
            "qk_pos_emb_head_dim part of each head apart from its qk_head_dim (needs position = " \
            "\"rope\")"),                                                                         \
      param("q_lora_rank", LOOM_PARAM_INT, "0",                                                   \
            "MLA: the queries' latent size; 0 = queries projected from the input directly", 0,    \
            1 << 20),                                                                             \
      param("kv_lora_rank", LOOM_PARAM_INT, "512", "MLA: the keys' and values' latent size", 1,   \
            1 << 20),                                                                             \
      param("qk_head_dim", LOOM_PARAM_INT, "128", "MLA: each head's query/key size without RoPE", \
            1, 1 << 16),                                                                          \
      param("qk_pos_emb_head_dim", LOOM_PARAM_INT, "64",                                          \
            "MLA: each head's query/key size with RoPE (the key's part shared by the heads)", 2,  \
            1 << 16),                                                                             \
      param("v_head_dim", LOOM_PARAM_INT, "128", "MLA: each head's value size", 1, 1 << 16)

// model/gpt's hybrid Mamba/attention stacks, with Megatron's flag names.
#define LOOM_HYBRID_PARAMS                                                                         \
  param("hybrid_override_pattern", LOOM_PARAM_STRING, "",                                          \
        "a hybrid stack (Megatron's --hybrid-override-pattern, Nemotron-H's): one character per "  \
        "layer, M a Mamba-2 mixer, * attention, - an MLP, E a mixture of experts, each layer "     \
        "x + mixer(norm(x)); its length is n_layer. Empty: attention then MLP in every layer"),    \
      param("mamba_num_heads", LOOM_PARAM_INT, "0",                                                \
            "Mamba-2 heads; 0 = 2 * n_embd / mamba_head_dim (an expansion of 2)", 0, 1 << 20),     \
      param("mamba_head_dim", LOOM_PARAM_INT, "64", "channels of one Mamba-2 head", 1, 1 << 16),   \
      param("mamba_num_groups", LOOM_PARAM_INT, "8",                                               \
            "groups of Mamba-2 heads sharing B and C (divisible by the tensor-parallel size)", 1,  \
            1 << 16),                                                                              \
      param("mamba_state_dim", LOOM_PARAM_INT, "128", "state size of each Mamba-2 channel", 1,     \
            1 << 16),                                                                              \
      param("mamba_conv_kernel", LOOM_PARAM_INT, "4",                                              \
            "taps of the causal depthwise convolution over x, B and C (HF's conv_kernel)", 1, 64), \
      param("mamba_chunk_size", LOOM_PARAM_INT, "128",                                             \
            "the selective scan's chunk length (the state kept for backward at each chunk's "      \
            "start)",                                                                              \
            1, 1 << 20)

// model/gpt's multi-token prediction, with Megatron's flag names.
#define LOOM_MTP_PARAMS                                                                          \
  param("mtp_num_layers", LOOM_PARAM_INT, "0",                                                   \
        "multi-token prediction depths (Megatron's --mtp-num-layers, DeepSeek-V3's 1): depth k " \
        "predicts the token k + 1 ahead from depth k-1's output and the token k ahead's "        \
        "embedding, with one layer of the last layer's kind and the shared head; 0 = off",       \
        0, 64),                                                                                  \
      param("mtp_loss_scaling_factor", LOOM_PARAM_FLOAT, "0.1",                                  \
            "weight of the depths' mean loss in the objective (Megatron's "                      \
            "--mtp-loss-scaling-factor); logged as the term mtp",                                \
            0.0, 1e6)

// Uneven pipeline stages, with Megatron's flag names (loom::layout::StageSplit).
#define LOOM_PIPELINE_SPLIT_PARAMS                                                                \
  param("decoder_first_pipeline_num_layers", LOOM_PARAM_INT, "0",                                 \
        "layers of the first pipeline stage (Megatron's --decoder-first-pipeline-num-layers), "   \
        "the other stages splitting the rest evenly; 0 = an even share",                          \
        0, 4096),                                                                                 \
      param("decoder_last_pipeline_num_layers", LOOM_PARAM_INT, "0",                              \
            "layers of the last pipeline stage (Megatron's --decoder-last-pipeline-num-layers); " \
            "0 = an even share",                                                                  \
            0, 4096)

const loom_param_spec kTransformerSchema[] = {
    LOOM_TRANSFORMER_PARAMS("gelu", "learned|rope|none",
                            "position encoding: learned table wpe, rotary (rotate-half), or none "
                            "(Mamba hybrids: the order comes from the scan)"),
    LOOM_ATTENTION_PARAMS,
    LOOM_MOE_PARAMS,
    LOOM_HYBRID_PARAMS,
    LOOM_MTP_PARAMS,
    LOOM_PIPELINE_SPLIT_PARAMS,
    LOOM_PEFT_PARAMS};
const size_t kTransformerSchemaSize = sizeof(kTransformerSchema) / sizeof(kTransformerSchema[0]);

#define LOOM_BERT_NORM_POSITION                                                           \
  param("norm_position", LOOM_PARAM_STRING, "pre",                                        \
        "pre: pre-LN layers and a final LayerNorm (Megatron's BERT); post: the original " \
        "BERT's post-LN layers, a LayerNorm on the embeddings and none at the end",       \
        1, 0, "pre|post")

const loom_param_spec kBertSchema[] = {
    LOOM_TRANSFORMER_PARAMS("gelu_erf", "learned|rope",
                            "position encoding: learned table wpe or rotary (rotate-half)"),
    LOOM_BERT_NORM_POSITION,
    LOOM_PIPELINE_SPLIT_PARAMS,
    param("binary_head", LOOM_PARAM_BOOL, "true",
          "the pooler and the binary head trained on sentence order (Megatron's default; "
          "false = --bert-no-binary-head)"),
    param("num_tokentypes", LOOM_PARAM_INT, "2", "token-type (segment) embeddings; 0 = none", 0,
          1 << 16),
};
const size_t kBertSchemaSize = sizeof(kBertSchema) / sizeof(kBertSchema[0]);

const loom_param_spec kBertClassifierSchema[] = {
    LOOM_TRANSFORMER_PARAMS("gelu_erf", "learned|rope",
                            "position encoding: learned table wpe or rotary (rotate-half)"),
    LOOM_BERT_NORM_POSITION,
    LOOM_PIPELINE_SPLIT_PARAMS,
    param("num_tokentypes", LOOM_PARAM_INT, "2", "token-type (segment) embeddings; 0 = none", 0,
          1 << 16),
    param("num_classes", LOOM_PARAM_INT, "3",
          "classes of the classifier on the pooled [CLS] (MNLI: 3)", 2, 1 << 16),
};
const size_t kBertClassifierSchemaSize =
    sizeof(kBertClassifierSchema) / sizeof(kBertClassifierSchema[0]);

const loom_param_spec kT5Schema[] = {
    LOOM_TRANSFORMER_PARAMS("gelu_erf", "learned|relative",
                            "position encoding: learned table wpe, or T5's relative position "
                            "bias (no wpe)"),
    param("relative_attention_num_buckets", LOOM_PARAM_INT, "32",
          "buckets of the relative position bias (position = \"relative\")", 2, 1 << 16),
    param("relative_attention_max_distance", LOOM_PARAM_INT, "128",
          "relative distance from which buckets stop growing (position = \"relative\")", 2,
          1 << 24),
    param("kv_channels", LOOM_PARAM_INT, "0",
          "projection size of one attention head (Megatron's --kv-channels); 0 = n_embd / n_head",
          0, 1 << 16),
    param("decoder_layers", LOOM_PARAM_INT, "0",
          "decoder layers (Megatron's --decoder-num-layers); 0 = n_layer, the encoder's", 0, 4096),
    param("decoder_seq_len", LOOM_PARAM_INT, "128",
          "decoder tokens per sample (Megatron's --decoder-seq-length); the encoder's is "
          "train.seq_len. dataset/t5's decoder_seq_len must be the same",
          1, 1 << 24),
};
const size_t kT5SchemaSize = sizeof(kT5Schema) / sizeof(kT5Schema[0]);

namespace {
std::string s(int64_t v) { return std::to_string(v); }

// Multi-head latent attention: its sizes, and what it does not combine with yet.
void parse_mla(const loom::Config& cfg, const std::string& who, int64_t kv_channels, Options& o) {
  o.mla = true;
  o.q_lora_rank = cfg.get_int("q_lora_rank");
  o.kv_lora_rank = cfg.get_int("kv_lora_rank");
  o.qk_head_dim = cfg.get_int("qk_head_dim");
  o.qk_pos_dim = cfg.get_int("qk_pos_emb_head_dim");
  o.v_head_dim = cfg.get_int("v_head_dim");
  // every head has its own keys and values, of qk_head_dim + qk_pos_emb_head_dim
  o.head_dim = o.qk_head_dim + o.qk_pos_dim;
  loom::require(o.n_kv_head == o.n_head,
                who +
                    ": multi_latent_attention gives every head its own keys and values; "
                    "n_kv_head = " +
                    s(o.n_kv_head) + " (leave it 0)");
  loom::require(o.rope && o.qk_pos_dim % 2 == 0,
                who +
                    ": multi_latent_attention rotates qk_pos_emb_head_dim (even) of each head: "
                    "position = \"rope\"");
  loom::require(kv_channels == 0 && !o.qk_norm && !cfg.get_bool("add_qkv_bias"),
                who +
                    ": multi_latent_attention sizes its heads with qk_head_dim, "
                    "qk_pos_emb_head_dim and v_head_dim and normalises its latents: "
                    "kv_channels, qk_layernorm and add_qkv_bias do not apply");
  loom::require(o.v_head_dim <= o.head_dim,
                who + ": v_head_dim = " + s(o.v_head_dim) +
                    " exceeds qk_head_dim + qk_pos_emb_head_dim = " + s(o.head_dim) +
                    " (values ride the attention padded to the query size)",
                LOOM_ERR_UNIMPLEMENTED);
}

// model/gpt's mixture of experts (num_experts > 0), and what it does not run yet.
void parse_moe(const loom::Config& cfg, const loom_model_create_args& args, const std::string& who,
               Options& o) {
  o.num_experts = cfg.get_int("num_experts");
  if (o.num_experts == 0) return;
  o.moe_ffn_hidden = cfg.get_int("moe_ffn_hidden_size");
  if (o.moe_ffn_hidden == 0) o.moe_ffn_hidden = o.ffn_hidden;
  o.moe_layers =
      loom::layer_pattern(cfg.get_string("moe_layer_freq"), o.n_layer, who + ": moe_layer_freq");
  o.moe_shared_hidden = cfg.get_int("moe_shared_expert_intermediate_size");
  o.moe_shared_gate = cfg.get_bool("moe_shared_expert_gate");
  loom::require(!o.moe_shared_gate || o.moe_shared_hidden > 0,
                who +
                    ": moe_shared_expert_gate gates the shared expert; "
                    "moe_shared_expert_intermediate_size is 0 (no shared expert)");
  RouterConfig& r = o.moe_router;
  r.experts = o.num_experts;
  r.topk = cfg.get_int("moe_router_topk");
  r.score = cfg.get_string("moe_router_score_function");
  r.pre_softmax = cfg.get_bool("moe_router_pre_softmax");
  r.capacity_factor = cfg.get_float("moe_expert_capacity_factor");
  r.drop_policy = cfg.get_string("moe_token_drop_policy");
  r.num_groups = cfg.get_int("moe_router_num_groups");
  r.group_topk = cfg.get_int("moe_router_group_topk");
  r.topk_scaling_factor = cfg.get_float("moe_router_topk_scaling_factor");
  if (r.num_groups > 0 || r.group_topk > 0) {
    const int64_t G = r.num_groups, g = r.group_topk;
    loom::require(G > 0 && o.num_experts % G == 0,
                  who + ": moe_router_num_groups = " + s(G) + " must divide num_experts = " +
                      s(o.num_experts) + " (and be set with moe_router_group_topk)");
    loom::require(g >= 1 && g <= G && r.topk % g == 0 && r.topk / g <= o.num_experts / G,
                  who + ": moe_router_group_topk = " + s(g) + " must be in [1, " + s(G) +
                      "] and divide moe_router_topk = " + s(r.topk) + " into at most " +
                      s(o.num_experts / G) + " experts per group");
  }
  o.moe_balancing = cfg.get_string("moe_router_load_balancing_type");
  o.moe_aux_coeff = cfg.get_float("moe_aux_loss_coeff");
  o.moe_z_coeff = cfg.get_float("moe_z_loss_coeff");
  loom::require(r.topk <= o.num_experts, who + ": moe_router_topk = " + s(r.topk) +
                                             " exceeds num_experts = " + s(o.num_experts));
  loom::require(!r.pre_softmax || r.score == "softmax",
                who + ": moe_router_pre_softmax applies to the softmax score function only");
  o.moe_expert_bias = cfg.get_bool("moe_router_enable_expert_bias");
  o.moe_bias_rate = cfg.get_float("moe_router_bias_update_rate");
  loom::require(!o.moe_expert_bias || r.score == "sigmoid",
                who +
                    ": moe_router_enable_expert_bias biases the sigmoid scores; "
                    "moe_router_score_function is \"" +
                    r.score + "\" (set it to \"sigmoid\")");
  const bool wide = args.dtype.code == kDLFloat && args.dtype.bits >= 32;
  loom::require(wide,
                who +
                    ": a mixture of experts runs in fp32 (or f64) for now (bf16 experts are the "
                    "next step of the MoE work)",
                LOOM_ERR_UNIMPLEMENTED);
}

// A hybrid Mamba/attention stack (hybrid_override_pattern), and what it does not run yet.
void parse_hybrid(const loom::Config& cfg, const loom::tp::Group& tp, const std::string& who,
                  Options& o) {
  o.hybrid = cfg.get_string("hybrid_override_pattern");
  if (o.hybrid.empty()) return;
  const std::string key = who + ": hybrid_override_pattern \"" + o.hybrid + "\"";
  loom::require((int64_t)o.hybrid.size() == o.n_layer,
                key + " has " + s((int64_t)o.hybrid.size()) + " layers; n_layer = " + s(o.n_layer) +
                    " (Megatron's --num-layers is the pattern's length)");
  for (size_t i = 0; i < o.hybrid.size(); ++i)
    loom::require(std::string("M*-E").find(o.hybrid[i]) != std::string::npos,
                  key + ": layer " + s((int64_t)i) + " is '" + std::string(1, o.hybrid[i]) +
                      "'; each layer is M (Mamba-2), * (attention), - (MLP) or E (MoE)");
  // The MoE layers are the pattern's E's (moe_layer_freq is the transformer's way).
  loom::require(o.has_kind('E') == (o.num_experts > 0),
                key + (o.num_experts > 0 ? " has no E layer for num_experts = " + s(o.num_experts)
                                         : " has E layers; num_experts is 0"));
  if (o.num_experts > 0) {
    loom::require(cfg.get_string("moe_layer_freq") == "1",
                  key + " places the MoE layers (E); leave moe_layer_freq at 1");
    for (size_t i = 0; i < o.hybrid.size(); ++i) o.moe_layers[i] = o.hybrid[i] == 'E';
  }
  o.mamba_head_dim = cfg.get_int("mamba_head_dim");
  o.mamba_heads = cfg.get_int("mamba_num_heads");
  if (o.mamba_heads == 0) o.mamba_heads = 2 * o.n_embd / o.mamba_head_dim;
  o.mamba_groups = cfg.get_int("mamba_num_groups");
  o.mamba_state = cfg.get_int("mamba_state_dim");
  o.mamba_conv = cfg.get_int("mamba_conv_kernel");
  o.mamba_chunk = cfg.get_int("mamba_chunk_size");
  if (!o.has_kind('M')) return;
  loom::require(o.mamba_heads > 0 && o.mamba_heads % o.mamba_groups == 0,
                who + ": mamba_num_heads = " + s(o.mamba_heads) +
                    " must be a positive multiple of mamba_num_groups = " + s(o.mamba_groups));
  loom::require(o.mamba_groups % tp.size == 0,
                who + ": mamba_num_groups = " + s(o.mamba_groups) +
                    " is not divisible by tensor = " + s(tp.size) +
                    " (each tensor rank holds whole groups of heads, as Megatron's)");
}

// Multi-token prediction (mtp_num_layers > 0), and what it does not run with yet.
void parse_mtp(const loom::Config& cfg, const loom::tp::Group& tp, const std::string& who,
               Options& o) {
  o.mtp_layers = cfg.get_int("mtp_num_layers");
  o.mtp_scale = cfg.get_float("mtp_loss_scaling_factor");
  if (o.mtp_layers == 0) return;
  const std::string key = who + ": mtp_num_layers = " + s(o.mtp_layers);
  loom::require(!o.learned_positions(),
                key +
                    " embeds the tokens ahead without positions: position = \"rope\" or "
                    "\"none\" (learned positions are not implemented with it)",
                LOOM_ERR_UNIMPLEMENTED);
  loom::require(o.hybrid.empty(),
                key +
                    " with hybrid_override_pattern is not implemented (which layer kind "
                    "each depth has)",
                LOOM_ERR_UNIMPLEMENTED);
  loom::require(!tp.sequence_parallel,
                key +
                    " under sequence parallelism is not implemented (the depths run on all "
                    "the tokens of every tensor rank)",
                LOOM_ERR_UNIMPLEMENTED);
}

// model/t5's own keys and limits: Megatron's T5 is learned positions, LayerNorm, biases, a
// plain MLP and the LM head tied to the embedding (with its own output bias).
void parse_t5(const loom::Config& cfg, const std::string& who, Options& o) {
  o.t5 = true;
  o.dec_layers = cfg.get_int("decoder_layers");
  if (o.dec_layers == 0) o.dec_layers = o.n_layer;
  o.dec_seq_len = cfg.get_int("decoder_seq_len");
  o.relative = cfg.get_string("position") == "relative";
  o.rel_buckets = cfg.get_int("relative_attention_num_buckets");
  o.rel_max_distance = cfg.get_int("relative_attention_max_distance");
  loom::require(!o.rope && o.tie_embeddings && o.attention_window == 0 && o.bias &&
                    o.norm == LOOM_NORM_LAYER && !o.gated(),
                who +
                    ": T5 has learned positions or a relative position bias, a tied LM head, "
                    "full attention, biases, LayerNorm and a plain MLP (position = \"learned\" "
                    "or \"relative\", tie_embeddings, attention_window = 0, bias, norm = "
                    "\"layernorm\", no swiglu)");
  loom::require(o.stages == 1,
                who + ": T5 runs on one pipeline stage (pipeline = " + s(o.stages) +
                    "); Megatron's encoder/decoder pipeline split is not implemented",
                LOOM_ERR_UNIMPLEMENTED);
  loom::require(o.dec_seq_len <= o.max_seq_len,
                who + ": decoder_seq_len " + s(o.dec_seq_len) + " exceeds max_seq_len " +
                    s(o.max_seq_len) + " (the position table encoder and decoder share)");
}
}  // namespace

Options parse_options(const loom::Config& cfg, const loom_model_create_args& args,
                      const loom::tp::Group& tp, const std::string& who, Family family,
                      int64_t virtual_stages) {
  // ABI 2.18: create-time options ride on the args' ext chain; one the layer library does not
  // know, if required, is refused by name rather than ignored.
  if (args.struct_size >= LOOM_MODEL_CREATE_ARGS_SIZE_V2_18)
    loom::require_known_exts(args.ext, {LOOM_EXT_PREFERENCE, LOOM_EXT_FP8_TRAINING},
                             who + ": create args");
  Options o;
  o.n_layer = cfg.get_int("n_layer");
  o.n_head = cfg.get_int("n_head");
  o.n_kv_head = cfg.get_int("n_kv_head");
  if (o.n_kv_head == 0) o.n_kv_head = o.n_head;
  o.n_embd = cfg.get_int("n_embd");
  // The schema's choices are exactly these words.
  o.norm = cfg.get_string("norm") == "rmsnorm" ? LOOM_NORM_RMS : LOOM_NORM_LAYER;
  const std::string act = cfg.get_string("activation");
  o.act = act == "swiglu"         ? LOOM_ACT_SWIGLU
          : act == "gelu_erf"     ? LOOM_ACT_GELU
          : act == "squared_relu" ? LOOM_ACT_SQUARED_RELU
                                  : LOOM_ACT_GELU_TANH;
  o.rope = cfg.get_string("position") == "rope";
  o.no_position = cfg.get_string("position") == "none";
  o.rope_theta = cfg.get_float("rope_theta");
  o.rope_scaling = cfg.get_string("rope_scaling");
  o.rope_factor = cfg.get_float("rope_scaling_factor");
  o.rope_original_max = cfg.get_int("rope_original_max_position");
  o.rope_low_freq = cfg.get_float("rope_low_freq_factor");
  o.rope_high_freq = cfg.get_float("rope_high_freq_factor");
  o.yarn_beta_fast = cfg.get_float("yarn_beta_fast");
  o.yarn_beta_slow = cfg.get_float("yarn_beta_slow");
  o.yarn_mscale = cfg.get_float("yarn_mscale");
  o.yarn_mscale_all_dim = cfg.get_float("yarn_mscale_all_dim");
  loom::require(o.rope_scaling == "none" || o.rope, who + ": rope_scaling = \"" + o.rope_scaling +
                                                        "\" scales RoPE; position = \"" +
                                                        cfg.get_string("position") + "\" has none");
  loom::require(o.rope_scaling != "llama3" || o.rope_high_freq > o.rope_low_freq,
                who + ": rope_high_freq_factor must exceed rope_low_freq_factor");
  o.bias = cfg.get_bool("bias");
  o.tie_embeddings = cfg.get_bool("tie_embeddings");
  o.norm_eps = cfg.get_float("norm_eps");
  o.init_std = cfg.get_float("init_std");
  o.max_seq_len = cfg.get_int("max_seq_len");
  o.pad_vocab_to = cfg.get_int("pad_vocab_to");
  o.ffn_hidden = cfg.get_int("ffn_hidden");
  o.attention_window = cfg.get_int("attention_window");
  if (o.ffn_hidden == 0)
    o.ffn_hidden = o.gated() ? (8 * o.n_embd / 3 + 255) / 256 * 256 : 4 * o.n_embd;

  loom::require(o.n_layer > 0 && o.n_head > 0 && o.n_embd > 0,
                who + ": n_layer, n_head and n_embd must be positive");
  const bool gpt = family == Family::kGpt;
  const int64_t kv_channels = gpt || family == Family::kT5 ? cfg.get_int("kv_channels") : 0;
  o.qk_norm = gpt && cfg.get_bool("qk_layernorm");
  o.qkv_bias = o.bias || (gpt && cfg.get_bool("add_qkv_bias"));
  if (gpt && cfg.get_bool("multi_latent_attention")) parse_mla(cfg, who, kv_channels, o);
  loom::require(
      o.mla || kv_channels > 0 || o.n_embd % o.n_head == 0,
      who + ": n_embd (" + s(o.n_embd) + ") must be a multiple of n_head (" + s(o.n_head) + ")");
  loom::require(o.n_kv_head > 0 && o.n_head % o.n_kv_head == 0,
                who + ": n_head (" + s(o.n_head) + ") must be a multiple of n_kv_head (" +
                    s(o.n_kv_head) + ")");
  if (!o.mla) o.head_dim = kv_channels > 0 ? kv_channels : o.n_embd / o.n_head;
  loom::require(!o.rope || o.mla || o.head_dim % 2 == 0,
                who + ": position = \"rope\" needs an even head dim, got " + s(o.head_dim));
  loom::require(o.pad_vocab_to > 0, who + ": pad_vocab_to must be >= 1");
  loom::require(args.vocab_size > 0, who + ": create args vocab_size must be positive");
  loom::require(args.seq_len > 0 && args.micro_batch > 0,
                who + ": create args seq_len and micro_batch must be positive");
  loom::require(!o.learned_positions() || args.seq_len <= o.max_seq_len,
                who + ": seq_len " + s(args.seq_len) + " exceeds max_seq_len " + s(o.max_seq_len) +
                    " (the learned position table); raise max_seq_len");
  o.vocab = args.vocab_size;
  // Megatron pads to make-vocab-size-divisible-by x TP, so every rank holds equal rows.
  o.tp = tp.size;
  o.padded_vocab = loom::tp::VocabShard::make(o.vocab, o.pad_vocab_to, tp).padded;
  const std::string t = " is not divisible by tensor = " + s(o.tp);
  loom::require(o.n_head % o.tp == 0, who + ": n_head = " + s(o.n_head) + t);
  loom::require(o.n_kv_head % o.tp == 0, who + ": n_kv_head = " + s(o.n_kv_head) + t);
  loom::require(o.ffn_hidden % o.tp == 0, who + ": ffn_hidden = " + s(o.ffn_hidden) + t);
  if (args.struct_size >= LOOM_MODEL_CREATE_ARGS_SIZE_V2 && args.pipeline_stages > 1) {
    o.stages = args.pipeline_stages;
    o.stage = args.pipeline_stage;
  }
  loom::require(o.stage >= 0 && o.stage < o.stages,
                who + ": pipeline_stage " + s(o.stage) + " is outside [0, " + s(o.stages) + ")");
  if (family != Family::kT5) {  // T5 has no such keys (and one stage)
    o.pp_first = cfg.get_int("decoder_first_pipeline_num_layers");
    o.pp_last = cfg.get_int("decoder_last_pipeline_num_layers");
  }
  const loom::layout::StageSplit split{o.n_layer, o.stages, o.pp_first, o.pp_last, virtual_stages};
  const std::string bad_split = split.problem();
  loom::require(bad_split.empty(), who + ": " + bad_split);
  if (family == Family::kT5) parse_t5(cfg, who, o);
  if (family == Family::kGpt) {
    parse_moe(cfg, args, who, o);
    parse_hybrid(cfg, tp, who, o);
    parse_mtp(cfg, tp, who, o);
    parse_peft(cfg, who, o);
  }
  parse_preference(args, family, who, o);
  parse_fp8(args, family, who, o);
  if (family == Family::kBert || family == Family::kBertClassifier) {
    o.bert = true;
    o.classifier = family == Family::kBertClassifier;
    o.binary_head = !o.classifier && cfg.get_bool("binary_head");
    o.num_tokentypes = cfg.get_int("num_tokentypes");
    o.post_norm = cfg.get_string("norm_position") == "post";
    if (o.classifier) o.num_classes = cfg.get_int("num_classes");
    // the classifier has no output layer to tie to the embedding
    if (o.classifier) o.tie_embeddings = false;
    loom::require(!o.rope && (o.tie_embeddings || o.classifier) && o.attention_window == 0 &&
                      o.bias && o.norm == LOOM_NORM_LAYER && !o.gated(),
                  who +
                      ": BERT has learned positions, a tied LM head, full attention, biases, "
                      "LayerNorm and a plain MLP (position = \"learned\", tie_embeddings, "
                      "attention_window = 0, bias, norm = \"layernorm\", no swiglu)");
  }
  std::tie(o.layer0, o.layer1) = split.range(o.stage);
  return o;
}

}  // namespace loom::layers
