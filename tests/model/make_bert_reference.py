#!/usr/bin/python3
"""Independent PyTorch (float64) reference for model/bert: writes tests/model/data/bert_*.txt.

Rebuilt from Megatron's BERT definition, not from Loom's code: word + position + token-type
embeddings; pre-LN layers (x + attn(LN(x)), x + mlp(LN(x))) with bidirectional attention
over each row's real tokens (padding keys masked, as Megatron's padding mask); the final
LayerNorm; the LM head's transform (dense, exact GELU, LayerNorm) then the tied word
embeddings and an output bias; the pooler tanh(dense(x[CLS])) and the binary head.
Loss: loss_scale * (B T / count * sum of masked-token losses + T * sum of sentence-order
losses) with loss_scale = 1 / (B T), the objective model/bert's two loss terms give (weights
B T / count and T): Megatron's mean masked-token loss plus its mean sentence-order loss. Parameters and tokens come
from torch.manual_seed; the files hold float32 parameter values so the f32 model under test
holds exactly the same numbers.

bert_tiny_classifier is model/bert-classifier: the pooler and a 3-way classifier on [CLS]
instead of both heads, its loss T * (sum of the sequences' cross-entropies), the mean under
loss_scale = 1 / (B T).

Run (Debian's python3-torch, CPU):  /usr/bin/python3 tests/model/make_bert_reference.py
"""
import math
import os
import sys

import torch
import torch.nn.functional as F
from reference_util import cases, ints, reference_file, write_gradients

torch.set_default_dtype(torch.float64)

CONFIGS = {
    "bert_tiny": dict(options=dict(n_layer=2, n_head=2, n_embd=16, max_seq_len=16,
                                   pad_vocab_to=128, binary_head="true", num_tokentypes=2),
                      vocab=64, batch=3, seq=8, lengths=[8, 5, 3], seed=2024),
    # model/bert-classifier (Megatron's Classification): the pooler and a 3-way classifier on
    # [CLS] instead of the LM and binary heads; no tied output layer
    "bert_tiny_classifier": dict(options=dict(n_layer=2, n_head=2, n_embd=16, max_seq_len=16,
                                              pad_vocab_to=128, num_tokentypes=2,
                                              num_classes=3),
                                 vocab=64, batch=4, seq=8, lengths=[8, 6, 3, 7], seed=31),
    # the original BERT's post-LN (norm_position = "post"): LayerNorm on the embeddings,
    # each layer normalising after its residual adds, no final LayerNorm
    "bert_tiny_postln": dict(options=dict(n_layer=2, n_head=2, n_embd=16, max_seq_len=16,
                                          pad_vocab_to=128, binary_head="true",
                                          num_tokentypes=2, norm_position="post"),
                             vocab=64, batch=3, seq=8, lengths=[8, 4, 6], seed=5),
    "bert_tiny_nobinary": dict(options=dict(n_layer=2, n_head=4, n_embd=16, max_seq_len=16,
                                            pad_vocab_to=128, binary_head="false",
                                            num_tokentypes=0),
                               vocab=50, batch=2, seq=8, lengths=[6, 8], seed=77),
}


def param_specs(o, vocab):
    """(name, shape, kind) in model/bert's order; kind: matrix | bias | norm_w | norm_b."""
    C, L = o["n_embd"], o["n_layer"]
    specs = [("wte", (vocab, C), "matrix"), ("wpe", (o["max_seq_len"], C), "matrix")]
    if o["num_tokentypes"] > 0:
        specs.append(("tokentype", (o["num_tokentypes"], C), "matrix"))
    post = o.get("norm_position") == "post"

    def norm(p):
        specs.extend([(p + ".weight", (C,), "norm_w"), (p + ".bias", (C,), "norm_b")])

    def linear(p, out, inp):
        specs.extend([(p + ".weight", (out, inp), "matrix"), (p + ".bias", (out,), "bias")])

    if post:
        norm("emb_ln")
    for l in range(L):
        p = f"h.{l}"
        norm(p + ".ln_1")
        linear(p + ".attn.c_attn", 3 * C, C)
        linear(p + ".attn.c_proj", C, C)
        norm(p + ".ln_2")
        linear(p + ".mlp.c_fc", 4 * C, C)
        linear(p + ".mlp.c_proj", C, 4 * C)
    if not post:
        norm("ln_f")
    if "num_classes" in o:
        linear("pooler.dense", C, C)
        linear("classifier", o["num_classes"], C)
        return specs
    linear("lm_head.dense", C, C)
    norm("lm_head.norm")
    specs.append(("lm_head.bias", (vocab,), "bias"))
    if o["binary_head"] == "true":
        linear("pooler.dense", C, C)
        linear("binary_head", 2, C)
    return specs


def forward(o, P, tokens, types, padding):
    C, L, H = o["n_embd"], o["n_layer"], o["n_head"]
    D = C // H
    B, T = tokens.shape
    eps = 1e-5

    def norm(x, p):
        return F.layer_norm(x, (C,), P[p + ".weight"], P[p + ".bias"], eps)

    def linear(x, p):
        return F.linear(x, P[p + ".weight"], P[p + ".bias"])

    x = P["wte"][tokens] + P["wpe"][torch.arange(T)][None]
    if o["num_tokentypes"] > 0:
        x = x + P["tokentype"][types]
    key_masked = (padding == 0)[:, None, None, :]  # (B, 1, 1, T): padding keys
    post = o.get("norm_position") == "post"

    def attention(y, p):
        q, k, v = linear(y, p + ".attn.c_attn").split(C, dim=-1)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        s = s.masked_fill(key_masked, float("-inf"))
        a = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        return linear(a, p + ".attn.c_proj")

    def mlp(y, p):
        return linear(F.gelu(linear(y, p + ".mlp.c_fc")), p + ".mlp.c_proj")  # exact GELU

    if post:
        x = norm(x, "emb_ln")
    for l in range(L):
        p = f"h.{l}"
        if post:  # h = ln_1(x + attn(x)); x = ln_2(h + mlp(h))
            h = norm(x + attention(x, p), p + ".ln_1")
            x = norm(h + mlp(h, p), p + ".ln_2")
        else:  # x += attn(ln_1(x)); x += mlp(ln_2(x))
            x = x + attention(norm(x, p + ".ln_1"), p)
            x = x + mlp(norm(x, p + ".ln_2"), p)
    if not post:
        x = norm(x, "ln_f")
    if "num_classes" in o:  # the classifier: logits (B, K)
        return linear(torch.tanh(linear(x[:, 0], "pooler.dense")), "classifier"), None
    h = norm(F.gelu(linear(x, "lm_head.dense")), "lm_head.norm")
    logits = h @ P["wte"].t() + P["lm_head.bias"]
    sop = None
    if o.get("binary_head") == "true":
        pooled = torch.tanh(linear(x[:, 0], "pooler.dense"))
        sop = linear(pooled, "binary_head")
    return logits, sop


def main():
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    os.makedirs(out_dir, exist_ok=True)
    for name, cfg, gen, specs, P in cases(CONFIGS, param_specs):
        o, vocab, B, T = cfg["options"], cfg["vocab"], cfg["batch"], cfg["seq"]
        padding = torch.zeros(B, T, dtype=torch.long)
        for b, n in enumerate(cfg["lengths"]):
            padding[b, :n] = 1
        tokens = torch.randint(0, vocab, (B, T), generator=gen) * padding
        types = (torch.arange(T)[None, :] >= torch.tensor(cfg["lengths"])[:, None] // 2).long()
        types = types * padding if o["num_tokentypes"] > 0 else torch.zeros_like(types)
        # masked positions (about a third of the real tokens) carry their original token
        chosen = (torch.rand(B, T, generator=gen) < 0.35) & (padding == 1)
        chosen[:, 1] = padding[:, 1] == 1  # at least one per row
        targets = torch.where(chosen, torch.randint(0, vocab, (B, T), generator=gen),
                              torch.full((B, T), -1))
        sop_labels = torch.randint(0, 2, (B,), generator=gen)
        count = int((targets != -1).sum())
        loss_scale = 1.0 / (B * T)  # the host's scale for one micro-batch
        logits, sop = forward(o, P, tokens, types, padding)
        labels, correct = None, 0
        if "num_classes" in o:  # the classifier's loss: its mean over sequences (weight T)
            labels = torch.randint(0, o["num_classes"], (B,), generator=gen)
            lm_sum = F.cross_entropy(logits, labels, reduction="sum")
            objective = T * lm_sum
            correct = int((logits.argmax(-1) == labels).sum())
        else:
            lm_sum = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1),
                                     ignore_index=-1, reduction="sum")
            objective = (B * T / count) * lm_sum
        sop_sum = torch.zeros(())
        if sop is not None:
            sop_sum = F.cross_entropy(sop, sop_labels, reduction="sum")
            objective = objective + T * sop_sum
        (loss_scale * objective).backward()
        with reference_file(out_dir, "model/bert", "make_bert_reference.py", name, cfg,
                            "option <key> <value> | create <vocab> <batch> <seq> | tokens ... | "
                            "targets ... | token_types ... | padding_mask ... | sop_labels ... | "
                            "labels ... | accuracy <correct> | loss_sum <lm> | sop_sum <v> | "
                            "loss_scale <v> | param <name> <numel> <values...> | grad <name> "
                            "<numel> <values...>") as f:
            f.write(ints("tokens", tokens) + ints("targets", targets))
            f.write(ints("token_types", types) + ints("padding_mask", padding))
            f.write(ints("sop_labels", sop_labels))
            if labels is not None:
                f.write(ints("labels", labels))
                f.write(f"accuracy {correct}\n")
            f.write(f"loss_sum {lm_sum.item():.17g}\n")
            f.write(f"sop_sum {sop_sum.item():.17g}\n")
            write_gradients(f, loss_scale, specs, P)
        print(f"{f.name}: lm {lm_sum.item():.6f} over {count} tokens, sop {sop_sum.item():.6f}")


if __name__ == "__main__":
    sys.exit(main())
