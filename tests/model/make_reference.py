#!/usr/bin/python3
"""Independent PyTorch (float64) reference for model/gpt: writes tests/model/data/*.txt.

Rebuilds the model from its definition, not from Loom's code: parameters and tokens come
from torch.manual_seed, so the reference does not depend on Loom's RNG either. For each
configuration the file holds the model options, the batch, the parameters (float32 values,
so the f32 model under test holds exactly the same numbers), the loss sum and the gradient
of loss_scale * (sum of token losses, plus the weighted MTP term where the model has one)
for every parameter, computed in float64 by autograd.

Conventions mirrored from model/gpt (see sdk/layers/decoder):
  linear weights (out, in), y = x W^T + b; c_attn rows [q | k | v]; swiglu c_fc rows
  [gate; up]; RoPE rotate-half; query head h reads kv head h // (n_head / n_kv_head);
  pre-norm blocks; GELU tanh approximation; targets of -1 ignored.
The files store the vocabulary's real rows of wte / lm_head only: the test fills the padded
rows with junk to prove they never affect the loss.

Run (Debian's python3-torch, CPU):  /usr/bin/python3 tests/model/make_reference.py [NAME...]
"""
import math
import os
import sys

import torch
import torch.nn.functional as F
from reference_util import cases, ints, reference_file, write_gradients

torch.set_default_dtype(torch.float64)

CONFIGS = {
    "gpt2_tiny": dict(
        options=dict(n_layer=2, n_head=2, n_kv_head=0, n_embd=16, ffn_hidden=0, norm="layernorm",
                     activation="gelu", position="learned", bias="true",
                     tie_embeddings="true", norm_eps=1e-5, max_seq_len=16, pad_vocab_to=128),
        vocab=64, batch=2, seq=8, seed=1234),
    "llama_tiny": dict(
        options=dict(n_layer=2, n_head=2, n_kv_head=1, n_embd=16, ffn_hidden=24, norm="rmsnorm",
                     activation="swiglu", position="rope", rope_theta=10000.0, bias="false",
                     tie_embeddings="false", norm_eps=1e-5, max_seq_len=16, pad_vocab_to=128),
        vocab=64, batch=2, seq=8, seed=4321),
    # Qwen3's attention: a head size other than n_embd / n_head (kv_channels = 12 over a
    # width of 16), QK-norm (RMSNorm of each head's q and k over D, before RoPE), GQA
    "qwen3_tiny": dict(
        options=dict(n_layer=2, n_head=2, n_kv_head=1, n_embd=16, ffn_hidden=24, norm="rmsnorm",
                     activation="swiglu", position="rope", rope_theta=1000000.0, bias="false",
                     tie_embeddings="true", norm_eps=1e-6, max_seq_len=16, pad_vocab_to=128,
                     kv_channels=12, qk_layernorm="true"),
        vocab=64, batch=2, seq=8, seed=5678),
    # Qwen2's: biases on q, k and v only (add_qkv_bias without bias)
    "qwen2_tiny": dict(
        options=dict(n_layer=2, n_head=4, n_kv_head=2, n_embd=16, ffn_hidden=24, norm="rmsnorm",
                     activation="swiglu", position="rope", rope_theta=1000000.0, bias="false",
                     tie_embeddings="false", norm_eps=1e-6, max_seq_len=16, pad_vocab_to=128,
                     add_qkv_bias="true"),
        vocab=64, batch=2, seq=8, seed=8765),
    # LoRA (peft = "lora"): adapters of rank 2 on all four projections of GPT-2 (fused c_attn,
    # the GELU MLP), scale alpha / rank = 2; the base frozen (no gradient)
    "gpt2_lora_tiny": dict(
        options=dict(n_layer=2, n_head=2, n_kv_head=0, n_embd=16, ffn_hidden=0, norm="layernorm",
                     activation="gelu", position="learned", bias="true",
                     tie_embeddings="true", norm_eps=1e-5, max_seq_len=16, pad_vocab_to=128,
                     peft="lora", peft_rank=2, peft_alpha=4.0,
                     peft_target_modules="linear_qkv,linear_proj,linear_fc1,linear_fc2"),
        vocab=64, batch=2, seq=8, seed=2468),
    # LoRA on Llama by HF PEFT's module names: q, k and v (one fused adapter) and down_proj;
    # o_proj and gate/up stay bare
    "llama_lora_tiny": dict(
        options=dict(n_layer=2, n_head=2, n_kv_head=1, n_embd=16, ffn_hidden=24, norm="rmsnorm",
                     activation="swiglu", position="rope", rope_theta=10000.0, bias="false",
                     tie_embeddings="false", norm_eps=1e-5, max_seq_len=16, pad_vocab_to=128,
                     peft="lora", peft_rank=4, peft_alpha=2.0,
                     peft_target_modules="q_proj,k_proj,v_proj,down_proj"),
        vocab=64, batch=2, seq=8, seed=1357),
    # DeepSeek's multi-head latent attention: a query latent of 6, a key/value latent of 8,
    # heads of 4 + 4 (the second half rotated, the key's shared by the heads), values of 6
    "mla_tiny": dict(
        options=dict(n_layer=2, n_head=2, n_embd=16, ffn_hidden=24, norm="rmsnorm",
                     activation="swiglu", position="rope", rope_theta=10000.0, bias="false",
                     tie_embeddings="false", norm_eps=1e-6, max_seq_len=16, pad_vocab_to=128,
                     multi_latent_attention="true", q_lora_rank=6, kv_lora_rank=8,
                     qk_head_dim=4, qk_pos_emb_head_dim=4, v_head_dim=6),
        vocab=64, batch=2, seq=8, seed=2468),
    # without the query latent (DeepSeek-V2-Lite's), three heads, values larger than the
    # keys' unrotated part
    "mla_noqlora_tiny": dict(
        options=dict(n_layer=2, n_head=3, n_embd=16, ffn_hidden=24, norm="rmsnorm",
                     activation="swiglu", position="rope", rope_theta=10000.0, bias="false",
                     tie_embeddings="true", norm_eps=1e-6, max_seq_len=16, pad_vocab_to=128,
                     multi_latent_attention="true", q_lora_rank=0, kv_lora_rank=6,
                     qk_head_dim=2, qk_pos_emb_head_dim=4, v_head_dim=5),
        vocab=64, batch=2, seq=8, seed=1357),
    # multi-token prediction (Megatron's MTP, DeepSeek-V3's modules): two depths on the Llama
    # model; the term "mtp" weighted mtp_loss_scaling_factor / depths
    "mtp_tiny": dict(
        options=dict(n_layer=2, n_head=2, n_kv_head=1, n_embd=16, ffn_hidden=24, norm="rmsnorm",
                     activation="swiglu", position="rope", rope_theta=10000.0, bias="false",
                     tie_embeddings="false", norm_eps=1e-5, max_seq_len=16, pad_vocab_to=128,
                     mtp_num_layers=2, mtp_loss_scaling_factor=0.3),
        vocab=64, batch=2, seq=8, seed=9753),
    # Nemotron-H's MLP and attention: squared ReLU (Megatron's --squared-relu), no position
    # encoding, GQA, RMSNorm, no bias, untied
    "relu2_tiny": dict(
        options=dict(n_layer=2, n_head=2, n_kv_head=1, n_embd=16, ffn_hidden=24, norm="rmsnorm",
                     activation="squared_relu", position="none", bias="false",
                     tie_embeddings="false", norm_eps=1e-5, max_seq_len=16, pad_vocab_to=128),
        vocab=64, batch=2, seq=8, seed=2468),
    # DPO (train.objective = "dpo", loom.preference/1): two pairs (rows 0/1 and 2/3, chosen then
    # rejected) of GPT-2, the sigmoid loss with beta 0.5 against reference log-probabilities
    # near the model's own (rounded, set off by dpo_offsets: margins neither 0 nor saturated);
    # and the same on Llama with LoRA adapters (the base frozen)
    "gpt2_dpo_tiny": dict(
        options=dict(n_layer=2, n_head=2, n_kv_head=0, n_embd=16, ffn_hidden=0, norm="layernorm",
                     activation="gelu", position="learned", bias="true",
                     tie_embeddings="true", norm_eps=1e-5, max_seq_len=16, pad_vocab_to=128),
        vocab=64, batch=4, seq=8, seed=1122, dpo_beta=0.5, dpo_offsets=[0.7, -0.4, -1.1, 0.9]),
    "llama_lora_dpo_tiny": dict(
        options=dict(n_layer=2, n_head=2, n_kv_head=1, n_embd=16, ffn_hidden=24, norm="rmsnorm",
                     activation="swiglu", position="rope", rope_theta=10000.0, bias="false",
                     tie_embeddings="false", norm_eps=1e-5, max_seq_len=16, pad_vocab_to=128,
                     peft="lora", peft_rank=2, peft_alpha=4.0,
                     peft_target_modules="linear_qkv,linear_proj,linear_fc1,linear_fc2"),
        vocab=64, batch=4, seq=8, seed=3344, dpo_beta=0.5, dpo_offsets=[0.7, -0.4, -1.1, 0.9]),
}


def dpo(cfg, logits, targets, vocab):
    """TRL's sigmoid DPO over the pairs (rows 2k, 2k+1): each row's log-probability (the sum
    of log p(target) over its counted targets), the reference's (the model's own rounded to an
    integer, plus cfg's offsets: stored, and the margins still the model's), and the summed loss -log sigmoid(beta ((pi_c - ref_c) - (pi_r -
    ref_r)))."""
    B, T = targets.shape
    token = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1), ignore_index=-1,
                            reduction="none").reshape(B, T)
    logp = -token.sum(1)
    ref = torch.round(logp.detach()) + torch.tensor(cfg["dpo_offsets"])
    beta = cfg["dpo_beta"]
    z = beta * ((logp[0::2] - ref[0::2]) - (logp[1::2] - ref[1::2]))
    return -F.logsigmoid(z).sum(), ref


def mla(o):
    return o.get("multi_latent_attention") == "true"


def head_dim(o):
    return o.get("kv_channels") or o["n_embd"] // o["n_head"]


LORA_TARGETS = {"linear_qkv": "attn.c_attn", "q_proj": "attn.c_attn", "k_proj": "attn.c_attn",
                "v_proj": "attn.c_attn", "linear_proj": "attn.c_proj", "o_proj": "attn.c_proj",
                "linear_fc1": "mlp.c_fc", "gate_proj": "mlp.c_fc", "up_proj": "mlp.c_fc",
                "linear_fc2": "mlp.c_proj", "down_proj": "mlp.c_proj"}


def lora_targets(o):
    """The projections (suffixes of their names) that carry LoRA adapters."""
    if o.get("peft") != "lora":
        return set()
    return {LORA_TARGETS[m] for m in o["peft_target_modules"].split(",")}


def param_specs(o, vocab):
    """(name, shape, kind) in model/gpt's order; kind: matrix | bias | norm_w | norm_b.
    With LoRA, each targeted projection's lora_A (rank, in) and lora_B (out, rank) follow it,
    both drawn at random (B too, so that A's gradient is not zero)."""
    C, L, H = o["n_embd"], o["n_layer"], o["n_head"]
    Hkv = o.get("n_kv_head") or H
    D = head_dim(o)
    swiglu = o["activation"] == "swiglu"
    F_ = o["ffn_hidden"] or 4 * C
    bias = o["bias"] == "true"
    ln = o["norm"] == "layernorm"
    specs = [("wte", (vocab, C), "matrix")]
    if o["position"] == "learned":
        specs.append(("wpe", (o["max_seq_len"], C), "matrix"))

    def norm(p):
        specs.append((p + ".weight", (C,), "norm_w"))
        if ln and bias:
            specs.append((p + ".bias", (C,), "norm_b"))

    targets = lora_targets(o)

    def linear(p, out, inp, has_bias=bias):
        specs.append((p + ".weight", (out, inp), "matrix"))
        if has_bias:
            specs.append((p + ".bias", (out,), "bias"))
        if any(p.endswith("." + t) for t in targets):
            specs.append((p + ".lora_A.weight", (o["peft_rank"], inp), "matrix"))
            specs.append((p + ".lora_B.weight", (out, o["peft_rank"]), "matrix"))

    def mla_specs(p):  # in model/gpt's order (ParamDeclarer::mla)
        dq, dv, r, qr = o["qk_head_dim"] + o["qk_pos_emb_head_dim"], o["v_head_dim"], \
            o["kv_lora_rank"], o["q_lora_rank"]
        if qr:
            specs.append((p + ".q_a.weight", (qr, C), "matrix"))
            specs.append((p + ".q_a_norm.weight", (qr,), "norm_w"))
            specs.append((p + ".q_b.weight", (H * dq, qr), "matrix"))
        else:
            specs.append((p + ".q.weight", (H * dq, C), "matrix"))
        specs.append((p + ".kv_a.weight", (r + o["qk_pos_emb_head_dim"], C), "matrix"))
        specs.append((p + ".kv_a_norm.weight", (r,), "norm_w"))
        specs.append((p + ".kv_b.weight", (H * (o["qk_head_dim"] + dv), r), "matrix"))
        linear(p + ".c_proj", C, H * dv)

    def layer(p):
        norm(p + ".ln_1")
        if mla(o):
            mla_specs(p + ".attn")
        else:
            linear(p + ".attn.c_attn", (H + 2 * Hkv) * D, C,
                   bias or o.get("add_qkv_bias") == "true")
            linear(p + ".attn.c_proj", C, H * D)
            if o.get("qk_layernorm") == "true":  # one (D) weight each, after c_proj
                specs.append((p + ".attn.q_norm.weight", (D,), "norm_w"))
                specs.append((p + ".attn.k_norm.weight", (D,), "norm_w"))
        norm(p + ".ln_2")
        linear(p + ".mlp.c_fc", 2 * F_ if swiglu else F_, C)
        linear(p + ".mlp.c_proj", C, F_)

    for l in range(L):
        layer(f"h.{l}")
    norm("ln_f")
    if o["tie_embeddings"] == "false":
        specs.append(("lm_head.weight", (vocab, C), "matrix"))
    for k in range(o.get("mtp_num_layers", 0)):  # each depth: two norms, eh_proj, a layer
        p = f"mtp.{k}"
        norm(p + ".enorm")
        norm(p + ".hnorm")
        specs.append((p + ".eh_proj.weight", (C, 2 * C), "matrix"))
        layer(p + ".layer")
        norm(p + ".final_norm")
    return specs


def rope(x, theta):  # x (B, T, H, D), positions 0..T-1, rotate-half pairs (i, i + D/2)
    B, T, H, D = x.shape
    inv = theta ** (-2.0 * torch.arange(D // 2, dtype=torch.float64) / D)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]  # (T, D/2)
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def mla_attention(o, P, p, x, norm):
    """MLA as DeepseekV3Attention computes it (rotate-half RoPE, as model/gpt's): the latents
    normalised, the keys' rotated part shared by the heads, scale 1/sqrt(qk head size)."""
    B, T, _ = x.shape
    H, dn, dr, dv = o["n_head"], o["qk_head_dim"], o["qk_pos_emb_head_dim"], o["v_head_dim"]
    r = o["kv_lora_rank"]
    if o["q_lora_rank"]:
        q = norm(x @ P[p + ".q_a.weight"].t(), p + ".q_a_norm") @ P[p + ".q_b.weight"].t()
    else:
        q = x @ P[p + ".q.weight"].t()
    q_nope, q_pe = q.view(B, T, H, dn + dr).split([dn, dr], dim=-1)
    c, k_pe = (x @ P[p + ".kv_a.weight"].t()).split([r, dr], dim=-1)
    kv = (norm(c, p + ".kv_a_norm") @ P[p + ".kv_b.weight"].t()).view(B, T, H, dn + dv)
    k_nope, v = kv.split([dn, dv], dim=-1)
    q_pe, k_pe = rope(q_pe, o["rope_theta"]), rope(k_pe.view(B, T, 1, dr), o["rope_theta"])
    q = torch.cat([q_nope, q_pe], dim=-1).transpose(1, 2)  # (B, H, T, dq)
    k = torch.cat([k_nope, k_pe.expand(B, T, H, dr)], dim=-1).transpose(1, 2)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(dn + dr)
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    a = (s.softmax(-1) @ v.transpose(1, 2)).transpose(1, 2).reshape(B, T, H * dv)
    return F.linear(a, P[p + ".c_proj.weight"], P.get(p + ".c_proj.bias"))


def forward(o, P, tokens, vocab, targets=None):
    C, L, H = o["n_embd"], o["n_layer"], o["n_head"]
    Hkv = o.get("n_kv_head") or H
    D = head_dim(o)
    B, T = tokens.shape
    eps = o["norm_eps"]

    def norm(x, p):  # over the last dimension, whatever its size (C, or D for QK-norm)
        if o["norm"] == "layernorm":
            return F.layer_norm(x, x.shape[-1:], P[p + ".weight"], P.get(p + ".bias"), eps)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * P[p + ".weight"]

    def linear(x, p):  # with LoRA (HF PEFT's LoraLayer): + (alpha / r) B(A(x))
        y = F.linear(x, P[p + ".weight"], P.get(p + ".bias"))
        if p + ".lora_A.weight" in P:
            scale = o["peft_alpha"] / o["peft_rank"]
            y = y + scale * F.linear(F.linear(x, P[p + ".lora_A.weight"]), P[p + ".lora_B.weight"])
        return y

    def mlp(x, p):
        h = linear(x, p + ".mlp.c_fc")
        if o["activation"] == "swiglu":
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        elif o["activation"] == "squared_relu":
            h = F.relu(h).square()
        else:
            h = F.gelu(h, approximate="tanh")
        return linear(h, p + ".mlp.c_proj")

    def block(x, p):
        if mla(o):
            x = x + mla_attention(o, P, p + ".attn", norm(x, p + ".ln_1"), norm)
            return x + mlp(norm(x, p + ".ln_2"), p)
        qkv = linear(norm(x, p + ".ln_1"), p + ".attn.c_attn")
        q, k, v = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
        q, k, v = q.view(B, T, H, D), k.view(B, T, Hkv, D), v.view(B, T, Hkv, D)
        if o.get("qk_layernorm") == "true":  # Qwen3Attention: q_norm, k_norm before RoPE
            q, k = norm(q, p + ".attn.q_norm"), norm(k, p + ".attn.k_norm")
        if o["position"] == "rope":
            q, k = rope(q, o["rope_theta"]), rope(k, o["rope_theta"])
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, heads, T, D)
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        a = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * D)
        x = x + linear(a, p + ".attn.c_proj")
        return x + mlp(norm(x, p + ".ln_2"), p)

    x = P["wte"][tokens]
    if o["position"] == "learned":
        x = x + P["wpe"][torch.arange(T)][None]
    for l in range(L):
        x = block(x, f"h.{l}")
    head = P["wte"] if o["tie_embeddings"] == "true" else P["lm_head.weight"]
    if targets is None:
        return norm(x, "ln_f") @ head.t()  # (B, T, vocab)
    # Multi-token prediction as DeepSeek-V3's paper and Megatron-Core define it: depth k
    # (1-based) at position i embeds the input token i + k (the batch's targets hold the
    # inputs shifted by one: targets[i + k - 1]), joins it to depth k-1's hidden state at i
    # (the main model's last layer for k = 1) as eh_proj([enorm(emb) | hnorm(h)]), runs one
    # more layer and the shared head after its own final norm, and predicts token i + k + 1
    # (targets[i + k]); positions whose token or target falls past the row are not counted.
    mtp_sum, h = 0.0, x
    for k in range(1, o.get("mtp_num_layers", 0) + 1):
        p = f"mtp.{k - 1}"
        ahead = torch.full((B, T), -1, dtype=torch.long)
        label = torch.full((B, T), -1, dtype=torch.long)
        ahead[:, :T - k + 1] = targets[:, k - 1:]
        label[:, :T - k] = targets[:, k:]
        label[ahead < 0] = -1
        emb = P["wte"][ahead.clamp(min=0)]
        h = linear(torch.cat([norm(emb, p + ".enorm"), norm(h, p + ".hnorm")], -1), p + ".eh_proj")
        h = block(h, p + ".layer")
        logits = norm(h, p + ".final_norm") @ head.t()
        mtp_sum = mtp_sum + F.cross_entropy(logits.reshape(-1, vocab), label.reshape(-1),
                                            ignore_index=-1, reduction="sum")
    return norm(x, "ln_f") @ head.t(), mtp_sum


def main():
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    os.makedirs(out_dir, exist_ok=True)
    # NAME... writes those alone (a new case without rewriting the others' last digits)
    only = sys.argv[1:]
    for name in only:
        assert name in CONFIGS, f"unknown case {name}; known: {', '.join(CONFIGS)}"
    configs = {n: c for n, c in CONFIGS.items() if not only or n in only}
    for name, cfg, gen, specs, P in cases(configs, param_specs):
        o, vocab, B, T = cfg["options"], cfg["vocab"], cfg["batch"], cfg["seq"]
        if o.get("peft") == "lora":  # the base frozen: gradients of the adapters only
            for pname, t in P.items():
                t.requires_grad_(".lora_" in pname)
        tokens = torch.randint(0, vocab, (B, T), generator=gen)
        targets = torch.randint(0, vocab, (B, T), generator=gen)
        targets[0, 2] = -1  # ignored positions
        targets[1, 5] = -1
        count = int((targets != -1).sum())
        loss_scale = 1.0 / count
        logits, mtp_sum = forward(o, P, tokens, vocab, targets)
        loss_sum = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1),
                                   ignore_index=-1, reduction="sum")
        depths = o.get("mtp_num_layers", 0)
        mtp_weight = o["mtp_loss_scaling_factor"] / depths if depths else 0.0
        if "dpo_beta" in cfg:
            # the host's loss_scale counts the batch's B T tokens; DPO's gradient is that of the
            # mean over the pairs: loss_scale B T / (B / 2) times the summed pair loss
            loss_scale = 1.0 / (B * T)
            loss_sum, ref = dpo(cfg, logits, targets, vocab)
            (loss_scale * (B * T) / (B // 2) * loss_sum).backward()
        else:
            (loss_scale * (loss_sum + mtp_weight * mtp_sum)).backward()
        with reference_file(out_dir, "model/gpt", "make_reference.py", name, cfg,
                            "option <key> <value> | create <vocab> <batch> <seq> | tokens ... | "
                            "targets ... | loss_sum <v> | mtp_sum <v> | dpo_beta <v> | dpo_reference <B values> | "
                            "loss_scale <v> | param <name> "
                            "<numel> <values...> | grad <name> <numel> <values...>") as f:
            f.write(ints("tokens", tokens) + ints("targets", targets))
            f.write(f"loss_sum {loss_sum.item():.17g}\n")
            if depths:
                f.write(f"mtp_sum {mtp_sum.item():.17g}\n")
            if "dpo_beta" in cfg:
                f.write(f"dpo_beta {cfg['dpo_beta']:.17g}\n")
                f.write("dpo_reference " + " ".join(f"{v:.17g}" for v in ref.tolist()) + "\n")
            write_gradients(f, loss_scale, specs, P)
        print(f"{f.name}: loss_sum {loss_sum.item():.6f} over {count} tokens, "
              f"{sum(P[p].numel() for p, _, _ in specs)} parameters")


if __name__ == "__main__":
    sys.exit(main())
