"""Hugging Face `transformers`' batched generate on the model of a Loom recipe, the peer of
`loom serve` in tools/gpu-check's serving rows (issue 34). Randomly initialised weights (the
speed of decoding does not depend on their values), the recipe's shape and dtype, a batch of
B prompts of PROMPT random token ids, NEW tokens sampled (top-k 50, no early stop). For each
batch size it prints one JSON line:
  batch, prompt, new, dtype, ttft_s (a generate of one new token: the prompt's forward and
  the first sample), total_s (all NEW tokens), tokens_per_s (B x NEW / total_s),
  decode_tokens_per_s (B x (NEW - 1) / (total_s - ttft_s): the steps after the first).

  hf_generate.py --family gpt2|llama --n_layer L --n_head H [--n_kv_head KV] --n_embd C
                 [--ffn F] [--vocab V] [--rope_theta R] [--tie true|false] --dtype bf16|fp32
                 --batches 1,16,64 [--prompt 12] [--new 64] [--device cuda]
"""
import argparse
import json
import sys
import time


def build(args, torch):
    import transformers as tf

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    if args.family == "gpt2":
        cfg = tf.GPT2Config(n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd,
                            vocab_size=args.vocab, n_positions=args.max_len,
                            bos_token_id=args.vocab - 1, eos_token_id=args.vocab - 1)
        model = tf.GPT2LMHeadModel(cfg)
    else:
        cfg = tf.LlamaConfig(num_hidden_layers=args.n_layer, num_attention_heads=args.n_head,
                             num_key_value_heads=args.n_kv_head or args.n_head,
                             hidden_size=args.n_embd, intermediate_size=args.ffn,
                             vocab_size=args.vocab, max_position_embeddings=args.max_len,
                             tie_word_embeddings=args.tie == "true", bos_token_id=0,
                             eos_token_id=args.vocab - 1)
        # transformers 5 keeps the base in rope_parameters, 4.x in rope_theta
        if isinstance(getattr(cfg, "rope_parameters", None), dict):
            cfg.rope_parameters["rope_theta"] = args.rope_theta
        else:
            cfg.rope_theta = args.rope_theta
        model = tf.LlamaForCausalLM(cfg)
    return model.to(device=args.device, dtype=dtype).eval()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--family", choices=["gpt2", "llama"], required=True)
    for k in ("n_layer", "n_head", "n_embd"):
        p.add_argument("--" + k, type=int, required=True)
    p.add_argument("--n_kv_head", type=int, default=0)
    p.add_argument("--ffn", type=int, default=0)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--rope_theta", type=float, default=10000.0)
    p.add_argument("--tie", default="true")
    p.add_argument("--max_len", type=int, default=1024)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--batches", default="1,16,64")
    p.add_argument("--prompt", type=int, default=12)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    if args.family == "llama" and args.ffn <= 0:
        sys.exit("hf_generate.py: --ffn is needed for llama")

    import torch

    torch.manual_seed(0)
    model = build(args, torch)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    for b in [int(x) for x in args.batches.split(",")]:
        ids = torch.randint(0, args.vocab - 1, (b, args.prompt), device=args.device)
        mask = torch.ones_like(ids)

        def generate(n):
            sync()
            t0 = time.perf_counter()
            with torch.inference_mode():
                out = model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                                     do_sample=True, top_k=50, temperature=0.8,
                                     pad_token_id=args.vocab - 1)
            sync()
            assert out.shape == (b, args.prompt + n), out.shape
            return time.perf_counter() - t0

        generate(args.new)  # warm-up: kernels chosen, caches allocated
        ttft = min(generate(1) for _ in range(3))
        total = generate(args.new)
        print(json.dumps({"batch": b, "prompt": args.prompt, "new": args.new, "dtype": args.dtype,
                          "ttft_s": round(ttft, 4), "total_s": round(total, 4),
                          "tokens_per_s": round(b * args.new / total, 1),
                          "decode_tokens_per_s": round(b * (args.new - 1) / max(total - ttft, 1e-9),
                                                       1)}), flush=True)


if __name__ == "__main__":
    main()
