// Hugging Face interop, the mappings (hf_config.hpp) of Mamba2ForCausalLM (every layer a
// Mamba-2 mixer) and NemotronHForCausalLM (Mamba-2, attention and squared-ReLU MLP layers by
// hybrid_override_pattern) onto model/gpt's hybrid stack, no position encoding
// (docs/interop.md has the table):
//  - backbone.embeddings, backbone.layers.N.norm, backbone.norm_f, lm_head as wte, h.N.norm,
//    ln_f, lm_head (NemotronH's files may say model. for backbone., as transformers' own
//    class names its base model, and embedding for embeddings, as older hub files do);
//  - each mixer's in_proj (z|x|B|C|dt rows), conv1d (stored (channels, 1, K): Loom's (channels,
//    K)), dt_bias, A_log, D, norm (the gated RMSNorm's weight) and out_proj by their names;
//  - NemotronH's attention mixer: q_proj, k_proj, v_proj stacked into attn.c_attn, o_proj as
//    attn.c_proj; its MLP mixer: up_proj as mlp.c_fc, down_proj as mlp.c_proj (relu2 =
//    model/gpt's squared_relu, ABI 2.24).
// The gated norm: Loom normalises each group of heads apart, as mamba_ssm's kernels, Megatron
// and transformers' fused path do; transformers' eager path normalises all the channels at
// once, which is the same with n_groups = 1 (docs/models.md).
#include <algorithm>
#include <cmath>

#include "checkpoint/hf_config.hpp"

namespace loom::engine::hf {
namespace {

struct Mb {
  Dims d{};  // H, KV, F: NemotronH's attention and MLP layers
  int64_t heads = 0, head_dim = 0, groups = 0, state = 0, conv = 0;
  int64_t attn_dim = 0;  // NemotronH's attention head dim
  std::string pattern;   // each layer's kind: M, * or -
  std::string prefix = "backbone.";
  std::string embedding = "embeddings.weight";  // NemotronH's older files: embedding.weight
  bool tied = false, bias = false;
  int64_t inner() const { return heads * head_dim; }
  int64_t conv_dim() const { return inner() + 2 * groups * state; }
};

// Layer h's attention (q|k|v stacked) or squared-ReLU MLP from NemotronH's mixer hx.
void nemotron_rules(HfArch& a, const Mb& s, char kind, const std::string& h,
                    const std::string& hx) {
  const int64_t C = s.d.C, q = s.d.H * s.attn_dim, kv = s.d.KV * s.attn_dim, F = s.d.F;
  if (kind == '*') {
    rule(a, h + "attn.c_attn.weight",
         {hx + "q_proj.weight", hx + "k_proj.weight", hx + "v_proj.weight"},
         {{q, C}, {kv, C}, {kv, C}});
    if (s.bias)
      rule(a, h + "attn.c_attn.bias", {hx + "q_proj.bias", hx + "k_proj.bias", hx + "v_proj.bias"},
           {{q}, {kv}, {kv}});
    rule(a, h + "attn.c_proj.weight", {hx + "o_proj.weight"}, {{C, q}});
    if (s.bias) rule(a, h + "attn.c_proj.bias", {hx + "o_proj.bias"}, {{C}});
    return;
  }
  rule(a, h + "mlp.c_fc.weight", {hx + "up_proj.weight"}, {{F, C}});
  if (s.bias) rule(a, h + "mlp.c_fc.bias", {hx + "up_proj.bias"}, {{F}});
  rule(a, h + "mlp.c_proj.weight", {hx + "down_proj.weight"}, {{C, F}});
  if (s.bias) rule(a, h + "mlp.c_proj.bias", {hx + "down_proj.bias"}, {{C}});
}

HfArch build(const Mb& s) {
  HfArch a;
  a.name = s.pattern.find_first_not_of('M') == std::string::npos ? "mamba2" : "nemotron_h";
  const Dims& d = s.d;
  a.vocab = d.V;
  const int64_t C = d.C, di = s.inner(), cd = s.conv_dim();
  a.rules.push_back({"wte", {s.prefix + s.embedding}, {{d.V, C}}, false, true});
  for (int64_t l = 0; l < d.L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    const std::string m = s.prefix + "layers." + std::to_string(l) + ".";
    const std::string x = h + "mixer.", hx = m + "mixer.";
    rule(a, h + "norm.weight", {m + "norm.weight"}, {{C}});
    if (s.pattern[(size_t)l] != 'M') {
      nemotron_rules(a, s, s.pattern[(size_t)l], h, hx);
      continue;
    }
    rule(a, x + "in_proj.weight", {hx + "in_proj.weight"}, {{di + cd + s.heads, C}});
    if (s.bias) rule(a, x + "in_proj.bias", {hx + "in_proj.bias"}, {{di + cd + s.heads}});
    rule(a, x + "conv1d.weight", {hx + "conv1d.weight"}, {{cd, 1, s.conv}}, {cd, s.conv});
    rule(a, x + "conv1d.bias", {hx + "conv1d.bias"}, {{cd}});
    for (const char* p : {"dt_bias", "A_log", "D"}) rule(a, x + p, {hx + p}, {{s.heads}});
    rule(a, x + "norm.weight", {hx + "norm.weight"}, {{di}});
    rule(a, x + "out_proj.weight", {hx + "out_proj.weight"}, {{C, di}});
    if (s.bias) rule(a, x + "out_proj.bias", {hx + "out_proj.bias"}, {{C}});
  }
  head_rules(a, s.prefix + "norm_f.weight", s.tied, d.V, C);
  return a;
}

// The Mamba-2 [model] keys of an import.
std::map<std::string, std::string> mamba_keys(const Mb& s, double eps, int64_t chunk) {
  return {{"n_layer", lit(s.d.L)},
          {"hybrid_override_pattern", lit_s(s.pattern)},
          {"n_embd", lit(s.d.C)},
          {"norm", lit_s("rmsnorm")},
          {"position", lit_s("none")},
          {"bias", lit(s.bias)},
          {"tie_embeddings", lit(s.tied)},
          {"norm_eps", lit_f(eps)},
          {"mamba_num_heads", lit(s.heads)},
          {"mamba_head_dim", lit(s.head_dim)},
          {"mamba_num_groups", lit(s.groups)},
          {"mamba_state_dim", lit(s.state)},
          {"mamba_conv_kernel", lit(s.conv)},
          {"mamba_chunk_size", lit(chunk)}};
}

// Mamba's time step must not be clamped: transformers' default (0.0, inf), Infinity as
// read_json spells it.
void unclamped_time_step(ConfigReader& r, const std::string& key) {
  r.require(key, {json::array({0.0, "Infinity"}), json::array({0, "Infinity"})},
            "model/gpt does not clamp the step dt");
}

}  // namespace

HfArch mamba2_from_config(ConfigReader& r) {
  Mb s;
  Dims& d = s.d;
  d.V = r.integer("vocab_size"), d.C = r.integer("hidden_size");
  d.L = r.integer("num_hidden_layers");
  s.heads = r.integer("num_heads"), s.head_dim = r.integer("head_dim");
  s.groups = r.integer("n_groups", 1), s.state = r.integer("state_size");
  s.conv = r.integer("conv_kernel", 4);
  const int64_t chunk = r.integer("chunk_size", 256);
  const double expand = r.number("expand", 2.0);
  if (std::abs(expand * (double)d.C - (double)s.inner()) > 0.5)
    r.fail("expand", "x hidden_size must equal num_heads x head_dim (the mixer's width)");
  if (s.heads % s.groups != 0) r.fail("n_groups", "must divide num_heads");
  s.bias = r.flag("use_bias", false);
  s.tied = r.flag("tie_word_embeddings", false);
  const double eps = r.number("layer_norm_epsilon", 1e-5);
  r.require("use_conv_bias", {true}, "model/gpt's convolution has a bias");
  r.require("hidden_act", {"silu", "swish"}, "the convolution's activation is SiLU");
  r.require("rms_norm", {true}, "model/gpt's Mamba layers normalise with RMSNorm");
  r.require("norm_before_gate", {false}, "the gate applies before the norm (Mamba-2's)");
  unclamped_time_step(r, "time_step_limit");
  // newer transformers name each layer's kind: every one must be a Mamba mixer
  if (const json* kinds = r.get("layer_types")) {
    bool mamba = kinds->is_array() && (int64_t)kinds->size() == d.L;
    for (const json& k : mamba ? *kinds : json::array())
      mamba = mamba && k.is_string() && k.get<std::string>().rfind("mamba", 0) == 0;
    if (!mamba) r.fail("layer_types", "must name num_hidden_layers Mamba layers");
  }
  // Init-time settings and the residual's dtype: nothing that changes the function.
  r.benign({"time_step_rank", "time_step_min", "time_step_max", "time_step_floor",
            "rescale_prenorm_residual", "residual_in_fp32"});
  r.refuse_unread();
  s.pattern = std::string((size_t)d.L, 'M');
  HfArch a = build(s);
  a.model_keys = mamba_keys(s, eps, chunk);
  a.model_keys["n_head"] = lit(int64_t{1});
  // no position table to bound: the imported recipe's seq_len comes from it
  a.model_keys["max_seq_len"] = lit(int64_t{4096});
  return a;
}

namespace {

// NemotronH's layer kinds, one character each (M, *, -, E): hybrid_override_pattern, or the
// list transformers 5 saves (layers_block_type, or layer_types by its attribute map), by its
// new names or the old ones; given twice, they must agree.
std::string nemotron_pattern(ConfigReader& r) {
  std::string pattern;
  if (const json* p = r.get("hybrid_override_pattern")) {
    if (!p->is_string()) r.fail("hybrid_override_pattern", "is not a string");
    pattern = p->get<std::string>();
  }
  for (const char* key : {"layers_block_type", "layer_types"}) {
    const json* v = r.get(key);
    if (!v) continue;
    std::string kinds;
    bool ok = v->is_array();
    for (const json& k : ok ? *v : json::array()) {
      const std::string n = k.is_string() ? k.get<std::string>() : "";
      const char c = n == "mamba" || n == "linear_attention"     ? 'M'
                     : n == "attention" || n == "full_attention" ? '*'
                     : n == "mlp"                                ? '-'
                     : n == "moe"                                ? 'E'
                                                                 : '?';
      ok = ok && c != '?';
      kinds += c;
    }
    if (!ok)
      r.fail(key, "= " + v->dump() +
                      " names a layer kind other than mamba, attention, "
                      "mlp and moe");
    if (!pattern.empty() && kinds != pattern)
      r.fail(key, "= " + v->dump() + " disagrees with \"" + pattern + "\"");
    pattern = kinds;
  }
  if (pattern.empty()) r.fail("hybrid_override_pattern", "is missing (and layers_block_type)");
  if (pattern.find_first_not_of("M*-E") != std::string::npos)
    r.fail("hybrid_override_pattern",
           "= \"" + pattern + "\" has a kind other than M (Mamba-2), * (attention), - (MLP), E");
  if (pattern.find('E') != std::string::npos)
    r.fail("hybrid_override_pattern",
           "= \"" + pattern +
               "\" has MoE layers (E): NemotronH's experts (squared ReLU without a "
               "gate, latent projections) do not map onto model/gpt yet");
  return pattern;
}

// The first of `keys` the config has (NemotronH's older configs say mamba_n_groups,
// mamba_d_conv, ...), else `dflt`.
int64_t either(ConfigReader& r, std::initializer_list<const char*> keys, int64_t dflt) {
  for (const char* k : keys)
    if (r.get(k)) return r.integer(k);
  return dflt;
}

}  // namespace

HfArch nemotron_h_from_config(ConfigReader& r, const StFile& shapes) {
  Mb s;
  Dims& d = s.d;
  s.pattern = nemotron_pattern(r);
  d.L = (int64_t)s.pattern.size();
  if (r.integer("num_hidden_layers", d.L) != d.L)
    r.fail("num_hidden_layers",
           "must equal the " + std::to_string(d.L) + " layers hybrid_override_pattern names");
  d.V = r.integer("vocab_size"), d.C = r.integer("hidden_size");
  d.H = r.integer("num_attention_heads"), d.KV = r.integer("num_key_value_heads", d.H);
  s.attn_dim = either(r, {"head_dim", "attention_head_dim"}, d.C / d.H);
  if (d.H % d.KV != 0) r.fail("num_key_value_heads", "must divide num_attention_heads");
  d.F = r.integer("intermediate_size");
  s.heads = r.integer("mamba_num_heads"), s.head_dim = r.integer("mamba_head_dim");
  s.groups = either(r, {"n_groups", "mamba_n_groups"}, 8);
  s.state = r.integer("ssm_state_size"), s.conv = either(r, {"conv_kernel", "mamba_d_conv"}, 4);
  const int64_t chunk = either(r, {"chunk_size", "mamba_chunk_size"}, 128);
  if (s.heads % s.groups != 0) r.fail("n_groups", "must divide mamba_num_heads");
  // model/gpt has one bias key for every projection: Mamba's, the attention's, the MLP's
  s.bias = r.flag("use_bias", false);
  for (const char* k : {"mlp_bias", "attention_bias", "mamba_proj_bias"})
    r.require(k, {s.bias}, "model/gpt's bias key covers every projection: it must equal use_bias");
  for (const char* k : {"use_conv_bias", "mamba_conv_bias"})
    r.require(k, {true}, "model/gpt's convolution has a bias");
  r.require("mlp_hidden_act", {"relu2"}, "model/gpt's squared_relu is relu2");
  r.require("mamba_hidden_act", {"silu", "swish"}, "the convolution's activation is SiLU");
  for (const char* k : {"time_step_limit", "mamba_dt_limit"}) unclamped_time_step(r, k);
  r.require("sliding_window", {}, "model/gpt's NemotronH attention sees the whole sequence");
  r.require("num_nextn_predict_layers", {0}, "NemotronH's multi-token prediction does not map yet");
  s.tied = r.flag("tie_word_embeddings", false);
  const double eps = r.number("layer_norm_epsilon", 1e-5);
  const int64_t max_len = r.integer("max_position_embeddings", 4096);
  // Init-time settings, kernels, caches and the residual's dtype: nothing that changes the
  // function; the experts' and the MTP layers' settings, which no layer here uses (E and MTP
  // are refused above).
  r.benign({"expand",
            "mamba_expand",
            "time_step_min",
            "time_step_max",
            "time_step_floor",
            "mamba_dt_min",
            "mamba_dt_max",
            "mamba_dt_init_floor",
            "time_step_rank",
            "rescale_prenorm_residual",
            "residual_in_fp32",
            "use_mamba_kernels",
            "mamba_ssm_cache_dtype",
            "num_logits_to_keep",
            "attention_dropout",
            "hidden_dropout",
            "n_routed_experts",
            "num_local_experts",
            "n_shared_experts",
            "moe_intermediate_size",
            "moe_shared_expert_intermediate_size",
            "moe_latent_size",
            "moe_shared_expert_overlap",
            "num_experts_per_tok",
            "routed_scaling_factor",
            "n_group",
            "topk_group",
            "norm_topk_prob",
            "mtp_layers_block_type",
            "mtp_hybrid_override_pattern"});
  r.refuse_unread();
  // The hub's files say backbone., transformers' own class model.; some older ones name the
  // embedding embedding.weight (transformers renames both on load, and so does this).
  if (!shapes.count("backbone.embeddings.weight") && !shapes.count("backbone.embedding.weight"))
    s.prefix = "model.";
  if (shapes.count(s.prefix + "embedding.weight")) s.embedding = "embedding.weight";
  HfArch a = build(s);
  a.model_keys = mamba_keys(s, eps, chunk);
  a.model_keys.insert({{"n_head", lit(d.H)},
                       {"n_kv_head", lit(d.KV)},
                       {"kv_channels", lit(s.attn_dim)},
                       {"ffn_hidden", lit(d.F)},
                       {"activation", lit_s("squared_relu")},
                       {"max_seq_len", lit(max_len)}});
  return a;
}

namespace {

// The Mamba-2 settings of an export's [model] keys.
Mb mamba_from_keys(const ModelKeys& k, const Dims& dims, const std::string& pattern) {
  Mb s;
  s.d = dims;
  s.pattern = pattern;
  s.heads = k.num("mamba_num_heads"), s.head_dim = k.num("mamba_head_dim");
  s.groups = k.num("mamba_num_groups"), s.state = k.num("mamba_state_dim");
  s.conv = k.num("mamba_conv_kernel"), s.bias = k.at("bias") == "true";
  s.tied = k.at("tie_embeddings") == "true";
  if (s.heads == 0) s.heads = 2 * dims.C / s.head_dim;  // the key's default
  return s;
}

// expand = the mixer's width over hidden_size, an integer where it divides (NemotronH's
// config types it so; its mixer takes the width from the heads, so another is left out).
void write_expand(json& c, const Mb& s, bool integer_only) {
  const int64_t di = s.inner(), C = s.d.C;
  if (di % C == 0)
    c["expand"] = di / C;
  else if (!integer_only)
    c["expand"] = (double)di / (double)C;
}

std::pair<HfArch, json> nemotron_h_from_model(const ModelKeys& k, const Dims& dims,
                                              const std::string& pattern, json c) {
  const std::string arch = "NemotronHForCausalLM";
  if (pattern.find('E') != std::string::npos)
    throw RunError("export-hf: model.hybrid_override_pattern = \"" + pattern +
                   "\" has MoE layers (E), which " + arch + " export does not map yet");
  k.need("norm", "\"rmsnorm\"", arch), k.need("position", "\"none\"", arch);
  k.need("activation", "\"squared_relu\"", arch);
  for (const char* q : {"qk_layernorm", "add_qkv_bias"}) k.need(q, "false", arch, "false");
  k.need("mtp_num_layers", "0", arch, "0");
  Mb s = mamba_from_keys(k, dims, pattern);
  s.attn_dim = k.num("kv_channels", 0);
  if (s.attn_dim == 0) s.attn_dim = dims.C / dims.H;
  c["architectures"] = {arch}, c["model_type"] = "nemotron_h";
  c["hidden_size"] = dims.C, c["num_hidden_layers"] = dims.L;
  c["hybrid_override_pattern"] = pattern;
  c["num_attention_heads"] = dims.H, c["num_key_value_heads"] = dims.KV;
  c["head_dim"] = s.attn_dim, c["intermediate_size"] = dims.F, c["mlp_hidden_act"] = "relu2";
  c["mamba_num_heads"] = s.heads, c["mamba_head_dim"] = s.head_dim, c["n_groups"] = s.groups;
  c["ssm_state_size"] = s.state, c["conv_kernel"] = s.conv;
  c["chunk_size"] = k.num("mamba_chunk_size");
  write_expand(c, s, true);
  c["use_bias"] = s.bias, c["mlp_bias"] = s.bias, c["attention_bias"] = s.bias;
  c["use_conv_bias"] = true, c["mamba_hidden_act"] = "silu";
  c["layer_norm_epsilon"] = std::stod(k.at("norm_eps"));
  c["tie_word_embeddings"] = s.tied, c["max_position_embeddings"] = dims.P;
  c["num_nextn_predict_layers"] = 0;
  c.erase("time_step_limit");  // transformers' default, unclamped (its Infinity is no JSON)
  return {build(s), c};
}

}  // namespace

std::pair<HfArch, json> mamba2_from_model(const ModelKeys& k, const Dims& dims, json c) {
  std::string pattern = k.at("hybrid_override_pattern");
  if (pattern.size() >= 2 && pattern.front() == '"')
    pattern = pattern.substr(1, pattern.size() - 2);
  if (pattern.find_first_not_of('M') != std::string::npos)
    return nemotron_h_from_model(k, dims, pattern, c);
  const std::string arch = "Mamba2ForCausalLM";
  k.need("norm", "\"rmsnorm\"", arch), k.need("position", "\"none\"", arch);
  const Mb s = mamba_from_keys(k, dims, pattern);
  c["architectures"] = {arch}, c["model_type"] = "mamba2";
  c["hidden_size"] = dims.C, c["num_hidden_layers"] = dims.L;
  c["num_heads"] = s.heads, c["head_dim"] = s.head_dim, c["n_groups"] = s.groups;
  c["state_size"] = s.state, c["conv_kernel"] = s.conv;
  c["chunk_size"] = k.num("mamba_chunk_size");
  write_expand(c, s, false);
  c["use_bias"] = s.bias, c["use_conv_bias"] = true, c["hidden_act"] = "silu";
  c["rms_norm"] = true, c["layer_norm_epsilon"] = std::stod(k.at("norm_eps"));
  c["tie_word_embeddings"] = s.tied, c["residual_in_fp32"] = true;
  c.erase("time_step_limit");  // transformers' default, unclamped (its Infinity is no JSON)
  return {build(s), c};
}

}  // namespace loom::engine::hf
