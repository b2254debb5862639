#!/usr/bin/env python3
"""Writes the seed corpora of the libFuzzer harnesses (tests/fuzz/<harness>/seeds/): a few
valid inputs each, made from tests/data and tests/tokenizer/data. Run from anywhere; the
seeds are checked in, so this only needs running again when an input layout changes."""
import gzip
import json
import os
import struct
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOKDATA = os.path.join(ROOT, "tests", "tokenizer", "data")


def read(*p):
    with open(os.path.join(ROOT, *p), "rb") as f:
        return f.read()


def seeds(harness, items):
    d = os.path.join(HERE, harness, "seeds")
    os.makedirs(d, exist_ok=True)
    for name, data in items.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())


def u16(n):
    return struct.pack("<H", n)


def part(b):
    return u16(len(b)) + b


# --- recipe: recipe.toml \0 base.toml \0 --set ... (plugin keys as fuzz_recipe.cpp's schema)
base = """[model]
plugin = "gpt"
width = 16
[data]
plugin = "jsonl"
path = "tiny.jsonl"
"""
full = """[train]
iters = 10
seq_len = 32
micro_batch_size = 2
[lr]
max = 3e-4
[parallel]
tensor = 1
[model]
plugin = "gpt"
width = 64
rate = 0.25
mode = "b"
label = "x\\ty"
on = true
[data]
plugin = "jsonl"
path = "a.jsonl"
split = "90,5,5"
[tokenizer]
plugin = "byte"
"""
seeds("recipe", {
    "full.toml": full,
    "include.toml": 'include = "base.toml"\n[train]\niters = 3\n\0' + base,
    "overrides.toml": base + "\0\0model.width=12\0train.seed=7\0data.path=b.jsonl",
    "blend.toml": '[data]\nplugin = "indexed"\nblend = "0.5 a 0.5 b"\n',
    "gpt2.toml": read("recipes", "gpt2-tinyshakespeare.toml"),
})

# --- megatron: u16 idx length, .idx, .bin
def indexed(dtype_code, itemsize, fmt, seqs, docs, modes=False):
    n, m = len(seqs), len(docs)
    idx = b"MMIDIDX\0\0" + struct.pack("<Q", 1) + bytes([dtype_code]) + struct.pack("<QQ", n, m)
    idx += b"".join(struct.pack("<i", len(s)) for s in seqs)
    ptr = 0
    for s in seqs:
        idx += struct.pack("<q", ptr)
        ptr += len(s) * itemsize
    idx += b"".join(struct.pack("<q", d) for d in docs)
    if modes:
        idx += bytes(n)
    bin_ = b"".join(struct.pack("<" + fmt * len(s), *s) for s in seqs)
    return part(idx) + bin_

seeds("megatron", {
    "u16": indexed(8, 2, "H", [[1, 2, 3], [4], []], [0, 1, 3]),
    "i32_modes": indexed(4, 4, "i", [[70000, 5], [6, 7, 8]], [0, 2], modes=True),
    "f64": indexed(6, 8, "d", [[1.0, 2.0]], [0, 1]),
    "empty": indexed(1, 1, "B", [], [0]),
})

# --- safetensors
def safetensors(tensors, meta=None):
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if meta is not None:
        header["__metadata__"] = meta
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data

f32 = lambda *v: struct.pack("<%df" % len(v), *v)
seeds("safetensors", {
    "two": safetensors({"a": ("F32", [2, 2], f32(1, 2, 3, 4)), "b": ("I32", [1], struct.pack("<i", 7))},
                       {"format": "pt"}),
    "bf16": safetensors({"w": ("BF16", [3], b"\0\x3f" * 3), "s": ("F64", [], struct.pack("<d", 1.5))}),
    "empty": safetensors({}),
})

# --- checkpoint: tracker, manifest, model and optimizer files of tensor-parallel rank 0 of 2
manifest = json.dumps({"format": "loom-checkpoint", "version": 1, "iteration": 1,
                       "consumed_samples": 8, "seed": 1234, "files": {},
                       "parallel": {"tensor": 2, "pipeline": 1, "data": 1},
                       "state": {"loss_scale": 65536.0}}).encode()
shards = {"w": {"shape": [4, 2], "split_dim": 0, "tp_rank": 0, "tp_size": 2, "blocks": [2, 2]},
          "b": {"shape": [2], "split_dim": -1, "tp_rank": 0, "tp_size": 2}}
model = safetensors({"w": ("F32", [2, 2], f32(1, 2, 3, 4)), "b": ("F32", [2], f32(5, 6))},
                    {"loom.shards": json.dumps(shards)})
opt_shards = {"w": {"flat_offset": 0, "param": shards["w"]}}
opt = safetensors({"exp_avg.w": ("F32", [4], f32(1, 2, 3, 4)), "exp_avg.b": ("F32", [2], f32(0, 0))},
                  {"loom.shards": json.dumps(opt_shards)})
seeds("checkpoint", {
    "tp2": part(b"1\n") + part(manifest) + part(model) + opt,
    "whole": part(b"1\n") + part(manifest) + part(safetensors({"x": ("F32", [1], f32(1))})) +
    safetensors({"main.x": ("F32", [1], f32(1)), "exp_avg.x": ("F32", [1], f32(0))}),
    "no_tracker": part(b"") + part(manifest) + part(model) + b"",
})

# --- jsonl: plain, gzip, zstd
tiny = read("tests", "data", "data", "tiny.jsonl")
zst = subprocess.run(["zstd", "-q", "-c"], input=tiny, stdout=subprocess.PIPE, check=True).stdout
seeds("jsonl", {
    "tiny.jsonl": tiny,
    "tiny.jsonl.gz": gzip.compress(tiny),
    "tiny.jsonl.zst": zst,
    "keys.jsonl": b'{"text": "a\\u00e9\\ud83d\\ude00"}\n\n  \n{"text": ""}\n{"other": 1}\n',
})

# --- serve: options byte, then the HTTP request
def req(method, target, body=b"", opts=0):
    head = "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" % (method, target)
    if body:
        head += "Content-Length: %d\r\n" % len(body)
    return bytes([opts]) + head.encode() + b"\r\n" + body

seeds("serve", {
    "health": req("GET", "/health"),
    "models": req("GET", "/v1/models"),
    "api": req("PUT", "/api", json.dumps({"prompts": ["hello", "x"], "tokens_to_generate": 4,
                                           "logprobs": True, "top_k": 2, "stop_token": 3}).encode()),
    "completions": req("POST", "/v1/completions", json.dumps(
        {"model": "fuzz", "prompt": ["ab", "c"], "max_tokens": 5, "logprobs": 2, "echo": True,
         "stop": ["x"], "n": 2, "seed": 3}).encode()),
    "stream": req("POST", "/v1/completions", json.dumps(
        {"prompt": "hi", "max_tokens": 6, "stream": True, "stop": "q"}).encode()),
    "chat": req("POST", "/v1/chat/completions", json.dumps(
        {"messages": [{"role": "system", "content": "be brief"},
                      {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
         "max_completion_tokens": 3, "stream": True}).encode()),
    "busy": req("POST", "/v1/completions", b'{"prompt": "a"}', opts=1),
})

# --- tokenizers: byte 0 = mode | option bits << 2; mode 3 = u16 text length, text, model
texts = ["Hello, world! It's 2024.", "  héllo wörld\u00a0\u3053\u3093\u306b\u3061\u306f \U0001f600\n\t end",
         "<|endoftext|>[CLS] [MASK] unaffable", "\xff\xfe raw"]

def tok_seeds(harness, models):
    items = {}
    for i, t in enumerate(texts):
        b = t.encode("utf-8", "surrogateescape") if i < 3 else b"\xff\xfe raw \x80"
        items["text%d" % i] = bytes([0]) + b
    items["ids"] = bytes([1]) + b"".join(u16(i * 37) for i in range(40))
    items["lookup"] = bytes([2]) + b"the"
    for name, (bits, model) in models.items():
        items["model_" + name] = bytes([3 | bits << 2]) + part(texts[0].encode()) + model
    seeds(harness, items)

# tok_gpt2_bpe's fixed model: GPT-2's 256 byte tokens (its byte -> unicode table), a few
# merges, <|endoftext|>.
def gpt2_model():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + len(cs) - 188)
    enc = {b: chr(c) for b, c in zip(bs, cs)}
    vocab = {enc[b]: i for i, b in enumerate(range(256))}
    merges = [("\u0120", "t"), ("h", "e"), ("\u0120t", "he"), ("i", "n"), ("\u0120", "a"), ("e", "r"),
              ("o", "n"), ("\u0120", "s"), ("r", "e"), ("\u0120", "w"), ("a", "t"), ("t", "he"),
              ("\u0120a", "n"), ("in", "g")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    vocab["<|endoftext|>"] = len(vocab)
    d = os.path.join(HERE, "tok_gpt2_bpe", "model")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(vocab, ensure_ascii=False))
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join("%s %s\n" % m for m in merges))

gpt2_model()
gpt2 = read("tests", "fuzz", "tok_gpt2_bpe", "model", "vocab.json") + b"\0" + \
    read("tests", "fuzz", "tok_gpt2_bpe", "model", "merges.txt")
tok_seeds("tok_gpt2_bpe", {"small": (0, gpt2)})
tok_seeds("tok_hf_json", {"gpt2": (1, read("tests", "tokenizer", "data", "hf-gpt2-skeleton.json")),
                          "llama3": (1, read("tests", "tokenizer", "data", "hf-llama3-skeleton.json"))})
tok_seeds("tok_wordpiece", {"vocab": (1 | 2 << 1, read("tests", "tokenizer", "data", "wordpiece-vocab.txt"))})


# A SentencePiece ModelProto written by hand (protobuf wire format), a few hundred bytes, so
# that loading one per execution stays fast: pieces (piece = 1, score = 2, type = 3), the
# trainer spec (model_type = 3: 1 unigram, 2 BPE; byte_fallback = 35) and an identity
# normalizer spec (add_dummy_prefix = 3, escape_whitespaces = 5).
def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out

def field(num, wire, payload):
    key = varint(num << 3 | wire)
    if wire == 2:
        return key + varint(len(payload)) + payload
    return key + payload

def sp_model(model_type, byte_fallback=False):
    pieces = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3)]
    if byte_fallback:
        pieces += [("<0x%02X>" % b, 0.0, 6) for b in range(256)]
    words = ["\u2581", "\u2581t", "he", "\u2581the", "in", "er", "an", "\u2581a", "on", "re"]
    words += list("abcdefghijklmnopqrstuvwxyz,.!'")
    pieces += [(w, -float(i), 1) for i, w in enumerate(words)]
    body = b"".join(field(1, 2, field(1, 2, p.encode()) + field(2, 5, struct.pack("<f", sc)) +
                          field(3, 0, varint(t))) for p, sc, t in pieces)
    trainer = field(3, 0, varint(model_type)) + field(35, 0, varint(1 if byte_fallback else 0))
    normalizer = field(1, 2, b"identity") + field(3, 0, varint(1)) + field(5, 0, varint(1))
    return body + field(2, 2, trainer) + field(3, 2, normalizer)

tok_seeds("tok_sentencepiece", {"bpe": (3, sp_model(2)), "unigram": (0, sp_model(1)),
                                "bytes": (1, sp_model(2, byte_fallback=True))})
