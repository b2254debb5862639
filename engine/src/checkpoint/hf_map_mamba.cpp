// Hugging Face interop, Mamba2ForCausalLM's mapping (hf_config.hpp) onto model/gpt's hybrid
// stack with every layer a Mamba-2 mixer (hybrid_override_pattern "MM...M", no position
// encoding; docs/interop.md has the table):
//  - backbone.embeddings, backbone.layers.N.norm, backbone.norm_f, lm_head as wte, h.N.norm,
//    ln_f, lm_head;
//  - each mixer's in_proj (z|x|B|C|dt rows), conv1d (stored (channels, 1, K): Loom's (channels,
//    K)), dt_bias, A_log, D, norm (the gated RMSNorm's weight) and out_proj by their names.
// The gated norm: Loom normalises each group of heads apart, as mamba_ssm's kernels, Megatron
// and transformers' fused path do; transformers' eager path normalises all the channels at
// once, which is the same with n_groups = 1 (docs/models.md).
// NemotronH's hybrids (attention and squared-ReLU MLP layers between the mixers) are refused
// by name: model/gpt has no squared ReLU.
#include <cmath>

#include "checkpoint/hf_config.hpp"

namespace loom::engine::hf {
namespace {

struct Mb {
  Dims d{};
  int64_t heads = 0, head_dim = 0, groups = 0, state = 0, conv = 0;
  bool tied = false, bias = false;
  int64_t inner() const { return heads * head_dim; }
  int64_t conv_dim() const { return inner() + 2 * groups * state; }
};

HfArch build(const Mb& s) {
  HfArch a;
  a.name = "mamba2";
  const Dims& d = s.d;
  a.vocab = d.V;
  const int64_t C = d.C, di = s.inner(), cd = s.conv_dim();
  a.rules.push_back({"wte", {"backbone.embeddings.weight"}, {{d.V, C}}, false, true});
  for (int64_t l = 0; l < d.L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    const std::string m = "backbone.layers." + std::to_string(l) + ".";
    const std::string x = h + "mixer.", hx = m + "mixer.";
    rule(a, h + "norm.weight", {m + "norm.weight"}, {{C}});
    rule(a, x + "in_proj.weight", {hx + "in_proj.weight"}, {{di + cd + s.heads, C}});
    if (s.bias) rule(a, x + "in_proj.bias", {hx + "in_proj.bias"}, {{di + cd + s.heads}});
    rule(a, x + "conv1d.weight", {hx + "conv1d.weight"}, {{cd, 1, s.conv}}, {cd, s.conv});
    rule(a, x + "conv1d.bias", {hx + "conv1d.bias"}, {{cd}});
    for (const char* p : {"dt_bias", "A_log", "D"}) rule(a, x + p, {hx + p}, {{s.heads}});
    rule(a, x + "norm.weight", {hx + "norm.weight"}, {{di}});
    rule(a, x + "out_proj.weight", {hx + "out_proj.weight"}, {{C, di}});
    if (s.bias) rule(a, x + "out_proj.bias", {hx + "out_proj.bias"}, {{C}});
  }
  head_rules(a, "backbone.norm_f.weight", s.tied, d.V, C);
  return a;
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
  // transformers' default (0.0, inf), Infinity as read_json spells it
  r.require("time_step_limit", {json::array({0.0, "Infinity"}), json::array({0, "Infinity"})},
            "model/gpt does not clamp the step dt");
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
  HfArch a = build(s);
  a.model_keys = {{"n_layer", lit(d.L)},
                  {"hybrid_override_pattern", lit_s(std::string((size_t)d.L, 'M'))},
                  {"n_head", lit(int64_t{1})},
                  {"n_embd", lit(d.C)},
                  {"norm", lit_s("rmsnorm")},
                  {"position", lit_s("none")},
                  {"bias", lit(s.bias)},
                  {"tie_embeddings", lit(s.tied)},
                  {"norm_eps", lit_f(eps)},
                  // no position table to bound: the imported recipe's seq_len comes from it
                  {"max_seq_len", lit(int64_t{4096})},
                  {"mamba_num_heads", lit(s.heads)},
                  {"mamba_head_dim", lit(s.head_dim)},
                  {"mamba_num_groups", lit(s.groups)},
                  {"mamba_state_dim", lit(s.state)},
                  {"mamba_conv_kernel", lit(s.conv)},
                  {"mamba_chunk_size", lit(chunk)}};
  return a;
}

// NemotronH's config (model_type "nemotron_h"): refused by name, saying why.
HfArch nemotron_h_refused(ConfigReader& r) {
  r.fail("model_type",
         "= \"nemotron_h\" does not map onto model/gpt yet: its MLP layers use squared ReLU "
         "(mlp_hidden_act = \"relu2\"), which model/gpt has no activation for; its Mamba and "
         "attention layers would map (hybrid_override_pattern)");
}

std::pair<HfArch, json> mamba2_from_model(const ModelKeys& k, const Dims& dims, json c) {
  const std::string arch = "Mamba2ForCausalLM";
  std::string pattern = k.at("hybrid_override_pattern");
  if (pattern.size() >= 2 && pattern.front() == '"')
    pattern = pattern.substr(1, pattern.size() - 2);
  if (pattern.find_first_not_of('M') != std::string::npos)
    throw RunError("export-hf: model.hybrid_override_pattern = \"" + pattern + "\" has " +
                   "attention, MLP or MoE layers; " + arch +
                   " has Mamba layers only (NemotronH's MLPs are squared-ReLU, which "
                   "model/gpt lacks)");
  k.need("norm", "\"rmsnorm\"", arch), k.need("position", "\"none\"", arch);
  Mb s;
  s.d = dims;
  s.heads = k.num("mamba_num_heads"), s.head_dim = k.num("mamba_head_dim");
  s.groups = k.num("mamba_num_groups"), s.state = k.num("mamba_state_dim");
  s.conv = k.num("mamba_conv_kernel"), s.bias = k.at("bias") == "true";
  s.tied = k.at("tie_embeddings") == "true";
  if (s.heads == 0) s.heads = 2 * dims.C / s.head_dim;  // the key's default
  c["architectures"] = {arch}, c["model_type"] = "mamba2";
  c["hidden_size"] = dims.C, c["num_hidden_layers"] = dims.L;
  c["num_heads"] = s.heads, c["head_dim"] = s.head_dim, c["n_groups"] = s.groups;
  c["state_size"] = s.state, c["conv_kernel"] = s.conv;
  c["chunk_size"] = k.num("mamba_chunk_size");
  const int64_t di = s.inner();
  if (di % dims.C == 0)
    c["expand"] = di / dims.C;
  else
    c["expand"] = (double)di / (double)dims.C;
  c["use_bias"] = s.bias, c["use_conv_bias"] = true, c["hidden_act"] = "silu";
  c["rms_norm"] = true, c["layer_norm_epsilon"] = std::stod(k.at("norm_eps"));
  c["tie_word_embeddings"] = s.tied, c["residual_in_fp32"] = true;
  c.erase("time_step_limit");  // transformers' default, unclamped (its Infinity is no JSON)
  return {build(s), c};
}

}  // namespace loom::engine::hf
