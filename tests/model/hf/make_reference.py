#!/usr/bin/python3
"""Builds the tiny Hugging Face model directories under tests/model/hf/ and their reference
logits, independently of Loom. Run once with Debian's python3-torch (no `transformers`: the
forward passes below are written from transformers' GPT2LMHeadModel, LlamaForCausalLM,
MixtralForCausalLM, the Qwen2/Qwen3 (MoE) models, DeepSeek-V3, Mamba-2 and NemotronH: Conv1D, gelu_new, rotate-half RoPE with
repeat_kv, RMSNorm, QK-norm, the sparse MoE blocks), then committed:

    /usr/bin/python3 tests/model/hf/make_reference.py

Each directory holds config.json (the keys save_pretrained writes), the weights in
safetensors exactly as save_pretrained names and lays them out, prompt.txt (token ids) and
reference.safetensors ("logits": prompt tokens x vocabulary, float64 computed from the
stored weights). tests/model/hf_interop.sh imports each into Loom and compares.

  gpt2-f32             GPT2LMHeadModel, "transformer." names, one file
  gpt2-f16-base        GPT2Model-style names (no prefix) as the hub's gpt2 has, with the
                       causal-mask buffers h.N.attn.bias that older versions stored, float16
  llama-gqa-f32        LlamaForCausalLM, 4 query / 2 key-value heads, untied head,
                       rope_theta 500000 (Llama-3 shape), two shards with an index
  llama-mqa-tied-bf16  1 key-value head, tied embeddings, bfloat16
  mixtral-f32          MixtralForCausalLM: 4 SwiGLU experts, top-2, GQA, untied, rope_theta 1e6
  qwen2-f32            Qwen2ForCausalLM: biases on q, k, v (not o), GQA, untied
  qwen3-tied-bf16      Qwen3ForCausalLM: QK-norm, head_dim 8 over hidden 16 / 4 heads, tied
  qwen2-moe-f32        Qwen2MoeForCausalLM: 4 experts, top-2 unnormalised, a gated shared expert;
                       layer 1 dense (mlp_only_layers)
  qwen3-moe-f32        Qwen3MoeForCausalLM: 4 experts, top-2 renormalised (norm_topk_prob)
  deepseek-v3-bf16     DeepseekV3ForCausalLM: MLA with interleaved rotary pairs, the first layer
                       dense, 8 experts in 4 groups (top-4 of the best 2), x 2.5, a shared
                       expert; bf16 with the router bias in float32
  llama-rope-llama3-f32  Llama with Llama 3.1's rope_scaling (llama3) over an original context of 8
  deepseek-v3-yarn-bf16  DeepSeek-V3 with YaRN (factor 4, mscale 0.8 over mscale_all_dim 1)
  mamba2-f32           Mamba2ForCausalLM: 3 Mamba-2 mixers, 8 heads of 4 in 2 groups, a state
                       of 5, 4 taps, untied; the gated norm per group (mamba_ssm's kernels and
                       transformers' fused path; its eager path normalises all channels at once)
  nemotron-h-f32       NemotronHForCausalLM: "M*-M" (Mamba-2, attention without position
                       encoding over 4 query / 2 key-value heads of 6, a squared-ReLU MLP), untied
"""
import json
import math
import os
import struct

import torch

from rope_scaling import inv_freq_and_factor, softmax_mscale2
from ssm_models import mamba2, mamba_weights, nemotron_h, rms_norm

HERE = os.path.dirname(os.path.abspath(__file__))
V, T = 96, 12


def write_safetensors(path, tensors):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else \
            t.numpy().tobytes()
        dt = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
              torch.float64: "F64"}[t.dtype]
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def save(name, config, tensors, logits, prompt, shards=1):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    names = sorted(tensors)
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), tensors)
    else:
        per = math.ceil(len(names) / shards)
        weight_map = {}
        for i in range(shards):
            fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: tensors[n] for n in names[i * per:(i + 1) * per]}
            write_safetensors(os.path.join(d, fname), part)
            weight_map.update({n: fname for n in part})
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    write_safetensors(os.path.join(d, "reference.safetensors"), {"logits": logits})
    with open(os.path.join(d, "prompt.txt"), "w") as f:
        f.write(" ".join(str(int(i)) for i in prompt) + "\n")


def rand(g, *shape, std=0.3, mean=0.0):
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * std + mean).float()


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def causal_attention(q, k, v):  # (H, T, D) each, kv already repeated
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    mask = torch.triu(torch.ones(s.shape[-2:], dtype=torch.bool), 1)
    return torch.softmax(s.masked_fill(mask, float("-inf")), -1) @ v


def gpt2(w, cfg, prompt, p=""):
    C, H, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    f = {k: t.double() for k, t in w.items()}
    x = f[p + "wte.weight"][prompt] + f[p + "wpe.weight"][: len(prompt)]
    for l in range(cfg["n_layer"]):
        h = f"{p}h.{l}."
        a = layer_norm(x, f[h + "ln_1.weight"], f[h + "ln_1.bias"], eps)
        qkv = a @ f[h + "attn.c_attn.weight"] + f[h + "attn.c_attn.bias"]  # Conv1D: x W + b
        q, k, v = (t.view(len(prompt), H, C // H).transpose(0, 1) for t in qkv.split(C, -1))
        y = causal_attention(q, k, v).transpose(0, 1).reshape(len(prompt), C)
        x = x + y @ f[h + "attn.c_proj.weight"] + f[h + "attn.c_proj.bias"]
        m = layer_norm(x, f[h + "ln_2.weight"], f[h + "ln_2.bias"], eps)
        m = gelu_new(m @ f[h + "mlp.c_fc.weight"] + f[h + "mlp.c_fc.bias"])
        x = x + m @ f[h + "mlp.c_proj.weight"] + f[h + "mlp.c_proj.bias"]
    x = layer_norm(x, f[p + "ln_f.weight"], f[p + "ln_f.bias"], eps)
    return x @ f[p + "wte.weight"].T


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), -1)


def mixtral_moe(f, m, h, cfg):
    """MixtralSparseMoeBlock: softmax over the experts, top-k, the weights renormalised,
    each expert w2(silu(w1 x) * w3 x)."""
    E, K = cfg["num_local_experts"], cfg["num_experts_per_tok"]
    probs = torch.softmax(h @ f[m + "gate.weight"].T, -1)
    top, idx = torch.topk(probs, K, -1)
    top = top / top.sum(-1, keepdim=True)
    out = torch.zeros_like(h)
    for e in range(E):
        x = f"{m}experts.{e}."
        y = (torch.nn.functional.silu(h @ f[x + "w1.weight"].T) * (h @ f[x + "w3.weight"].T)) \
            @ f[x + "w2.weight"].T
        weight = (top * (idx == e)).sum(-1, keepdim=True)  # 0 where e is not chosen
        out = out + weight * y
    return out


def swiglu_mlp(f, p, h, gate="gate_proj", up="up_proj", down="down_proj"):
    """LlamaMLP and the experts of Qwen's MoE: down(silu(gate x) * up x)."""
    return (torch.nn.functional.silu(h @ f[p + gate + ".weight"].T) * (h @ f[p + up + ".weight"].T)) \
        @ f[p + down + ".weight"].T


def qwen_moe(f, m, h, cfg):
    """Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock: softmax over the experts, top-k,
    renormalised only with norm_topk_prob; Qwen2-MoE adds its shared expert scaled by
    sigmoid(shared_expert_gate x)."""
    E, K = cfg["num_experts"], cfg["num_experts_per_tok"]
    probs = torch.softmax(h @ f[m + "gate.weight"].T, -1)
    top, idx = torch.topk(probs, K, -1)
    if cfg["norm_topk_prob"]:
        top = top / top.sum(-1, keepdim=True)
    out = torch.zeros_like(h)
    for e in range(E):
        weight = (top * (idx == e)).sum(-1, keepdim=True)
        out = out + weight * swiglu_mlp(f, f"{m}experts.{e}.", h)
    if "shared_expert_intermediate_size" in cfg:
        gate = torch.sigmoid(h @ f[m + "shared_expert_gate.weight"].T)
        out = out + gate * swiglu_mlp(f, m + "shared_expert.", h)
    return out


def llama(w, cfg, prompt):
    """LlamaForCausalLM, and what Mixtral and Qwen2/3 (dense and MoE) change in it: q/k/v
    biases where the weights have them (Qwen2), q_norm/k_norm RMSNorm over each head before
    RoPE (Qwen3), head_dim apart from hidden_size / heads, and the MoE blocks."""
    C, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D, eps, Tn = cfg.get("head_dim") or C // H, cfg["rms_norm_eps"], len(prompt)
    f = {k: t.double() for k, t in w.items()}
    inv_freq, factor = inv_freq_and_factor(cfg, D)
    freqs = torch.outer(torch.arange(Tn, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), -1)
    cos, sin = emb.cos() * factor, emb.sin() * factor

    def proj(x, p):
        return x @ f[p + ".weight"].T + (f[p + ".bias"] if p + ".bias" in f else 0.0)

    x = f["model.embed_tokens.weight"][prompt]
    for l in range(cfg["num_hidden_layers"]):
        m = f"model.layers.{l}."
        a = rms_norm(x, f[m + "input_layernorm.weight"], eps)
        q = proj(a, m + "self_attn.q_proj").view(Tn, H, D)
        k = proj(a, m + "self_attn.k_proj").view(Tn, KV, D)
        v = proj(a, m + "self_attn.v_proj").view(Tn, KV, D).transpose(0, 1)
        if m + "self_attn.q_norm.weight" in f:
            q = rms_norm(q, f[m + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, f[m + "self_attn.k_norm.weight"], eps)
        q, k = q.transpose(0, 1), k.transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = (t.repeat_interleave(H // KV, 0) for t in (k, v))  # repeat_kv
        y = causal_attention(q, k, v).transpose(0, 1).reshape(Tn, H * D)
        x = x + y @ f[m + "self_attn.o_proj.weight"].T
        h = rms_norm(x, f[m + "post_attention_layernorm.weight"], eps)
        if "num_local_experts" in cfg:
            x = x + mixtral_moe(f, m + "block_sparse_moe.", h, cfg)
        elif "num_experts" in cfg and l not in cfg["mlp_only_layers"] \
                and (l + 1) % cfg["decoder_sparse_step"] == 0:
            x = x + qwen_moe(f, m + "mlp.", h, cfg)
        else:
            x = x + swiglu_mlp(f, m + "mlp.", h)
    x = rms_norm(x, f["model.norm.weight"], eps)
    head = f["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else f["lm_head.weight"]
    return x @ head.T


def gpt2_model(g, name, dtype, prefix, buffers):
    C, L, P = 16, 2, 32
    cfg = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
           "attn_pdrop": 0.1, "bos_token_id": V - 1, "embd_pdrop": 0.1, "eos_token_id": V - 1,
           "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
           "n_ctx": P, "n_embd": C, "n_head": 4, "n_inner": None, "n_layer": L,
           "n_positions": P, "reorder_and_upcast_attn": False, "resid_pdrop": 0.1,
           "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True,
           "summary_activation": None, "summary_first_dropout": 0.1,
           "summary_proj_to_labels": True, "summary_type": "cls_index",
           "summary_use_proj": True, "torch_dtype": {torch.float32: "float32",
                                                     torch.float16: "float16"}[dtype],
           "transformers_version": "4.46.0", "use_cache": True, "vocab_size": V}
    p = "transformer." if prefix else ""
    w = {p + "wte.weight": rand(g, V, C), p + "wpe.weight": rand(g, P, C, std=0.1),
         p + "ln_f.weight": rand(g, C, std=0.1, mean=1.0), p + "ln_f.bias": rand(g, C, std=0.1)}
    for l in range(L):
        h = f"{p}h.{l}."
        for n in ("ln_1", "ln_2"):
            w[h + n + ".weight"], w[h + n + ".bias"] = rand(g, C, std=0.1, mean=1.0), rand(g, C, std=0.1)
        w[h + "attn.c_attn.weight"], w[h + "attn.c_attn.bias"] = rand(g, C, 3 * C), rand(g, 3 * C, std=0.1)
        w[h + "attn.c_proj.weight"], w[h + "attn.c_proj.bias"] = rand(g, C, C), rand(g, C, std=0.1)
        w[h + "mlp.c_fc.weight"], w[h + "mlp.c_fc.bias"] = rand(g, C, 4 * C), rand(g, 4 * C, std=0.1)
        w[h + "mlp.c_proj.weight"], w[h + "mlp.c_proj.bias"] = rand(g, 4 * C, C, std=0.15), rand(g, C, std=0.1)
    w = {k: t.to(dtype) for k, t in w.items()}
    prompt = torch.randint(0, V, (T,), generator=g)
    logits = gpt2(w, cfg, prompt, p)
    if buffers:  # the causal mask older transformers versions saved with the weights
        for l in range(L):
            w[f"{p}h.{l}.attn.bias"] = torch.tril(torch.ones(P, P)).view(1, 1, P, P).to(dtype)
    save(name, cfg, w, logits, prompt)


def llama_model(g, name, dtype, kv, tied, theta, shards, rope_scaling=None):
    C, L, F, H, P = 16, 2, 40, 4, 64
    cfg = {"architectures": ["LlamaForCausalLM"], "attention_bias": False,
           "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "head_dim": C // H,
           "hidden_act": "silu", "hidden_size": C, "initializer_range": 0.02,
           "intermediate_size": F, "max_position_embeddings": P, "mlp_bias": False,
           "model_type": "llama", "num_attention_heads": H, "num_hidden_layers": L,
           "num_key_value_heads": kv, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
           "rope_scaling": rope_scaling, "rope_theta": theta, "tie_word_embeddings": tied,
           "torch_dtype": {torch.float32: "float32", torch.bfloat16: "bfloat16"}[dtype],
           "transformers_version": "4.46.0", "use_cache": True, "vocab_size": V}
    D = C // H
    w = {"model.embed_tokens.weight": rand(g, V, C), "model.norm.weight": rand(g, C, std=0.1, mean=1.0)}
    if not tied:
        w["lm_head.weight"] = rand(g, V, C)
    for l in range(L):
        m = f"model.layers.{l}."
        w[m + "input_layernorm.weight"] = rand(g, C, std=0.1, mean=1.0)
        w[m + "post_attention_layernorm.weight"] = rand(g, C, std=0.1, mean=1.0)
        w[m + "self_attn.q_proj.weight"] = rand(g, H * D, C)
        w[m + "self_attn.k_proj.weight"] = rand(g, kv * D, C)
        w[m + "self_attn.v_proj.weight"] = rand(g, kv * D, C)
        w[m + "self_attn.o_proj.weight"] = rand(g, C, H * D)
        w[m + "mlp.gate_proj.weight"] = rand(g, F, C)
        w[m + "mlp.up_proj.weight"] = rand(g, F, C)
        w[m + "mlp.down_proj.weight"] = rand(g, C, F, std=0.15)
    w = {k: t.to(dtype) for k, t in w.items()}
    prompt = torch.randint(0, V, (T,), generator=g)
    save(name, cfg, w, llama(w, cfg, prompt), prompt, shards)


def mixtral_model(g, name):
    C, L, F, H, KV, P, E = 16, 2, 24, 4, 2, 64, 4
    cfg = {"architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
           "eos_token_id": 2, "head_dim": C // H, "hidden_act": "silu", "hidden_size": C,
           "initializer_range": 0.02, "intermediate_size": F, "max_position_embeddings": P,
           "model_type": "mixtral", "num_attention_heads": H, "num_experts_per_tok": 2,
           "num_hidden_layers": L, "num_key_value_heads": KV, "num_local_experts": E,
           "output_router_logits": False, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
           "router_aux_loss_coef": 0.02, "router_jitter_noise": 0.0, "sliding_window": None,
           "tie_word_embeddings": False, "torch_dtype": "float32",
           "transformers_version": "4.46.0", "use_cache": True, "vocab_size": V}
    D = C // H
    w = {"model.embed_tokens.weight": rand(g, V, C), "model.norm.weight": rand(g, C, std=0.1, mean=1.0),
         "lm_head.weight": rand(g, V, C)}
    for l in range(L):
        m = f"model.layers.{l}."
        w[m + "input_layernorm.weight"] = rand(g, C, std=0.1, mean=1.0)
        w[m + "post_attention_layernorm.weight"] = rand(g, C, std=0.1, mean=1.0)
        w[m + "self_attn.q_proj.weight"] = rand(g, H * D, C)
        w[m + "self_attn.k_proj.weight"] = rand(g, KV * D, C)
        w[m + "self_attn.v_proj.weight"] = rand(g, KV * D, C)
        w[m + "self_attn.o_proj.weight"] = rand(g, C, H * D)
        w[m + "block_sparse_moe.gate.weight"] = rand(g, E, C, std=1.0)
        for e in range(E):
            x = f"{m}block_sparse_moe.experts.{e}."
            w[x + "w1.weight"], w[x + "w3.weight"] = rand(g, F, C), rand(g, F, C)
            w[x + "w2.weight"] = rand(g, C, F, std=0.15)
    prompt = torch.randint(0, V, (T,), generator=g)
    save(name, cfg, w, llama(w, cfg, prompt), prompt)


def qwen_model(g, name, mt, dtype, tied, mlp_only_layers=()):
    """Qwen2ForCausalLM (q/k/v biases), Qwen3ForCausalLM (QK-norm, head_dim 8 over a width of
    16 and 4 heads), Qwen2MoeForCausalLM (4 experts, top-2 unnormalised, a gated shared
    expert; mlp_only_layers dense) and Qwen3MoeForCausalLM (top-2 renormalised), with the keys
    save_pretrained writes for each."""
    C, L, F, H, KV, P, E, Fe, S = 16, 2, 40, 4, 2, 64, 4, 12, 20
    qwen3, moe = mt.startswith("qwen3"), mt.endswith("_moe")
    D = 8 if qwen3 else C // H
    arch = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
            "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}[mt]
    cfg = {"architectures": [arch], "attention_dropout": 0.0, "bos_token_id": 151643,
           "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": C,
           "initializer_range": 0.02, "intermediate_size": F, "max_position_embeddings": P,
           "max_window_layers": L, "model_type": mt, "num_attention_heads": H,
           "num_hidden_layers": L, "num_key_value_heads": KV, "rms_norm_eps": 1e-06,
           "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": None,
           "tie_word_embeddings": tied,
           "torch_dtype": {torch.float32: "float32", torch.bfloat16: "bfloat16"}[dtype],
           "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False,
           "vocab_size": V}
    if qwen3:
        cfg.update({"attention_bias": False, "head_dim": D})
    if moe:
        cfg.update({"decoder_sparse_step": 1, "mlp_only_layers": list(mlp_only_layers),
                    "moe_intermediate_size": Fe,
                    "norm_topk_prob": qwen3, "num_experts": E, "num_experts_per_tok": 2,
                    "output_router_logits": False, "router_aux_loss_coef": 0.001})
        if not qwen3:
            cfg["shared_expert_intermediate_size"] = S
    w = {"model.embed_tokens.weight": rand(g, V, C), "model.norm.weight": rand(g, C, std=0.1, mean=1.0)}
    if not tied:
        w["lm_head.weight"] = rand(g, V, C)

    def mlp(p, hidden):
        w[p + "gate_proj.weight"], w[p + "up_proj.weight"] = rand(g, hidden, C), rand(g, hidden, C)
        w[p + "down_proj.weight"] = rand(g, C, hidden, std=0.15)

    for l in range(L):
        m = f"model.layers.{l}."
        w[m + "input_layernorm.weight"] = rand(g, C, std=0.1, mean=1.0)
        w[m + "post_attention_layernorm.weight"] = rand(g, C, std=0.1, mean=1.0)
        for n, rows in (("q", H * D), ("k", KV * D), ("v", KV * D)):
            w[m + f"self_attn.{n}_proj.weight"] = rand(g, rows, C)
            if not qwen3:
                w[m + f"self_attn.{n}_proj.bias"] = rand(g, rows, std=0.2)
        w[m + "self_attn.o_proj.weight"] = rand(g, C, H * D)
        if qwen3:
            w[m + "self_attn.q_norm.weight"] = rand(g, D, std=0.1, mean=1.0)
            w[m + "self_attn.k_norm.weight"] = rand(g, D, std=0.1, mean=1.0)
        if not moe or l in mlp_only_layers:
            mlp(m + "mlp.", F)
            continue
        w[m + "mlp.gate.weight"] = rand(g, E, C, std=1.0)
        for e in range(E):
            mlp(f"{m}mlp.experts.{e}.", Fe)
        if not qwen3:
            mlp(m + "mlp.shared_expert.", S)
            w[m + "mlp.shared_expert_gate.weight"] = rand(g, 1, C, std=1.0)
    w = {k: t.to(dtype) for k, t in w.items()}
    prompt = torch.randint(0, V, (T,), generator=g)
    save(name, cfg, w, llama(w, cfg, prompt), prompt)


def deepseek_v3(w, cfg, prompt):
    """DeepseekV3ForCausalLM as transformers computes it: MLA with its latents normalised,
    the rotary parts rotated as interleaved pairs (apply_rotary_pos_emb_interleave), scale
    1/sqrt(qk_head_dim); the first first_k_dense_replace layers dense; then the MoE: sigmoid
    scores, e_score_correction_bias added to pick groups (each scored by its best 2) and the
    top-k within the best topk_group groups, the chosen unbiased scores renormalised and
    scaled by routed_scaling_factor, plus the shared experts."""
    C, H, eps, Tn = cfg["hidden_size"], cfg["num_attention_heads"], cfg["rms_norm_eps"], len(prompt)
    dn, dr, dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    r, qr, E, K = cfg["kv_lora_rank"], cfg["q_lora_rank"], cfg["n_routed_experts"], cfg["num_experts_per_tok"]
    G, g = cfg["n_group"], cfg["topk_group"]
    f = {k: t.double() for k, t in w.items()}
    inv_freq, factor = inv_freq_and_factor(cfg, dr)
    freqs = torch.outer(torch.arange(Tn, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), -1)
    cos, sin = emb.cos() * factor, emb.sin() * factor

    def rope_interleave(x):  # (..., Tn, dr): pairs (2i, 2i+1) to halves, then rotate-half
        x = x.reshape(*x.shape[:-1], dr // 2, 2).transpose(-1, -2).reshape(x.shape)
        return x * cos + rotate_half(x) * sin

    x = f["model.embed_tokens.weight"][prompt]
    for l in range(cfg["num_hidden_layers"]):
        m, at = f"model.layers.{l}.", f"model.layers.{l}.self_attn."
        a = rms_norm(x, f[m + "input_layernorm.weight"], eps)
        if qr:
            q = rms_norm(a @ f[at + "q_a_proj.weight"].T, f[at + "q_a_layernorm.weight"], eps) \
                @ f[at + "q_b_proj.weight"].T
        else:
            q = a @ f[at + "q_proj.weight"].T
        q_nope, q_pe = q.view(Tn, H, dn + dr).transpose(0, 1).split([dn, dr], -1)
        c, k_pe = (a @ f[at + "kv_a_proj_with_mqa.weight"].T).split([r, dr], -1)
        kv = (rms_norm(c, f[at + "kv_a_layernorm.weight"], eps) @ f[at + "kv_b_proj.weight"].T)
        k_nope, v = kv.view(Tn, H, dn + dv).transpose(0, 1).split([dn, dv], -1)
        q_pe, k_pe = rope_interleave(q_pe), rope_interleave(k_pe.view(1, Tn, dr))
        q = torch.cat([q_nope, q_pe], -1) * softmax_mscale2(cfg)  # YaRN's softmax scale
        k = torch.cat([k_nope, k_pe.expand(H, Tn, dr)], -1)
        y = causal_attention(q, k, v).transpose(0, 1).reshape(Tn, H * dv)
        x = x + y @ f[at + "o_proj.weight"].T
        h = rms_norm(x, f[m + "post_attention_layernorm.weight"], eps)
        if l < cfg["first_k_dense_replace"]:
            x = x + swiglu_mlp(f, m + "mlp.", h)
            continue
        scores = torch.sigmoid(h @ f[m + "mlp.gate.weight"].T)
        choice = scores + f[m + "mlp.gate.e_score_correction_bias"]
        group = choice.view(Tn, G, E // G).topk(2, dim=-1)[0].sum(-1)
        keep = torch.zeros_like(group).scatter_(1, group.topk(g, dim=-1)[1], 1)
        keep = keep.unsqueeze(-1).expand(Tn, G, E // G).reshape(Tn, E)
        idx = choice.masked_fill(keep == 0, 0.0).topk(K, dim=-1)[1]
        weight = scores.gather(1, idx)
        weight = weight / (weight.sum(-1, keepdim=True) + 1e-20) * cfg["routed_scaling_factor"]
        out = swiglu_mlp(f, m + "mlp.shared_experts.", h)
        for e in range(E):
            out = out + (weight * (idx == e)).sum(-1, keepdim=True) * \
                swiglu_mlp(f, f"{m}mlp.experts.{e}.", h)
        x = x + out
    x = rms_norm(x, f["model.norm.weight"], eps)
    head = f["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else f["lm_head.weight"]
    return x @ head.T


def deepseek_model(g, name, dtype, rope_scaling=None):
    """DeepseekV3ForCausalLM with the keys transformers' DeepseekV3Config saves: 3 layers of
    16, the first dense; MLA (query latent 8, key/value latent 6, heads of 4 + 4 rotated,
    values of 4); 8 routed experts of 6 in 4 groups, top-4 from the best 2 groups, x 2.5, one
    shared expert; bf16 weights with the router bias in float32, as DeepSeek stores it."""
    C, L, F, H, P, E, Fe = 16, 3, 24, 2, 64, 8, 6
    qr, r, dn, dr, dv = 8, 6, 4, 4, 4
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False,
           "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 1,
           "first_k_dense_replace": 1, "head_dim": dr, "hidden_act": "silu", "hidden_size": C,
           "initializer_range": 0.02, "intermediate_size": F, "kv_lora_rank": r,
           "max_position_embeddings": P, "model_type": "deepseek_v3",
           "moe_intermediate_size": Fe, "n_group": 4, "n_routed_experts": E,
           "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": H,
           "num_experts_per_tok": 4, "num_hidden_layers": L, "num_key_value_heads": H,
           "pretraining_tp": 1, "q_lora_rank": qr, "qk_head_dim": dn + dr,
           "qk_nope_head_dim": dn, "qk_rope_head_dim": dr, "rms_norm_eps": 1e-06,
           "rope_interleave": True, "rope_scaling": rope_scaling, "rope_theta": 10000.0,
           "routed_scaling_factor": 2.5, "tie_word_embeddings": False, "topk_group": 2,
           "torch_dtype": "bfloat16", "transformers_version": "4.56.0", "use_cache": True,
           "v_head_dim": dv, "vocab_size": V}
    w = {"model.embed_tokens.weight": rand(g, V, C), "model.norm.weight": rand(g, C, std=0.1, mean=1.0),
         "lm_head.weight": rand(g, V, C)}

    def mlp(p, hidden):
        w[p + "gate_proj.weight"], w[p + "up_proj.weight"] = rand(g, hidden, C), rand(g, hidden, C)
        w[p + "down_proj.weight"] = rand(g, C, hidden, std=0.15)

    for l in range(L):
        m, at = f"model.layers.{l}.", f"model.layers.{l}.self_attn."
        w[m + "input_layernorm.weight"] = rand(g, C, std=0.1, mean=1.0)
        w[m + "post_attention_layernorm.weight"] = rand(g, C, std=0.1, mean=1.0)
        w[at + "q_a_proj.weight"] = rand(g, qr, C)
        w[at + "q_a_layernorm.weight"] = rand(g, qr, std=0.1, mean=1.0)
        w[at + "q_b_proj.weight"] = rand(g, H * (dn + dr), qr)
        w[at + "kv_a_proj_with_mqa.weight"] = rand(g, r + dr, C)
        w[at + "kv_a_layernorm.weight"] = rand(g, r, std=0.1, mean=1.0)
        w[at + "kv_b_proj.weight"] = rand(g, H * (dn + dv), r)
        w[at + "o_proj.weight"] = rand(g, C, H * dv)
        if l < cfg["first_k_dense_replace"]:
            mlp(m + "mlp.", F)
            continue
        w[m + "mlp.gate.weight"] = rand(g, E, C, std=1.0)
        # positive: transformers masks the groups left out with 0.0 (Megatron and Loom with
        # -inf), which picks alike only while every kept expert's score + bias is positive
        w[m + "mlp.gate.e_score_correction_bias"] = rand(g, E, std=0.05).abs()
        for e in range(E):
            mlp(f"{m}mlp.experts.{e}.", Fe)
        mlp(m + "mlp.shared_experts.", Fe)
    w = {k: t if k.endswith("e_score_correction_bias") else t.to(dtype) for k, t in w.items()}
    prompt = torch.randint(0, V, (T,), generator=g)
    save(name, cfg, w, deepseek_v3(w, cfg, prompt), prompt)


def mamba2_model(g, name):
    C, L, H, P, G, N, K = 16, 3, 8, 4, 2, 5, 4
    cfg = {"architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "vocab_size": V,
           "hidden_size": C, "num_hidden_layers": L, "num_heads": H, "head_dim": P, "expand": 2,
           "n_groups": G, "state_size": N, "conv_kernel": K, "chunk_size": 4, "use_bias": False,
           "use_conv_bias": True, "hidden_act": "silu", "rms_norm": True,
           "layer_norm_epsilon": 1e-5, "tie_word_embeddings": False, "residual_in_fp32": True,
           "time_step_rank": 1, "time_step_min": 0.001, "time_step_max": 0.1,
           "time_step_floor": 1e-4, "torch_dtype": "float32"}
    w = {"backbone.embeddings.weight": rand(g, V, C), "backbone.norm_f.weight": rand(g, C, mean=1.0),
         "lm_head.weight": rand(g, V, C)}
    for l in range(L):
        m = f"backbone.layers.{l}."
        w[m + "norm.weight"] = rand(g, C, std=0.1, mean=1.0)
        mamba_weights(rand, g, w, m + "mixer.", C, H, P, G, N, K)
    prompt = torch.randint(0, V, (T,), generator=g)
    save(name, cfg, w, mamba2(w, cfg, prompt), prompt)


def nemotron_h_model(g, name):
    """A NemotronH hybrid: Mamba-2, attention (4 query heads of 6 over 2 key/value heads, a
    head dim other than hidden / heads), squared-ReLU MLP, Mamba-2."""
    C, H, P, G, N, K, F = 16, 8, 4, 2, 5, 4, 24
    Hq, Hkv, D = 4, 2, 6
    pattern = "M*-M"
    cfg = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
           "vocab_size": V, "hidden_size": C, "num_hidden_layers": len(pattern),
           "hybrid_override_pattern": pattern, "num_attention_heads": Hq,
           "num_key_value_heads": Hkv, "head_dim": D, "attention_bias": False,
           "intermediate_size": F, "mlp_hidden_act": "relu2", "mlp_bias": False,
           "mamba_num_heads": H, "mamba_head_dim": P, "n_groups": G, "ssm_state_size": N,
           "conv_kernel": K, "chunk_size": 4, "expand": 2, "use_bias": False,
           "use_conv_bias": True, "mamba_hidden_act": "silu", "layer_norm_epsilon": 1e-5,
           "tie_word_embeddings": False, "residual_in_fp32": False,
           "max_position_embeddings": 64, "time_step_min": 0.001, "time_step_max": 0.1,
           "time_step_floor": 1e-4, "rescale_prenorm_residual": True, "torch_dtype": "float32"}
    w = {"backbone.embeddings.weight": rand(g, V, C), "backbone.norm_f.weight": rand(g, C, mean=1.0),
         "lm_head.weight": rand(g, V, C)}
    for l, kind in enumerate(pattern):
        m = f"backbone.layers.{l}."
        w[m + "norm.weight"] = rand(g, C, std=0.1, mean=1.0)
        if kind == "M":
            mamba_weights(rand, g, w, m + "mixer.", C, H, P, G, N, K)
        elif kind == "*":
            for p, rows in (("q_proj", Hq * D), ("k_proj", Hkv * D), ("v_proj", Hkv * D)):
                w[m + "mixer." + p + ".weight"] = rand(g, rows, C)
            w[m + "mixer.o_proj.weight"] = rand(g, C, Hq * D)
        else:
            w[m + "mixer.up_proj.weight"] = rand(g, F, C)
            w[m + "mixer.down_proj.weight"] = rand(g, C, F, std=0.2)
    prompt = torch.randint(0, V, (T,), generator=g)
    save(name, cfg, w, nemotron_h(w, cfg, prompt), prompt)


def main():
    g = torch.Generator().manual_seed(20261124)
    gpt2_model(g, "gpt2-f32", torch.float32, prefix=True, buffers=False)
    gpt2_model(g, "gpt2-f16-base", torch.float16, prefix=False, buffers=True)
    llama_model(g, "llama-gqa-f32", torch.float32, kv=2, tied=False, theta=500000.0, shards=2)
    llama_model(g, "llama-mqa-tied-bf16", torch.bfloat16, kv=1, tied=True, theta=10000.0, shards=1)
    mixtral_model(g, "mixtral-f32")
    qwen_model(g, "qwen2-f32", "qwen2", torch.float32, tied=False)
    qwen_model(g, "qwen3-tied-bf16", "qwen3", torch.bfloat16, tied=True)
    qwen_model(g, "qwen2-moe-f32", "qwen2_moe", torch.float32, tied=False, mlp_only_layers=[1])
    qwen_model(g, "qwen3-moe-f32", "qwen3_moe", torch.float32, tied=False)
    deepseek_model(g, "deepseek-v3-bf16", torch.bfloat16)
    mamba2_model(g, "mamba2-f32")
    # long-context RoPE: Llama 3.1's scaling over an original context of 8 (both of its bands
    # and the blend between), DeepSeek-V3's YaRN (the ramp, an attention factor, the softmax's)
    llama_model(g, "llama-rope-llama3-f32", torch.float32, kv=2, tied=False, theta=10000.0,
                shards=1, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 8})
    deepseek_model(g, "deepseek-v3-yarn-bf16", torch.bfloat16,
                   rope_scaling={"type": "yarn", "factor": 4.0, "beta_fast": 32, "beta_slow": 1,
                                 "mscale": 0.8, "mscale_all_dim": 1.0,
                                 "original_max_position_embeddings": 8})
    # its own generator: a model added later leaves the others' files as they were
    nemotron_h_model(torch.Generator().manual_seed(20261128), "nemotron-h-f32")
    print("wrote", ", ".join(sorted(d for d in os.listdir(HERE) if os.path.isdir(os.path.join(HERE, d)))))


if __name__ == "__main__":
    main()
