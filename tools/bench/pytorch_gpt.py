#!/usr/bin/env python3
"""PyTorch reference throughput of the GPT that Loom's recipes train (nanoGPT-style).

GPT-2 architecture: learned positions, pre-LayerNorm blocks with biases, tanh-GELU MLP of
4 x n_embd, tied input/output embeddings, vocabulary padded to 50304 (a multiple of 128 for
the tensor cores). Trained the fast way PyTorch offers on one GPU: bf16 autocast, torch.compile,
SDPA flash attention (is_causal=True), fused AdamW, random tokens (throughput does not depend on
the data). Prints one JSON line:

  {"tokens_per_s": ..., "step_ms": ..., "peak_mem_bytes": ..., "mfu": ..., ...}

mfu = (6 N + 6 L C T) x tokens/s / peak: N the parameters less the position table (the tied
embedding counted once), 6 L C T the attention score and value matmuls of a causal mask (half
of PaLM's 12 L C T), and peak the GPU's dense bf16 rate (989 TFLOP/s on H100/H200 SXM;
--peak_tflops to override). mfu_loom counts FLOPs as model/gpt's flops_per_token does (6 x the
matmul weights incl. the 50,257-row LM head, + 12 L C T), the number `loom run` reports, so
the two engines' MFU compare like for like.

Example (GPT-2 124M, the shape of recipes/gpt2-124m.toml):
  python3 tools/bench/pytorch_gpt.py --n_layer 12 --n_head 12 --n_embd 768 --seq 1024 --batch 16
"""
import argparse
import json
import math
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--n_layer", type=int, default=12, help="transformer layers")
    p.add_argument("--n_head", type=int, default=12, help="attention heads")
    p.add_argument("--n_embd", type=int, default=768, help="model width")
    p.add_argument("--seq", type=int, default=1024, help="tokens per sample")
    p.add_argument("--batch", type=int, default=16, help="samples per step (micro-batch)")
    p.add_argument("--steps", type=int, default=30, help="timed steps")
    p.add_argument("--warmup", type=int, default=10,
                   help="untimed steps first (torch.compile's compilation happens here)")
    p.add_argument("--vocab", type=int, default=50304, help="padded vocabulary size")
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--no_compile", action="store_true", help="skip torch.compile")
    p.add_argument("--peak_tflops", type=float, default=0.0,
                   help="dense bf16 peak for MFU; 0 = by device name (H100/H200: 989)")
    p.add_argument("--seed", type=int, default=1234)
    return p.parse_args(argv)


def build_model(torch, args):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self, C, H):
            super().__init__()
            self.H = H
            self.ln_1 = nn.LayerNorm(C)
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            self.ln_2 = nn.LayerNorm(C)
            self.c_fc = nn.Linear(C, 4 * C)
            self.mlp_proj = nn.Linear(4 * C, C)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self, L, H, C, T, V):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(T, C)
            self.h = nn.ModuleList([Block(C, H) for _ in range(L)])
            self.ln_f = nn.LayerNorm(C)
            self.lm_head = nn.Linear(C, V, bias=False)
            self.lm_head.weight = self.wte.weight  # tied
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                    nn.init.normal_(p, 0.0, std)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)

        def forward(self, idx, targets):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))

    return GPT(args.n_layer, args.n_head, args.n_embd, args.seq, args.vocab)


def peak_flops(torch, args):
    if args.peak_tflops > 0:
        return args.peak_tflops * 1e12
    name = torch.cuda.get_device_name()
    if "H100" in name or "H200" in name:
        return 989e12
    if "A100" in name:
        return 312e12
    return 0.0


def main(argv=None):
    args = parse_args(argv)
    if args.n_embd % args.n_head:
        print(f"error: n_embd {args.n_embd} is not a multiple of n_head {args.n_head}",
              file=sys.stderr)
        return 2
    try:
        import torch  # lazily: --help works without PyTorch
    except ImportError as e:
        print(f"error: PyTorch is not installed ({e}); pip install torch, or run Loom alone",
              file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: torch.cuda.is_available() is False: this benchmark needs a CUDA GPU",
              file=sys.stderr)
        return 2

    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = "cuda"
    model = build_model(torch, args).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_fn = model if args.no_compile else torch.compile(model)

    B, T = args.batch, args.seq
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    x = torch.randint(0, 50257, (B, T), device=dev, generator=gen)
    y = torch.randint(0, 50257, (B, T), device=dev, generator=gen)

    def step():
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / max(args.steps, 1)

    n_params = sum(p.numel() for p in model.parameters())  # tied wte counted once
    n_params -= model.wpe.weight.numel()  # position table: no matmul
    L, C = args.n_layer, args.n_embd
    flops_per_token = 6 * n_params + 6 * L * C * T
    loom_flops_per_token = 6 * (L * 12 * C * C + 50257 * C) + 12 * L * C * T
    tokens_per_s = B * T / dt
    peak = peak_flops(torch, args)
    print(json.dumps({
        "tokens_per_s": round(tokens_per_s, 1),
        "step_ms": round(dt * 1e3, 3),
        "peak_mem_bytes": int(torch.cuda.max_memory_allocated()),
        "mfu": round(flops_per_token * tokens_per_s / peak, 4) if peak else None,
        "mfu_loom": round(loom_flops_per_token * tokens_per_s / peak, 4) if peak else None,
        "params": n_params,
        "loss": round(float(loss), 4),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "config": {"n_layer": L, "n_head": args.n_head, "n_embd": C, "seq": T, "batch": B,
                   "compile": not args.no_compile},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
