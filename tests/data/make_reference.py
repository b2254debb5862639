#!/usr/bin/python3
"""Reference values for tests/data, computed ONCE with numpy and stored under data/.

An independent re-implementation, in numpy, of Megatron-LM's GPT dataset index building
and blending as MEGATRON_FORMATS.md section 2 states them (split bounds, epochs, document /
sample / shuffle indices with np.random.RandomState(seed).shuffle, the separate last epoch,
blending), written from that page, not copied from Megatron-LM. The C++ tests compare
exactly.

Run from the repository root:  /usr/bin/python3 tests/data/make_reference.py
"""
import json
import math
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
HEADER = ("# Made by tests/data/make_reference.py with numpy %s (np.random.RandomState);\n"
          "# do not edit: re-run the script to regenerate.\n" % np.__version__)


def split_bounds(weights, n):
    w = [float(x) for x in weights.split(",")]
    w += [0.0] * (3 - len(w))
    total = sum(w)
    w = [x / total for x in w]
    bounds = [0]
    c = 0.0
    for k in range(3):
        c += w[k]
        bounds.append(n if k == 2 else min(n, round(c * n)))  # round half to even
    return bounds


def num_epochs(tokens, seq_len, samples):
    e = 1
    while (e * tokens - 1) // seq_len < samples:
        e += 1
    return e


def gpt_indices(sizes, begin, end, seq_len, seed, wanted):
    sizes = np.asarray(sizes, dtype=np.int64)
    documents = np.arange(begin, end, dtype=np.int32)
    tokens = int(sizes[begin:end].sum())
    epochs = num_epochs(tokens, seq_len, wanted)
    separate = False
    sans_last = ((epochs - 1) * tokens - 1) // seq_len
    if epochs > 1:
        from_last = wanted - sans_last
        per_epoch = (tokens - 1) // seq_len
        separate = from_last < int(0.80 * per_epoch)
    rng = np.random.RandomState(seed)

    def tiled(e):
        d = np.tile(documents, e)
        rng.shuffle(d)
        return d

    if separate:
        doc_idx = np.concatenate([tiled(epochs - 1), tiled(1)])
    else:
        doc_idx = tiled(epochs)

    # Walk the shuffled documents: each sample covers seq_len + 1 tokens; the last one is the
    # first of the next sample.
    num_samples = (epochs * tokens - 1) // seq_len
    sample_idx = np.zeros((num_samples + 1, 2), dtype=np.int64)
    flat = np.concatenate([[0], np.cumsum(sizes[doc_idx])])  # token start of each position
    for k in range(1, num_samples + 1):
        target = k * seq_len  # global token index where sample k starts
        pos = int(np.searchsorted(flat, target, side="right")) - 1
        while sizes[doc_idx[pos]] == 0 or target - flat[pos] >= sizes[doc_idx[pos]]:
            pos += 1
        sample_idx[k] = (pos, target - flat[pos])

    first = sans_last if separate else num_samples
    a = np.arange(first, dtype=np.int64)
    rng.shuffle(a)
    b = np.arange(first, num_samples, dtype=np.int64)
    rng.shuffle(b)
    shuffle_idx = np.concatenate([a, b])
    return epochs, separate, doc_idx, sample_idx, shuffle_idx


def blend(weights, size):
    w = np.array(weights, dtype=np.float64)
    w = w / w.sum()
    sizes = [int(math.ceil(math.ceil(size * x) * 1.005)) for x in w]
    counts = np.zeros(len(w), dtype=np.int64)
    ds, samples = [], []
    for s in range(size):
        err = w * max(s, 1.0) - counts
        k = int(np.argmax(err))  # first maximum: ties go to the lowest k
        ds.append(k)
        samples.append(int(counts[k]))
        counts[k] += 1
    return sizes, ds, samples


def line(name, values):
    return name + " " + " ".join(str(int(v)) for v in np.asarray(values).reshape(-1)) + "\n"


def write(name, text):
    with open(os.path.join(DATA, name), "w") as f:
        f.write(HEADER + text)


def main():
    os.makedirs(DATA, exist_ok=True)

    # numpy's legacy RandomState: seeds, doubles, permutations.
    text = ""
    for seed in (0, 1, 1234, 4294967295):
        r = np.random.RandomState(seed)
        text += line("u32 %d" % seed, r.randint(0, 2**32, size=6, dtype=np.uint64))
        r = np.random.RandomState(seed)
        text += "doubles %d %s\n" % (seed, " ".join(repr(x) for x in r.random_sample(5)))
        for n in (10, 1000):
            text += line("permutation %d %d" % (seed, n), np.random.RandomState(seed).permutation(n))
    write("mt19937.txt", text)

    # Split bounds, round half to even.
    text = ""
    for weights, n in [("969,30,1", 1000), ("969,30,1", 17), ("98,2,0", 100), ("1,1", 5),
                       ("1,1,2", 10), ("1,1,1", 10), ("2,1,1", 2), ("949,50,1", 123457),
                       ("1", 9), ("0,1,0", 4)]:
        text += "split %s %d %s\n" % (weights, n, " ".join(str(b) for b in split_bounds(weights, n)))
    write("splits.txt", text)

    # GPT indices over a small synthetic corpus (one zero-length document included).
    sizes = [5, 13, 1, 9, 0, 22, 7, 3, 16, 11, 2, 8, 30, 4, 6, 12, 10]
    cases = [
        # name, begin, end, seq_len, seed, wanted
        ("one_epoch", 0, 17, 8, 1234, 10),
        ("one_epoch_seed0", 0, 17, 8, 0, 20),
        ("separate_last", 0, 17, 8, 1234, 25),   # E = 2, few samples from the last epoch
        ("joint_last", 0, 17, 8, 7, 36),         # E = 2, the last epoch nearly full
        ("many_epochs", 2, 14, 8, 99, 60),       # a sub-range, E > 2, separate last epoch
        ("many_epochs_joint", 2, 14, 8, 5, 81),  # E > 2, joint: 11 from last == int(0.8 * 14)
        ("many_epochs_edge", 2, 14, 8, 5, 80),  # E > 2: 10 from last < 11: separate
    ]
    text = line("sizes", sizes)
    for name, begin, end, seq_len, seed, wanted in cases:
        e, sep, d, s, sh = gpt_indices(sizes, begin, end, seq_len, seed, wanted)
        text += "case %s %d %d %d %d %d %d %d\n" % (name, begin, end, seq_len, seed, wanted, e,
                                                    int(sep))
        text += line("doc_idx", d) + line("sample_idx", s) + line("shuffle_idx", sh)
    write("gpt_indices.txt", text)

    # Blending.
    text = ""
    for weights, size in [([0.3, 0.7], 100), ([1, 2, 3], 200), ([0.5, 0.25, 0.25], 64),
                          ([0.1, 0.1, 0.8], 1000)]:
        sizes_, ds, smp = blend(weights, size)
        text += "blend %d %s\n" % (size, " ".join(repr(float(w)) for w in weights))
        text += line("sizes", sizes_) + line("dataset", ds) + line("sample", smp)
    write("blend.txt", text)

    # End to end: `loom data samples` on tiny.jsonl / tiny2.jsonl with the byte tokenizer (ids
    # are UTF-8 bytes, EOD 256 appended to each non-empty document).
    def corpus(path):
        docs = []
        with open(os.path.join(DATA, path), encoding="utf-8") as f:
            for l in f:
                if l.strip():
                    t = json.loads(l)["text"].encode("utf-8")
                    docs.append(list(t) + [256] if t else [])
        return docs

    def tokens(docs, e, sep, d, s, sh, i, seq_len):
        j = sh[i]
        (p0, o0), (p1, o1) = s[j], s[j + 1]
        out = []
        for p in range(p0, p1 + 1):
            doc = docs[d[p]]
            out += doc[(o0 if p == p0 else 0):(o1 + 1 if p == p1 else len(doc))]
        assert len(out) == seq_len + 1
        return out[:8]

    # recipe: seq_len 16, seed 5, iters 20, gbs 4 -> train wants 80; eval_interval 10,
    # eval_iters 2 -> valid wants (20 // 10 + 1) * 2 * 4 = 24; split "90,10,0".
    seq_len, seed = 16, 5
    text = ""
    a = corpus("tiny.jsonl")
    b = corpus("tiny2.jsonl")
    for split, k, wanted in (("train", 0, 80), ("valid", 1, 24)):
        bnd = split_bounds("90,10,0", len(a))
        idx = gpt_indices([len(x) for x in a], bnd[k], bnd[k + 1], seq_len, seed, wanted)
        for i in range(12):
            text += line("single %s %d 0 %d" % (split, i, i), tokens(a, *idx, i, seq_len))
    # blend "0.3 tiny.jsonl 0.7 tiny2.jsonl", train split
    ws = [0.3, 0.7]
    sizes_, ds, smp = blend(ws, 80)
    idx = []
    for c, n in zip((a, b), sizes_):
        bnd = split_bounds("90,10,0", len(c))
        idx.append(gpt_indices([len(x) for x in c], bnd[0], bnd[1], seq_len, seed, n))
    for i in range(12):
        c = (a, b)[ds[i]]
        text += line("blend train %d %d %d" % (i, ds[i], smp[i]),
                     tokens(c, *idx[ds[i]], smp[i], seq_len))
    write("samples.txt", text)


if __name__ == "__main__":
    main()
