// Hugging Face interop, DeepseekV3ForCausalLM's mapping (hf_config.hpp) onto model/gpt's
// multi-head latent attention and DeepSeek-V3's router (docs/interop.md has the table):
//  - attention: q_a_proj, q_a_layernorm, q_b_proj (or q_proj), kv_a_proj_with_mqa,
//    kv_a_layernorm, kv_b_proj, o_proj as attn.{q_a, q_a_norm, q_b (q), kv_a, kv_a_norm,
//    kv_b, c_proj};
//  - with rope_interleave (transformers' default for DeepSeek-V3) HF rotates each head's
//    rotary part as interleaved pairs (x[2i], x[2i+1]): it de-interleaves the part first,
//    then rotates halves. The rows that make those parts (q_b's per head, kv_a's last ones)
//    are stored here de-interleaved, so Loom's rotate-half gives the same scores;
//  - the first first_k_dense_replace layers dense, then experts with the sigmoid router, its
//    e_score_correction_bias (Loom's router.expert_bias buffer, float32), groups scored by
//    their best 2 (Loom's topk / group_topk must be 2), and the shared experts;
//  - the multi-token prediction modules (layers L, L + 1, ...; num_nextn_predict_layers) as
//    mtp.K.*, whose layer is a MoE layer like model/gpt's last, when the files hold them.
#include <algorithm>

#include "checkpoint/hf_config.hpp"

namespace loom::engine::hf {
namespace {

struct Ds {
  Dims d{};
  int64_t qr = 0, r = 0, dn = 0, dr = 0, dv = 0;  // MLA's sizes
  int64_t E = 0, Fe = 0, S = 0, first_dense = 0;  // experts, shared expert, dense layers
  int64_t mtp = 0;                                // multi-token prediction depths
  bool tied = false, interleave = true;
  int64_t dq() const { return dn + dr; }
};

// Row order of `heads` blocks of `block` rows whose rows [at, at + dr) are a rotary part:
// each part de-interleaved (Loom's row j of it is HF's 2j, then 2(j - dr/2) + 1).
std::vector<int64_t> deinterleaved(int64_t heads, int64_t block, int64_t at, int64_t dr) {
  std::vector<int64_t> rows((size_t)(heads * block));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < block; ++i) {
      const int64_t j = i - at;
      const int64_t hf = j < 0 || j >= dr ? i : at + (j < dr / 2 ? 2 * j : 2 * (j - dr / 2) + 1);
      rows[(size_t)(h * block + i)] = h * block + hf;
    }
  return rows;
}

// One decoder layer: Loom's `h` (ending in ".") from HF's `m` (model.layers.N).
void layer_rules(HfArch& a, const Ds& s, const std::string& h, const std::string& m, bool moe) {
  const int64_t H = s.d.H, C = s.d.C, dq = s.dq();
  const std::string at = m + ".self_attn.", x = h + "attn.";
  rule(a, h + "ln_1.weight", {m + ".input_layernorm.weight"}, {{C}});
  if (s.qr > 0) {
    rule(a, x + "q_a.weight", {at + "q_a_proj.weight"}, {{s.qr, C}});
    rule(a, x + "q_a_norm.weight", {at + "q_a_layernorm.weight"}, {{s.qr}});
    rule(a, x + "q_b.weight", {at + "q_b_proj.weight"}, {{H * dq, s.qr}});
  } else {
    rule(a, x + "q.weight", {at + "q_proj.weight"}, {{H * dq, C}});
  }
  if (s.interleave) a.rules.back().rows = deinterleaved(H, dq, s.dn, s.dr);
  rule(a, x + "kv_a.weight", {at + "kv_a_proj_with_mqa.weight"}, {{s.r + s.dr, C}});
  if (s.interleave) a.rules.back().rows = deinterleaved(1, s.r + s.dr, s.r, s.dr);
  rule(a, x + "kv_a_norm.weight", {at + "kv_a_layernorm.weight"}, {{s.r}});
  rule(a, x + "kv_b.weight", {at + "kv_b_proj.weight"}, {{H * (s.dn + s.dv), s.r}});
  rule(a, x + "c_proj.weight", {at + "o_proj.weight"}, {{C, H * s.dv}});
  rule(a, h + "ln_2.weight", {m + ".post_attention_layernorm.weight"}, {{C}});
  const std::string mlp = m + ".mlp.";
  if (!moe) return swiglu_rules(a, h + "mlp.", mlp, s.d.F, C);
  rule(a, h + "moe.router.weight", {mlp + "gate.weight"}, {{s.E, C}});
  rule(a, h + "moe.router.expert_bias", {mlp + "gate.e_score_correction_bias"}, {{s.E}});
  a.rules.back().f32 = true;
  expert_rules(a, h + "moe.", mlp, s.E, s.Fe, C);
  swiglu_rules(a, h + "moe.shared.", mlp + "shared_experts.", s.S, C);
}

// DeepSeek-V3's multi-token prediction module k, stored as layer L + k: enorm, hnorm,
// eh_proj ([embedding | hidden], Megatron's order too), a MoE decoder layer, shared_head's norm
// (Loom's final_norm); its embed_tokens and shared_head.head are the model's own again.
void mtp_rules(HfArch& a, const Ds& s, int64_t k) {
  const int64_t C = s.d.C;
  const std::string p = "mtp." + std::to_string(k) + ".";
  const std::string m = "model.layers." + std::to_string(s.d.L + k);
  rule(a, p + "enorm.weight", {m + ".enorm.weight"}, {{C}});
  rule(a, p + "hnorm.weight", {m + ".hnorm.weight"}, {{C}});
  rule(a, p + "eh_proj.weight", {m + ".eh_proj.weight"}, {{C, 2 * C}});
  layer_rules(a, s, p + "layer.", m, true);
  rule(a, p + "final_norm.weight", {m + ".shared_head.norm.weight"}, {{C}});
  a.copies.emplace_back(m + ".embed_tokens.weight", "model.embed_tokens.weight");
  a.copies.emplace_back(m + ".shared_head.head.weight",
                        s.tied ? "model.embed_tokens.weight" : "lm_head.weight");
}

HfArch build(const Ds& s) {
  HfArch a;
  a.name = "deepseek_v3";
  const Dims& d = s.d;
  a.vocab = d.V;
  a.rules.push_back({"wte", {"model.embed_tokens.weight"}, {{d.V, d.C}}, false, true});
  for (int64_t l = 0; l < d.L; ++l)
    layer_rules(a, s, "h." + std::to_string(l) + ".", "model.layers." + std::to_string(l),
                l >= s.first_dense);
  head_rules(a, "model.norm.weight", s.tied, d.V, d.C);
  for (int64_t k = 0; k < s.mtp; ++k) mtp_rules(a, s, k);
  a.ignored_suffixes = {".rotary_emb.inv_freq"};
  return a;
}

}  // namespace

HfArch deepseek_from_config(ConfigReader& r, const StFile& shapes) {
  Ds s;
  Dims& d = s.d;
  d.V = r.integer("vocab_size"), d.C = r.integer("hidden_size");
  d.F = r.integer("intermediate_size"), d.L = r.integer("num_hidden_layers");
  d.H = r.integer("num_attention_heads"), d.P = r.integer("max_position_embeddings");
  d.KV = r.integer("num_key_value_heads", d.H);
  if (d.KV != d.H) r.fail("num_key_value_heads", "must equal num_attention_heads (MLA)");
  s.qr = r.integer("q_lora_rank", 0), s.r = r.integer("kv_lora_rank");
  s.dn = r.integer("qk_nope_head_dim"), s.dr = r.integer("qk_rope_head_dim");
  s.dv = r.integer("v_head_dim");
  if (s.dr % 2 != 0) r.fail("qk_rope_head_dim", "must be even (rotary pairs)");
  if (s.dv > s.dq()) r.fail("v_head_dim", "exceeds qk_nope_head_dim + qk_rope_head_dim");
  s.E = r.integer("n_routed_experts"), s.Fe = r.integer("moe_intermediate_size");
  s.S = r.integer("n_shared_experts") * s.Fe;
  const int64_t K = r.integer("num_experts_per_tok");
  if (K < 2 || K > s.E) r.fail("num_experts_per_tok", "must be in [2, n_routed_experts]");
  s.first_dense = r.integer("first_k_dense_replace", 0);
  if (s.first_dense >= d.L) r.fail("first_k_dense_replace", "leaves no layer with experts");
  const int64_t G = r.integer("n_group", 1), g = r.integer("topk_group", 1);
  if (G < 1 || s.E % G != 0 || g < 1 || g > G) r.fail("n_group", "does not divide the experts");
  if (G > 1 && K != 2 * g)
    r.fail("topk_group",
           "must be num_experts_per_tok / 2: HF scores a group by its best 2 "
           "experts, model/gpt by its best moe_router_topk / moe_router_group_topk");
  const double scale = r.number("routed_scaling_factor", 1.0);
  r.require("norm_topk_prob", {true}, "model/gpt normalises the chosen sigmoid scores");
  r.require("hidden_act", {"silu"}, "model/gpt's swiglu gates with SiLU");
  r.require("attention_bias", {false}, "model/gpt's latent attention has no biases");
  // The multi-token prediction modules (layers L, L + 1, ...) map when the files hold them
  // (DeepSeek's own checkpoints); transformers builds none and saves configs that say 1
  // with no such tensors: then the main model maps alone.
  const int64_t mtp = r.integer("num_nextn_predict_layers", 0);
  if (mtp < 0) r.fail("num_nextn_predict_layers", "must be >= 0");
  auto holds = [&](int64_t k) {
    return shapes.count("model.layers." + std::to_string(d.L + k) + ".eh_proj.weight") > 0;
  };
  while (s.mtp < mtp && holds(s.mtp)) ++s.mtp;  // bounded by the files, not the config
  if (s.mtp > 0 && s.mtp < mtp)
    r.fail("num_nextn_predict_layers", "= " + std::to_string(mtp) + " but the files hold " +
                                           std::to_string(s.mtp) +
                                           " module(s) (no tensor model.layers." +
                                           std::to_string(d.L + s.mtp) + ".eh_proj.weight)");
  // DeepSeek's own config keys (remote code): the router they describe is the one mapped
  r.require("scoring_func", {"sigmoid"}, "DeepSeek-V3's router scores with a sigmoid");
  r.require("topk_method", {"noaux_tc"}, "DeepSeek-V3's aux-loss-free top-k");
  r.require("moe_layer_freq", {1}, "a mixture in every layer after the dense ones");
  // what transformers' DeepseekV3Config derives and saves
  r.require("qk_head_dim", {s.dq()}, "qk_nope_head_dim + qk_rope_head_dim");
  r.require("head_dim", {s.dr}, "transformers sets it to qk_rope_head_dim");
  s.interleave = r.flag("rope_interleave", true);
  const double eps = r.number("rms_norm_eps", 1e-6);
  s.tied = r.flag("tie_word_embeddings", false);
  const double aux = r.number("aux_loss_alpha", 0.0);
  const bool seq_aux = r.flag("seq_aux", true);
  r.benign({"attention_dropout", "pretraining_tp", "ep_size"});
  std::map<std::string, std::string> scaling;  // DeepSeek-V3's YaRN
  const double theta = rope_base(r, {"yarn"}, d.P, scaling);
  r.refuse_unread();
  HfArch a = build(s);
  if (s.mtp == 0 && mtp > 0)  // a module's tensors without its eh_proj
    a.unmapped = "config.json's num_nextn_predict_layers = " + std::to_string(mtp) +
                 ": a multi-token prediction module (model.layers." + std::to_string(d.L) +
                 ".*) maps when its eh_proj.weight is there";
  a.model_keys = {{"n_layer", lit(d.L)},
                  {"n_head", lit(d.H)},
                  {"n_kv_head", lit(d.H)},
                  {"n_embd", lit(d.C)},
                  {"ffn_hidden", lit(d.F)},
                  {"norm", lit_s("rmsnorm")},
                  {"activation", lit_s("swiglu")},
                  {"position", lit_s("rope")},
                  {"rope_theta", lit_f(theta)},
                  {"bias", lit(false)},
                  {"tie_embeddings", lit(s.tied)},
                  {"norm_eps", lit_f(eps)},
                  {"max_seq_len", lit(d.P)},
                  {"multi_latent_attention", lit(true)},
                  {"q_lora_rank", lit(s.qr)},
                  {"kv_lora_rank", lit(s.r)},
                  {"qk_head_dim", lit(s.dn)},
                  {"qk_pos_emb_head_dim", lit(s.dr)},
                  {"v_head_dim", lit(s.dv)},
                  {"num_experts", lit(s.E)},
                  {"moe_router_topk", lit(K)},
                  {"moe_ffn_hidden_size", lit(s.Fe)},
                  {"moe_shared_expert_intermediate_size", lit(s.S)},
                  {"moe_router_score_function", lit_s("sigmoid")},
                  {"moe_router_enable_expert_bias", lit(true)},
                  {"moe_router_topk_scaling_factor", lit_f(scale)},
                  {"moe_aux_loss_coeff", lit_f(aux)},
                  {"moe_router_load_balancing_type", lit_s(seq_aux ? "seq_aux_loss" : "aux_loss")}};
  a.model_keys.insert(scaling.begin(), scaling.end());
  if (s.mtp > 0) a.model_keys["mtp_num_layers"] = lit(s.mtp);
  if (G > 1) {
    a.model_keys["moe_router_num_groups"] = lit(G);
    a.model_keys["moe_router_group_topk"] = lit(g);
  }
  if (s.first_dense > 0) {  // the dense layers first
    std::vector<uint8_t> pattern((size_t)d.L, 1);
    std::fill(pattern.begin(), pattern.begin() + s.first_dense, 0);
    a.model_keys["moe_layer_freq"] = lit_s(loom::layer_pattern_text(pattern));
  }

  return a;
}

std::pair<HfArch, json> deepseek_from_model(const ModelKeys& k, const Dims& dims, json c) {
  const std::string arch = "DeepseekV3ForCausalLM";
  Ds s;
  s.d = dims;
  k.need("norm", "\"rmsnorm\"", arch), k.need("activation", "\"swiglu\"", arch);
  k.need("bias", "false", arch), k.need("moe_router_score_function", "\"sigmoid\"", arch);
  k.need("moe_expert_capacity_factor", lit_f(0.0), arch);
  s.qr = k.num("q_lora_rank"), s.r = k.num("kv_lora_rank"), s.dn = k.num("qk_head_dim");
  s.dr = k.num("qk_pos_emb_head_dim"), s.dv = k.num("v_head_dim");
  s.E = k.num("num_experts", 0), s.Fe = k.num("moe_ffn_hidden_size");
  s.S = k.num("moe_shared_expert_intermediate_size", 0);
  s.tied = k.at("tie_embeddings") == "true";
  s.mtp = k.num("mtp_num_layers", 0);
  const int64_t K = k.num("moe_router_topk");
  if (s.E == 0 || s.S == 0 || s.S % s.Fe != 0 || K < 2)
    throw RunError("export-hf: " + arch +
                   " needs experts (num_experts > 0, moe_router_topk "
                   ">= 2) and a shared expert of a multiple of moe_ffn_hidden_size");
  // the dense layers first, then a mixture in every layer
  const std::vector<uint8_t> pattern = k.moe_layers(dims.L);
  while (s.first_dense < dims.L && !pattern[(size_t)s.first_dense]) ++s.first_dense;
  for (int64_t l = s.first_dense; l < dims.L; ++l)
    if (!pattern[(size_t)l])
      throw RunError("export-hf: model.moe_layer_freq = " + k.get("moe_layer_freq", "1") +
                     " puts a dense layer after "
                     "a MoE layer; " +
                     arch + " has its dense layers first");
  const int64_t G = k.num("moe_router_num_groups", 0), g = k.num("moe_router_group_topk", 0);
  if (G > 1 && K != 2 * g)
    throw RunError("export-hf: moe_router_topk = " + std::to_string(K) +
                   " is not twice moe_router_group_topk = " + std::to_string(g) + ": " + arch +
                   " scores a group by its best 2 experts");
  const double scale = std::stod(k.get("moe_router_topk_scaling_factor", "0.0"));
  c["architectures"] = {arch}, c["model_type"] = "deepseek_v3";
  c["hidden_size"] = dims.C, c["intermediate_size"] = dims.F, c["num_hidden_layers"] = dims.L;
  c["num_attention_heads"] = dims.H, c["num_key_value_heads"] = dims.H;
  c["max_position_embeddings"] = dims.P, c["hidden_act"] = "silu";
  c["rms_norm_eps"] = std::stod(k.at("norm_eps")), c["rope_theta"] = std::stod(k.at("rope_theta"));
  c["tie_word_embeddings"] = s.tied, c["attention_bias"] = false, c["rope_interleave"] = true;
  c["q_lora_rank"] = s.qr > 0 ? json(s.qr) : json(nullptr), c["kv_lora_rank"] = s.r;
  c["qk_nope_head_dim"] = s.dn, c["qk_rope_head_dim"] = s.dr, c["v_head_dim"] = s.dv;
  c["n_routed_experts"] = s.E, c["moe_intermediate_size"] = s.Fe;
  c["n_shared_experts"] = s.S / s.Fe, c["num_experts_per_tok"] = K;
  c["first_k_dense_replace"] = s.first_dense, c["norm_topk_prob"] = true;
  c["n_group"] = G > 1 ? G : 1, c["topk_group"] = G > 1 ? g : 1;
  c["routed_scaling_factor"] = scale > 0 ? scale : 1.0;
  c["rope_scaling"] = write_rope_scaling(k);
  // transformers saves 1 without the module's tensors: an import of that keeps its value
  if (s.mtp > 0 || !c.contains("num_nextn_predict_layers")) c["num_nextn_predict_layers"] = s.mtp;
  HfArch a = build(s);
  return {a, c};
}

}  // namespace loom::engine::hf
