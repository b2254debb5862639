#!/usr/bin/python3
"""Reference samples for dataset/bert: writes tests/data/data/bert_masking/.

An independent Python transcription of Megatron-LM's BERT sample rules (build_mapping,
BERTMaskedWordPieceDataset.__getitem__, the masked-LM predictions), drawing from numpy's own
legacy RandomState, so the test checks Loom's C++ emulation of numpy's draws (randint,
random, shuffle, choice with p) as well as the rules. The C++ mt19937 that Megatron's
build_mapping uses is numpy's MT19937 seeded the same way (init_genrand), read as raw 32-bit
words; its mt19937_64 is written out below from the published algorithm.

The data: a WordPiece vocabulary of 5 specials and 95 pieces (every third a "##"
continuation), and 40 documents of 1 to 6 sentences (one document with a 600-token
sentence, which build_mapping skips), written as a Megatron indexed dataset (int32 tokens).

Run once (Debian's python3-numpy):  /usr/bin/python3 tests/data/make_bert_reference.py
"""
import os
import struct

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "bert_masking")
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PAD, UNK, CLS, SEP, MASK = range(5)
V = 100
# Megatron's BERT tokenizer appends [BOS] and [EOS] to a vocabulary without them (ids 100 and
# 101 here); the random replacement draws from every id of the tokenizer, those included.
SEQ_LEN = 48
SEED = 1234
SHORT_SEQ_PROB = 0.1
MASK_PROB = 0.15
MAX_NGRAM = 3


def vocab():
    return SPECIALS + [("##p%d" if i % 3 == 0 else "w%d") % i for i in range(5, V)]


def corpus():
    rs = np.random.RandomState(99)
    docs = []
    for d in range(40):
        n = int(rs.randint(1, 7))
        sents = []
        for _ in range(n):
            length = 600 if (d == 7 and not sents) else int(rs.randint(3, 40))
            sents.append([int(t) for t in rs.randint(5, V, size=length)])
        docs.append(sents)
    return docs


def write_indexed(prefix, docs):
    sizes = [len(s) for d in docs for s in d]
    with open(prefix + ".bin", "wb") as f:
        for d in docs:
            for s in d:
                f.write(struct.pack("<%di" % len(s), *s))
    pointers, p = [], 0
    for n in sizes:
        pointers.append(p)
        p += 4 * n
    doc_idx = [0]
    for d in docs:
        doc_idx.append(doc_idx[-1] + len(d))
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", 4))  # int32
        f.write(struct.pack("<Q", len(sizes)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(struct.pack("<%di" % len(sizes), *sizes))
        f.write(struct.pack("<%dq" % len(pointers), *pointers))
        f.write(struct.pack("<%dq" % len(doc_idx), *doc_idx))
    return sizes, doc_idx


class MT64:
    """MT19937-64 (Nishimura 2000), as std::mt19937_64."""

    def __init__(self, seed):
        self.mt = [0] * 312
        self.mt[0] = seed & 0xFFFFFFFFFFFFFFFF
        for i in range(1, 312):
            prev = self.mt[i - 1]
            self.mt[i] = (6364136223846793005 * (prev ^ (prev >> 62)) + i) & 0xFFFFFFFFFFFFFFFF
        self.i = 312

    def __call__(self):
        if self.i >= 312:
            for k in range(312):
                x = (self.mt[k] & 0xFFFFFFFF80000000) | (self.mt[(k + 1) % 312] & 0x7FFFFFFF)
                xa = x >> 1
                if x & 1:
                    xa ^= 0xB5026F5AA96619E9
                self.mt[k] = self.mt[(k + 156) % 312] ^ xa
            self.i = 0
        x = self.mt[self.i]
        self.i += 1
        x ^= (x >> 29) & 0x5555555555555555
        x ^= (x << 17) & 0x71D67FFFEDA60000
        x ^= (x << 37) & 0xFFF7EEE000000000
        x ^= x >> 43
        return x & 0xFFFFFFFFFFFFFFFF


def sample_index(sizes, doc_starts, num_samples, max_len, short_prob, seed, min_sent):
    words = np.random.RandomState(seed)  # std::mt19937(seed): the same words

    def word():
        return int(words.randint(0, 2**32, dtype=np.uint32))

    ratio = int(round(1.0 / short_prob)) if short_prob > 0 else 0

    def target():
        if ratio == 0:
            return max_len
        r = word()
        return 2 + r % (max_len - 1) if r % ratio == 0 else max_len

    out = []
    while len(out) < num_samples:
        for d in range(len(doc_starts) - 1):
            first, last = doc_starts[d], doc_starts[d + 1]
            remain = last - first
            if remain > 1 and any(sizes[i] > 512 for i in range(first, last)):
                continue
            if remain < min_sent:
                continue
            length, count, start, want = 0, 0, first, target()
            for i in range(first, last):
                length += sizes[i]
                count += 1
                remain -= 1
                if (length >= want and remain > 1 and count >= min_sent) or remain == 0:
                    out.append((start, i + 1, want))
                    start, want, length, count = i + 1, target(), 0, 0
    g = MT64(seed + 1)
    for i in range(len(out) - 1, 0, -1):
        j = g() % (i + 1)
        out[i], out[j] = out[j], out[i]
    return out


def masked_lm(ids, target_len, continues, rs, max_ngram=MAX_NGRAM, geometric=False,
              mask_always=False):
    cands = []
    for i, t in enumerate(ids):
        if t in (CLS, SEP):
            continue
        if continues[t] and cands:
            cands[-1].append(i)
        else:
            cands.append([i])
    budget = min(MASK_PROB * target_len, max(1, int(round(len(ids) * MASK_PROB))))
    nvals = np.arange(max_ngram, dtype=np.int64) + 1
    probs = 1.0 / nvals
    probs = probs / probs.sum(keepdims=True)
    grams = [[cands[k:k + n] for n in nvals] for k in range(len(cands))]
    rs.shuffle(grams)
    out = list(ids)
    done, taken, spans = [], set(), []
    for g in grams:
        if len(done) >= budget:
            break
        if geometric:  # SpanBERT's, Megatron's T5
            n = min(rs.geometric(0.2), max_ngram)
        else:
            p = probs[:len(g)] / probs[:len(g)].sum(keepdims=True)
            n = rs.choice(nvals[:len(g)], p=p)
        while True:
            flat = [i for c in g[n - 1] for i in c]
            n -= 1
            if budget >= len(done) + len(flat):
                break
            if n == 0:
                flat = None
                break
        if flat is None or any(i in taken for i in flat):
            continue
        spans.append(flat)
        for i in flat:
            taken.add(i)
            if mask_always:
                out[i] = MASK
            elif rs.random() < 0.8:
                out[i] = MASK
            elif rs.random() >= 0.5:
                out[i] = int(rs.randint(0, V + 2))
            done.append((i, ids[i]))
    rs.shuffle(grams)
    done.sort()
    spans.sort(key=lambda sp: sp[0])
    return out, done, spans


def sample(i, index, sentences, continues):
    beg, end, target = index[i]
    sents = [list(sentences[k]) for k in range(beg, end)]
    rs = np.random.RandomState((SEED + i) % 2**32)
    pivot = 1
    if len(sents) >= 3:
        pivot = int(rs.randint(low=1, high=len(sents)))
    swapped = rs.random() < 0.5
    a = [t for s in sents[:pivot] for t in s]
    b = [t for s in sents[pivot:] for t in s]
    if swapped:
        a, b = b, a
    while len(a) + len(b) > target:
        seg = a if len(a) > len(b) else b
        if rs.random() < 0.5:
            del seg[0]
        else:
            del seg[-1]
    ids = [CLS] + a + [SEP] + ([*b, SEP] if b else [])
    types = [0] * (len(a) + 2) + ([1] * (len(b) + 1) if b else [])
    masked, done, _ = masked_lm(ids, target, continues, rs)
    pad = SEQ_LEN - len(ids)
    targets = [-1] * SEQ_LEN
    for pos, label in done:
        targets[pos] = label
    return (masked + [PAD] * pad, targets, [1] * len(ids) + [0] * pad, types + [0] * pad,
            int(swapped))


T5_SEQ, T5_DEC, T5_EXTRA = 40, 24, 10  # encoder and decoder lengths, sentinels
BOS, EOS = V, V + 1  # Megatron's tokenizer appends [BOS], [EOS], then <extra_id_k>
SENTINELS = [V + 2 + k for k in range(T5_EXTRA)]


def t5_sample(i, index, sentences, continues):
    """Megatron's T5MaskedWordPieceDataset.__getitem__: span corruption with sentinels."""
    beg, end, target = index[i]
    tokens = [t for k in range(beg, end) for t in sentences[k]][:target]
    rs = np.random.RandomState((SEED + i) % 2**32)
    masked, _, spans = masked_lm(tokens, target, continues, rs, max_ngram=10, geometric=True,
                                 mask_always=True)
    enc, dec_in, dec_out, at = [], [BOS], [], 0
    for k, span in enumerate(spans):
        enc += masked[at:span[0]] + [SENTINELS[k]]
        labels = [tokens[p] for p in span]
        dec_in += [SENTINELS[k]] + labels
        dec_out += [SENTINELS[k]] + labels
        at = span[-1] + 1
    enc += masked[at:]
    dec_out.append(EOS)
    assert len(enc) <= T5_SEQ and len(dec_in) <= T5_DEC
    pad = lambda v, n, x: v + [x] * (n - len(v))
    return (pad(enc, T5_SEQ, PAD), pad([1] * len(enc), T5_SEQ, 0), pad(dec_in, T5_DEC, PAD),
            pad([1] * len(dec_in), T5_DEC, 0), pad(dec_out, T5_DEC, -1))


def main():
    os.makedirs(OUT, exist_ok=True)
    voc = vocab()
    with open(os.path.join(OUT, "vocab.txt"), "w") as f:
        f.write("\n".join(voc) + "\n")
    continues = [v.startswith("##") for v in voc]
    docs = corpus()
    sizes, doc_idx = write_indexed(os.path.join(OUT, "sentences"), docs)
    sentences = [s for d in docs for s in d]
    # the whole dataset as one split; 100 samples wanted (whole epochs are built)
    index = sample_index(sizes, doc_idx, 100, SEQ_LEN - 3, SHORT_SEQ_PROB, SEED, 2)
    with open(os.path.join(OUT, "expected.txt"), "w") as f:
        f.write("# dataset/bert reference, written by tests/data/make_bert_reference.py "
                f"(numpy {np.__version__}); seq_len {SEQ_LEN}, seed {SEED}, 100 samples wanted\n")
        f.write("# index <n> then <begin> <end> <target> per sample; sample <i> then its arrays\n")
        f.write(f"index {len(index)}\n")
        for beg, end, target in index:
            f.write(f"{beg} {end} {target}\n")
        for i in list(range(12)) + [len(index) - 1]:
            toks, tgts, padm, types, sop = sample(i, index, sentences, continues)
            f.write(f"sample {i}\n")
            for name, arr in (("tokens", toks), ("targets", tgts), ("padding_mask", padm),
                              ("token_types", types)):
                f.write(name + " " + " ".join(map(str, arr)) + "\n")
            f.write(f"sop_labels {sop}\n")
    # T5's samples: the index (seq_len - 2, one sentence at least), then whole samples
    t5_index = sample_index(sizes, doc_idx, 100, T5_SEQ - 2, SHORT_SEQ_PROB, SEED, 1)
    with open(os.path.join(OUT, "t5_samples.txt"), "w") as f:
        f.write(f"# dataset/t5 reference, written by tests/data/make_bert_reference.py; seq_len "
                f"{T5_SEQ}, decoder_seq_len {T5_DEC}, vocab_extra_ids {T5_EXTRA}, seed {SEED}, "
                "100 samples wanted\n")
        f.write(f"index {len(t5_index)}\n")
        for beg, end, target in t5_index:
            f.write(f"{beg} {end} {target}\n")
        for i in list(range(12)) + [len(t5_index) - 1]:
            arrays = t5_sample(i, t5_index, sentences, continues)
            f.write(f"sample {i}\n")
            for name, arr in zip(("tokens", "padding_mask", "dec_tokens", "dec_padding_mask",
                                  "dec_targets"), arrays):
                f.write(name + " " + " ".join(map(str, arr)) + "\n")
    # T5's masking (Megatron's T5 dataset): n-grams up to 10 of Geometric(0.2) length, every
    # prediction [MASK]; over whole sentences of the corpus with RandomState(7 + k)
    with open(os.path.join(OUT, "t5_masking.txt"), "w") as f:
        f.write("# make_bert_reference.py: mask_tokens with geometric n-grams (max 10) and "
                "mask_always, per case: ids, then tokens, positions, labels, spans\n")
        for k, sent in enumerate(sentences[:24]):
            if len(sent) > 512:
                continue
            ids = [CLS] + sent + [SEP]
            out, done, spans = masked_lm(ids, len(ids), continues, np.random.RandomState(7 + k),
                                         max_ngram=10, geometric=True, mask_always=True)
            f.write(f"case {k}\n")
            f.write("ids " + " ".join(map(str, ids)) + "\n")
            f.write("tokens " + " ".join(map(str, out)) + "\n")
            f.write("positions " + " ".join(str(p) for p, _ in done) + "\n")
            f.write("labels " + " ".join(str(l) for _, l in done) + "\n")
            f.write("spans " + " | ".join(" ".join(map(str, sp)) for sp in spans) + "\n")


if __name__ == "__main__":
    main()
