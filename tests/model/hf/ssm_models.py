"""The Mamba-2 and NemotronH forward passes of make_reference.py (float64, written from
transformers' Mamba2ForCausalLM and NemotronHForCausalLM), and the RMSNorm every model there
uses."""
import math

import torch


def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def mamba_weights(rand, g, w, m, C, H, P, G, N, K):
    """A Mamba-2 mixer's tensors under prefix m, drawn by rand(g, ...) in one fixed order."""
    di = H * P
    w[m + "in_proj.weight"] = rand(g, 2 * di + 2 * G * N + H, C)
    w[m + "conv1d.weight"] = rand(g, di + 2 * G * N, 1, K, std=0.4)
    w[m + "conv1d.bias"] = rand(g, di + 2 * G * N, std=0.1)
    w[m + "dt_bias"] = rand(g, H, std=0.5, mean=-1.0)
    w[m + "A_log"] = torch.log(torch.arange(1, H + 1, dtype=torch.float32))
    w[m + "D"] = rand(g, H, std=0.2, mean=1.0)
    w[m + "norm.weight"] = rand(g, di, std=0.1, mean=1.0)
    w[m + "out_proj.weight"] = rand(g, C, di, std=0.2)


def mamba2_mixer(f, m, u0, H, P, G, N, K, eps):
    """Mamba2Mixer.torch_forward (one step at a time) on the normed input u0 (T, C): in_proj
    to z | xBC | dt, the causal depthwise convolution and SiLU, the selective scan with dt
    through softplus and A = -exp(A_log), the skip D, the gated RMSNorm per group, out_proj."""
    T, di = u0.shape[0], H * P
    u = u0 @ f[m + "in_proj.weight"].T
    z, xbc, dt = u.split([di, di + 2 * G * N, H], -1)
    wc, bc = f[m + "conv1d.weight"][:, 0, :], f[m + "conv1d.bias"]
    padded = torch.cat([torch.zeros(K - 1, xbc.shape[1], dtype=torch.float64), xbc])
    conv = torch.stack([(padded[t:t + K] * wc.T).sum(0) for t in range(T)]) + bc
    xbc = conv * torch.sigmoid(conv)
    xs, B, C = xbc.split([di, G * N, G * N], -1)
    dt = torch.nn.functional.softplus(dt + f[m + "dt_bias"])
    A = -torch.exp(f[m + "A_log"])
    y = torch.zeros(T, H, P, dtype=torch.float64)
    for h in range(H):
        g = h // (H // G)
        S = torch.zeros(P, N, dtype=torch.float64)
        for t in range(T):
            xt = xs[t, h * P:(h + 1) * P]
            S = torch.exp(dt[t, h] * A[h]) * S + dt[t, h] * torch.outer(xt, B[t, g * N:(g + 1) * N])
            y[t, h] = S @ C[t, g * N:(g + 1) * N] + f[m + "D"][h] * xt
    gated = (y.reshape(T, di) * (z * torch.sigmoid(z))).view(T, G, di // G)
    normed = gated * torch.rsqrt((gated * gated).mean(-1, keepdim=True) + eps)
    return (normed.reshape(T, di) * f[m + "norm.weight"]) @ f[m + "out_proj.weight"].T


def mamba2(w, cfg, prompt):
    """Mamba2ForCausalLM's forward: pre-norm residual Mamba-2 mixers (mamba2_mixer)."""
    f = {k: t.double() for k, t in w.items()}
    eps = cfg["layer_norm_epsilon"]
    dims = [cfg[k] for k in ("num_heads", "head_dim", "n_groups", "state_size", "conv_kernel")]
    x = f["backbone.embeddings.weight"][prompt]
    for l in range(cfg["num_hidden_layers"]):
        m = f"backbone.layers.{l}."
        x = x + mamba2_mixer(f, m + "mixer.", rms_norm(x, f[m + "norm.weight"], eps), *dims, eps)
    return rms_norm(x, f["backbone.norm_f.weight"], eps) @ f["lm_head.weight"].T


def nemotron_h(w, cfg, prompt):
    """NemotronHForCausalLM's forward: each layer x + mixer(RMSNorm(x)), its mixer by
    hybrid_override_pattern: M a Mamba-2 mixer (Zamba2's: the gated norm per group, as
    mamba2_mixer), * attention without position encoding (JambaAttention: GQA by repeat_kv,
    1/sqrt(head_dim), causal), - an MLP down_proj(relu(up_proj(x))^2) (relu2)."""
    f = {k: t.double() for k, t in w.items()}
    T, eps = len(prompt), cfg["layer_norm_epsilon"]
    Hq, Hkv, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    dims = [cfg[k] for k in ("mamba_num_heads", "mamba_head_dim", "n_groups", "ssm_state_size",
                             "conv_kernel")]
    x = f["backbone.embeddings.weight"][prompt]
    for l, kind in enumerate(cfg["hybrid_override_pattern"]):
        m = f"backbone.layers.{l}."
        u = rms_norm(x, f[m + "norm.weight"], eps)
        if kind == "M":
            out = mamba2_mixer(f, m + "mixer.", u, *dims, eps)
        elif kind == "*":
            q = (u @ f[m + "mixer.q_proj.weight"].T).view(T, Hq, D).transpose(0, 1)
            k = (u @ f[m + "mixer.k_proj.weight"].T).view(T, Hkv, D).transpose(0, 1)
            v = (u @ f[m + "mixer.v_proj.weight"].T).view(T, Hkv, D).transpose(0, 1)
            k, v = k.repeat_interleave(Hq // Hkv, 0), v.repeat_interleave(Hq // Hkv, 0)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
            s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
            a = (s.softmax(-1) @ v).transpose(0, 1).reshape(T, Hq * D)
            out = a @ f[m + "mixer.o_proj.weight"].T
        else:
            h = torch.relu(u @ f[m + "mixer.up_proj.weight"].T).square()
            out = h @ f[m + "mixer.down_proj.weight"].T
        x = x + out
    return rms_norm(x, f["backbone.norm_f.weight"], eps) @ f["lm_head.weight"].T
