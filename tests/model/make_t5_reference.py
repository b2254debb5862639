#!/usr/bin/python3
"""Independent PyTorch (float64) reference for model/t5: writes tests/model/data/t5_*.txt.

Rebuilt from Megatron's T5 definition (megatron/core/models/T5), not from Loom's code:
  - one embedding, words plus learned absolute positions, shared by encoder and decoder;
  - the encoder: pre-LN layers (x + attn(LN(x)), x + mlp(LN(x))), bidirectional attention
    with the encoder's padding keys masked, then a final LayerNorm: the encoder output;
  - the decoder: pre-LN layers of causal self-attention, cross-attention to the encoder
    output (queries from LN(x), keys and values from the encoder output, the encoder's
    padding keys masked) and the MLP, then a final LayerNorm;
  - the LM head: the tied word embeddings plus an output bias (Megatron's T5LMHead);
  - the loss: Megatron's mean over the decoder's real targets (loss_mask), i.e.
    loss_scale * (B T / count) * (sum of target losses) with loss_scale = 1 / (B T), the
    objective model/t5's loss term gives (weight B T / count).
Head projections use kv_channels (D != C / H) and the decoder has its own layer count, as
Megatron's --kv-channels and --decoder-num-layers allow.

t5_tiny_relative is position = "relative" (Megatron's --position-embedding-type relative,
RelativePositionEmbedding): no position table; the encoder's self-attention scores get
table_enc[bucket(s - t), h] (bidirectional buckets), the decoder's table_dec[...]
(unidirectional), in every layer; the cross-attention none. Buckets are computed here with
torch's float32 log as Megatron computes them. Loom stores each table as (heads, buckets),
the transpose of Megatron's nn.Embedding(buckets, heads). The exact (erf) GELU, Megatron's
default activation. Parameters and tokens come from torch.manual_seed; the files hold float32
parameter values so the f32 model under test holds exactly the same numbers.

Run (Debian's python3-torch, CPU):  /usr/bin/python3 tests/model/make_t5_reference.py
"""
import math
import os
import sys

import torch
import torch.nn.functional as F
from reference_util import cases, ints, reference_file, write_gradients

torch.set_default_dtype(torch.float64)

CONFIGS = {
    "t5_tiny": dict(options=dict(n_layer=2, decoder_layers=3, n_head=2, n_embd=16, kv_channels=6,
                                 ffn_hidden=24, max_seq_len=16, decoder_seq_len=6,
                                 pad_vocab_to=128),
                    vocab=60, batch=3, seq=8, lengths=[8, 5, 3], dec_lengths=[6, 3, 4],
                    seed=2026),
    # 8 buckets (4 per direction in the encoder) and max distance 10: distances from 2 (the
    # encoder) and 4 (the decoder) on fall in the logarithmic buckets
    "t5_tiny_relative": dict(options=dict(n_layer=2, decoder_layers=2, n_head=2, n_embd=16,
                                          kv_channels=8, ffn_hidden=24, max_seq_len=16,
                                          decoder_seq_len=6, pad_vocab_to=128,
                                          position="relative",
                                          relative_attention_num_buckets=8,
                                          relative_attention_max_distance=10),
                             vocab=60, batch=2, seq=8, lengths=[8, 6], dec_lengths=[6, 4],
                             seed=99),
}


def param_specs(o, vocab):
    """(name, shape, kind) in model/t5's order; kind: matrix | bias | norm_w | norm_b."""
    C, H, D, F_ = o["n_embd"], o["n_head"], o["kv_channels"], o["ffn_hidden"]
    specs = [("wte", (vocab, C), "matrix")]
    if o.get("position") == "relative":
        nb = o["relative_attention_num_buckets"]
        specs += [("enc.rel_bias", (H, nb), "matrix"), ("dec.rel_bias", (H, nb), "matrix")]
    else:
        specs.append(("wpe", (o["max_seq_len"], C), "matrix"))

    def norm(p):
        specs.extend([(p + ".weight", (C,), "norm_w"), (p + ".bias", (C,), "norm_b")])

    def linear(p, out, inp):
        specs.extend([(p + ".weight", (out, inp), "matrix"), (p + ".bias", (out,), "bias")])

    for l in range(o["n_layer"]):
        p = f"enc.h.{l}"
        norm(p + ".ln_1")
        linear(p + ".attn.c_attn", 3 * H * D, C)
        linear(p + ".attn.c_proj", C, H * D)
        norm(p + ".ln_2")
        linear(p + ".mlp.c_fc", F_, C)
        linear(p + ".mlp.c_proj", C, F_)
    norm("enc.ln_f")
    for l in range(o["decoder_layers"]):
        p = f"dec.h.{l}"
        norm(p + ".ln_1")
        linear(p + ".attn.c_attn", 3 * H * D, C)
        linear(p + ".attn.c_proj", C, H * D)
        norm(p + ".ln_x")
        linear(p + ".xattn.q", H * D, C)
        linear(p + ".xattn.kv", 2 * H * D, C)
        linear(p + ".xattn.c_proj", C, H * D)
        norm(p + ".ln_2")
        linear(p + ".mlp.c_fc", F_, C)
        linear(p + ".mlp.c_proj", C, F_)
    norm("dec.ln_f")
    specs.append(("lm_head.bias", (vocab,), "bias"))
    return specs


def relative_bucket(rel, bidirectional, num_buckets, max_distance):
    """Megatron's RelativePositionEmbedding._relative_position_bucket, in torch ops."""
    buckets = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets += (rel > 0).long() * num_buckets
        rel = rel.abs()
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    max_exact = num_buckets // 2
    large = max_exact + (torch.log(rel.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).long()
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(rel < max_exact, rel, large)


def relative_bias(o, table, n, bidirectional):
    """(1, H, n, n): table[h, bucket(s - t)] (Loom's (heads, buckets) table)."""
    rel = torch.arange(n)[None, :] - torch.arange(n)[:, None]
    b = relative_bucket(rel, bidirectional, o["relative_attention_num_buckets"],
                        o["relative_attention_max_distance"])
    return table.t()[b].permute(2, 0, 1)[None]


def forward(o, P, tokens, padding, dec_tokens):
    C, H, D = o["n_embd"], o["n_head"], o["kv_channels"]
    B, T = tokens.shape
    K = dec_tokens.shape[1]

    def norm(x, p):
        return F.layer_norm(x, (C,), P[p + ".weight"], P[p + ".bias"], 1e-5)

    def linear(x, p):
        return F.linear(x, P[p + ".weight"], P[p + ".bias"])

    def heads(t, n):
        return t.view(B, n, H, D).transpose(1, 2)

    def attend(q, k, v, masked, p, bias=None):  # q (B,H,Tq,D), masked: True where hidden
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        if bias is not None:
            s = s + bias
        a = s.masked_fill(masked, float("-inf")).softmax(-1) @ v
        return linear(a.transpose(1, 2).reshape(B, q.shape[2], H * D), p)

    def self_attention(y, p, n, masked, bias=None):
        q, k, v = linear(y, p + ".attn.c_attn").split(H * D, dim=-1)
        return attend(heads(q, n), heads(k, n), heads(v, n), masked, p + ".attn.c_proj", bias)

    relative = o.get("position") == "relative"
    enc_bias = relative_bias(o, P["enc.rel_bias"], T, True) if relative else None
    dec_bias = relative_bias(o, P["dec.rel_bias"], K, False) if relative else None

    def positions(n):
        return 0 if relative else P["wpe"][torch.arange(n)][None]

    def mlp(y, p):
        return linear(F.gelu(linear(y, p + ".mlp.c_fc")), p + ".mlp.c_proj")  # exact GELU

    enc_keys_masked = (padding == 0)[:, None, None, :]  # (B,1,1,T)
    x = P["wte"][tokens] + positions(T)
    for l in range(o["n_layer"]):
        p = f"enc.h.{l}"
        x = x + self_attention(norm(x, p + ".ln_1"), p, T, enc_keys_masked, enc_bias)
        x = x + mlp(norm(x, p + ".ln_2"), p)
    mem = norm(x, "enc.ln_f")

    causal_masked = torch.ones(K, K, dtype=torch.bool).triu(1)[None, None]
    y = P["wte"][dec_tokens] + positions(K)
    for l in range(o["decoder_layers"]):
        p = f"dec.h.{l}"
        y = y + self_attention(norm(y, p + ".ln_1"), p, K, causal_masked, dec_bias)
        q = heads(linear(norm(y, p + ".ln_x"), p + ".xattn.q"), K)
        k, v = linear(mem, p + ".xattn.kv").split(H * D, dim=-1)
        y = y + attend(q, heads(k, T), heads(v, T), enc_keys_masked, p + ".xattn.c_proj")
        y = y + mlp(norm(y, p + ".ln_2"), p)
    y = norm(y, "dec.ln_f")
    return y @ P["wte"].t() + P["lm_head.bias"]


def write_buckets(out_dir):
    """t5_buckets.txt: Megatron's buckets at T5's defaults (32, 128) and at (8, 10), both
    directions, for relative positions -600 .. 600: where the float32 logarithm decides."""
    rel = torch.arange(-600, 601)
    path = os.path.join(out_dir, "t5_buckets.txt")
    with open(path, "w") as f:
        f.write("# Megatron's relative position buckets, written by tests/model/make_t5_reference.py\n")
        f.write("# lines: <num_buckets> <max_distance> <bidirectional 0|1> then the buckets of -600 .. 600\n")
        for nb, md in ((32, 128), (8, 10)):
            for bi in (1, 0):
                f.write(f"{nb} {md} {bi} " + " ".join(map(str, relative_bucket(rel, bool(bi), nb, md).tolist())) + "\n")
    print(path)


def main():
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    os.makedirs(out_dir, exist_ok=True)
    write_buckets(out_dir)
    for name, cfg, gen, specs, P in cases(CONFIGS, param_specs):
        o, vocab, B, T = cfg["options"], cfg["vocab"], cfg["batch"], cfg["seq"]
        K = o["decoder_seq_len"]
        padding = torch.zeros(B, T, dtype=torch.long)
        for b, n in enumerate(cfg["lengths"]):
            padding[b, :n] = 1
        dec_real = torch.zeros(B, K, dtype=torch.long)
        for b, n in enumerate(cfg["dec_lengths"]):
            dec_real[b, :n] = 1
        tokens = torch.randint(0, vocab, (B, T), generator=gen) * padding
        dec_tokens = torch.randint(0, vocab, (B, K), generator=gen) * dec_real
        targets = torch.where(dec_real == 1, torch.randint(0, vocab, (B, K), generator=gen),
                              torch.full((B, K), -1))
        count = int((targets != -1).sum())
        loss_scale = 1.0 / (B * T)  # the host's scale for one micro-batch of B rows of T
        logits = forward(o, P, tokens, padding, dec_tokens)
        lm_sum = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1), ignore_index=-1,
                                 reduction="sum")
        (loss_scale * (B * T / count) * lm_sum).backward()
        with reference_file(out_dir, "model/t5", "make_t5_reference.py", name, cfg,
                            "option <key> <value> | create <vocab> <batch> <seq> | tokens ... | "
                            "padding_mask ... | dec_tokens ... | dec_targets ... | loss_sum "
                            "<lm> | loss_scale <v> | param <name> <numel> <values...> | grad "
                            "<name> <numel> <values...>") as f:
            f.write(ints("tokens", tokens) + ints("padding_mask", padding))
            f.write(ints("dec_tokens", dec_tokens) + ints("dec_targets", targets))
            f.write(f"loss_sum {lm_sum.item():.17g}\n")
            write_gradients(f, loss_scale, specs, P)
        print(f"{f.name}: lm {lm_sum.item():.6f} over {count} tokens")


if __name__ == "__main__":
    sys.exit(main())
