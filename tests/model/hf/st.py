"""Reads safetensors files with the standard library only (tests/model/hf_interop.sh), and
compares them: an independent reader, not Loom's.

  python3 st.py logits LOOM.safetensors REFERENCE.safetensors TOL
      max |loom - ref| / max(1, max |ref|) over every logit must be <= TOL
  python3 st.py same DIR_A DIR_B
      every tensor of HF directory A has the same dtype, shape and bytes in B, under the
      same name (or A's name with GPT2LMHeadModel's "transformer." prefix); A's causal-mask
      buffers (attn.bias, attn.masked_bias) excepted, as export does not write them
  python3 st.py peft BASE_DIR MERGED_DIR PEFT_DIR TOL
      PEFT's adapters (adapter_config.json, adapter_model.safetensors) applied as PEFT merges
      them: every targeted module's weight in MERGED is BASE's + lora_alpha / r x B A
      (transposed where fan_in_fan_out: GPT-2's Conv1D), within TOL of the largest element,
      and every other tensor is BASE's
  python3 st.py add FILE NAME
      FILE (one safetensors file) with one more tensor NAME, F32 of shape (2, 2), rewritten
      in place: a tensor no mapping expects
"""
import json
import os
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items()}


def read_dir(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.startswith("model") and f.endswith(".safetensors"):
            out.update(read(os.path.join(d, f)))
    return out


def floats(dtype, data):
    code = {"F32": "f", "F64": "d"}[dtype]
    return struct.unpack("<%d%s" % (len(data) // struct.calcsize(code), code), data)


def logits(a, b, tol):
    (da, sa, xa), (db, sb, xb) = read(a)["logits"], read(b)["logits"]
    assert sa == sb, (sa, sb)
    x, y = floats(da, xa), floats(db, xb)
    scale = max(1.0, max(abs(v) for v in y))
    err = max(abs(u - v) for u, v in zip(x, y)) / scale
    print(f"logits {sa[0]} x {sa[1]}: max |loom - reference| / max(1, max |reference|) = {err:.2e}")
    if not err <= tol:
        sys.exit(f"logits differ by {err:.2e} > {tol}")


def same(a, b):
    ta, tb = read_dir(a), read_dir(b)
    n = 0
    for k, v in ta.items():
        if k.endswith(".attn.bias") or k.endswith(".attn.masked_bias"):
            continue
        w = tb.get(k) or tb.get("transformer." + k)
        if w is None:
            sys.exit(f"{k}: missing from {b}")
        if v != w:
            sys.exit(f"{k}: {v[0]} {v[1]} in {a} but {w[0]} {w[1]} in {b}, or other bytes")
        n += 1
    if n != len(tb):
        sys.exit(f"{b} has {len(tb)} tensors, {a} {n}")
    print(f"{n} tensors byte-identical in dtype, shape and data")


def peft(base_dir, merged_dir, peft_dir, tol):
    cfg = json.load(open(os.path.join(peft_dir, "adapter_config.json")))
    assert cfg["peft_type"] == "LORA" and cfg["task_type"] == "CAUSAL_LM", cfg
    scale = cfg["lora_alpha"] / cfg["r"]
    base, merged = read_dir(base_dir), read_dir(merged_dir)
    ad = read(os.path.join(peft_dir, "adapter_model.safetensors"))
    prefix, done, moved = "base_model.model.", set(), 0.0
    for k in sorted(ad):
        if not k.endswith(".lora_A.weight"):
            continue
        module = k[len(prefix):-len(".lora_A.weight")]
        assert any(module == t or module.endswith("." + t) for t in cfg["target_modules"]), \
            (module, cfg["target_modules"])
        (_, (r, n_in), a), (_, (n_out, r2), b) = ad[k], ad[prefix + module + ".lora_B.weight"]
        assert r == r2 == cfg["r"], (k, r, r2)
        A, B = floats("F32", a), floats("F32", b)
        name = module + ".weight"
        if name not in base:  # GPT2LMHeadModel's files may name it transformer.*
            name = name[len("transformer."):] if name.startswith("transformer.") else name
        (_, shape, w0), (_, shape1, w1) = base[name], merged.get(name) or merged["transformer." + name]
        assert shape == shape1, (name, shape, shape1)
        W0, W1 = floats("F32", w0), floats("F32", w1)
        t = cfg["fan_in_fan_out"]
        assert shape == ([n_in, n_out] if t else [n_out, n_in]), (name, shape, n_in, n_out)
        err, big = 0.0, max(abs(v) for v in W1)
        for o in range(n_out):
            for i in range(n_in):
                d = scale * sum(B[o * r + j] * A[j * n_in + i] for j in range(r))
                at = i * n_out + o if t else o * n_in + i
                err = max(err, abs(W0[at] + d - W1[at]))
                moved = max(moved, abs(d))
        if not err <= tol * big:
            sys.exit(f"{name}: merged differs from base + B A by {err:.2e} (max |w| {big:.2e})")
        done.add(name)
    for name, v in base.items():  # and PEFT would put no adapter on any other module
        module = name[:-len(".weight")]
        if name not in done and any(module == t or module.endswith("." + t)
                                    for t in cfg["target_modules"]):
            sys.exit(f"{name}: target_modules {cfg['target_modules']} name it, but it has no adapter")
        if name in done or name.endswith(".attn.bias") or name.endswith(".attn.masked_bias"):
            continue
        w = merged.get(name) or merged.get("transformer." + name)
        if w is None or v[1] != w[1] or floats("F32", v[2]) != floats("F32", w[2]):
            sys.exit(f"{name}: not adapted, yet not the base's in {merged_dir}")
    if not done or moved == 0.0:
        sys.exit("peft: the adapters change nothing (B A = 0): nothing was checked")
    print(f"peft: {len(done)} modules' adapters (r {cfg['r']}, alpha {cfg['lora_alpha']}) are "
          f"the merged weights' difference from the base (up to {moved:.2e}); the rest is the base's")


def add(path, name):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    end = max([v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"] + [0])
    header[name] = {"dtype": "F32", "shape": [2, 2], "data_offsets": [end, end + 16]}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + raw[8 + n:8 + n + end] + bytes(16))


def rename(path, old, new):
    """Each tensor name starting with `old` starts with `new` instead (the data unchanged)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header = {(new + k[len(old):] if k.startswith(old) else k): v for k, v in header.items()}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + raw[8 + n:])


if __name__ == "__main__":
    if sys.argv[1] == "logits":
        logits(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    elif sys.argv[1] == "peft":
        peft(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
    elif sys.argv[1] == "add":
        add(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "rename":
        rename(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        same(sys.argv[2], sys.argv[3])
