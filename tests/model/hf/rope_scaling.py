"""RoPE's frequency scalings as transformers computes them (_compute_llama3_parameters,
_compute_yarn_parameters, DeepseekV3Attention's softmax scale), in float64, for
make_reference.py and make_reference_scaled.py. No transformers needed."""
import math

import torch


def inv_freq_and_factor(cfg, dim):
    """(inv_freq of dim/2 entries, the attention factor on cos and sin) for cfg's rope_scaling
    (None: plain RoPE)."""
    base = cfg["rope_theta"]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    rs = cfg.get("rope_scaling")
    if not rs:
        return inv_freq, 1.0
    kind, factor = rs.get("rope_type", rs.get("type")), rs["factor"]
    old = rs.get("original_max_position_embeddings", cfg["max_position_embeddings"])
    if kind == "llama3":
        low, high = rs["low_freq_factor"], rs["high_freq_factor"]
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / high) & ~(wavelen > old / low)
        return torch.where(medium, smoothed, scaled), 1.0
    assert kind == "yarn", kind

    def mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    m, m_all = rs.get("mscale"), rs.get("mscale_all_dim")
    attention = mscale(factor, m) / mscale(factor, m_all) if m and m_all else mscale(factor)

    def correction_dim(rotations):
        return dim * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(base))

    lo = max(math.floor(correction_dim(rs.get("beta_fast", 32))), 0)
    hi = min(math.ceil(correction_dim(rs.get("beta_slow", 1))), dim - 1)
    if lo == hi:
        hi += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - lo) / (hi - lo)).clamp(0, 1)
    extrapolation = 1 - ramp
    return inv_freq / factor * (1 - extrapolation) + inv_freq * extrapolation, attention


def softmax_mscale2(cfg):
    """DeepseekV3Attention's factor on its softmax scale: mscale(factor, mscale_all_dim)^2."""
    rs = cfg.get("rope_scaling")
    if not rs or not rs.get("mscale_all_dim"):
        return 1.0
    m = 0.1 * rs["mscale_all_dim"] * math.log(rs["factor"]) + 1.0 if rs["factor"] > 1 else 1.0
    return m * m
