#!/usr/bin/env python3
"""Writes tests/model/hf/llama-chat-tiny: a tiny LlamaForCausalLM (random weights) with a
byte-level tokenizer and Llama 3's chat markers, the model docs/finetuning.md's LoRA
walkthrough imports. Standard library only; deterministic (seed 38).

  tokenizer.json: a ByteLevel BPE over the 256 byte symbols with no merges (every byte one
    token, ids 0-255), and Llama 3's special tokens after them: <|begin_of_text|> (256, the
    BOS its post-processor adds), <|end_of_text|>, <|start_header_id|>, <|end_header_id|>,
    <|eot_id|> (257-260).
  tokenizer_config.json: the BOS and EOS names and a chat_template carrying Llama 3's
    distinctive rule (the header markers, '\\n\\n', trim, <|eot_id|>), which Loom recognises
    as "llama3"; not the published template's whole text.
  config.json, model.safetensors: 2 layers of width 32, 4 query and 2 key/value heads,
    SwiGLU of 64, untied, vocab_size 261, F32 weights drawn normal(0, 0.05).

Run: python3 tests/model/hf/make_chat_llama.py
"""
import json
import os
import random
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llama-chat-tiny")
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
            "<|eot_id|>"]
C, L, H, KV, F, V = 32, 2, 4, 2, 64, 256 + len(SPECIALS)


def byte_symbols():
    """GPT-2's bytes_to_unicode: the printable bytes as themselves, the rest from U+0100."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + \
        list(range(0xAE, 0xFF + 1))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return chars


def tokenizer():
    sym = byte_symbols()
    added = [{"id": 256 + i, "content": t, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for i, t in enumerate(SPECIALS)]
    bos = {"SpecialToken": {"id": SPECIALS[0], "type_id": 0}}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, bos,
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {SPECIALS[0]: {"id": SPECIALS[0], "ids": [256],
                                                            "tokens": [SPECIALS[0]]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "vocab": {sym[b]: b for b in range(256)},
                  "merges": []}}


def weights(rng):
    D = C // H
    shapes = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,),
              "lm_head.weight": (V, C)}
    for l in range(L):
        p = f"model.layers.{l}."
        shapes.update({p + "input_layernorm.weight": (C,),
                       p + "post_attention_layernorm.weight": (C,),
                       p + "self_attn.q_proj.weight": (H * D, C),
                       p + "self_attn.k_proj.weight": (KV * D, C),
                       p + "self_attn.v_proj.weight": (KV * D, C),
                       p + "self_attn.o_proj.weight": (C, H * D),
                       p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C),
                       p + "mlp.down_proj.weight": (C, F)})
    tensors = {}
    for name in sorted(shapes):
        n = 1
        for e in shapes[name]:
            n *= e
        norm = name.endswith("norm.weight")
        vals = [1.0 if norm else rng.gauss(0.0, 0.05) for _ in range(n)]
        tensors[name] = (shapes[name], struct.pack(f"<{n}f", *vals))
    return tensors


def write_safetensors(path, tensors):
    header, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, (shape, data) in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    os.makedirs(OUT, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C,
              "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H,
              "num_key_value_heads": KV, "head_dim": C // H, "hidden_act": "silu",
              "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
              "rope_scaling": None, "attention_bias": False, "attention_dropout": 0.0,
              "mlp_bias": False, "tie_word_embeddings": False, "vocab_size": V,
              "bos_token_id": 256, "eos_token_id": 260, "initializer_range": 0.05,
              "pretraining_tp": 1, "torch_dtype": "float32", "use_cache": True,
              "transformers_version": "4.46.0"}
    template = ("{{ bos_token }}{% for message in messages %}{% set content = "
                "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
                "message['content'] | trim + '<|eot_id|>' %}{{ content }}{% endfor %}"
                "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant"
                "<|end_header_id|>\\n\\n' }}{% endif %}")
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(OUT, "tokenizer.json"), "w") as f:
        json.dump(tokenizer(), f, ensure_ascii=False)
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": SPECIALS[0], "eos_token": SPECIALS[4],
                   "chat_template": template, "model_max_length": 256}, f, indent=2)
    write_safetensors(os.path.join(OUT, "model.safetensors"), weights(random.Random(38)))
    print(f"wrote {OUT}: vocab {V}, width {C}, {L} layers")


if __name__ == "__main__":
    main()
