#!/usr/bin/python3
"""Writes wordpiece-vocab.txt and wordpiece-ref.json for test_tokenizer_wordpiece.

Run once from this folder with Debian's python3 (no third-party modules):
    /usr/bin/python3 make_wordpiece_data.py /work/shared/data/tinyshakespeare/input.txt

The reference ids come from the small BERT basic-tokenizer + WordPiece re-implementation
below (written for Loom from the algorithm's description, on Python's own str.lower,
str.split and unicodedata), which is independent of the plugin's utf8proc code. The
vocabulary: the special tokens, the 400 most frequent lower-cased words of Tiny
Shakespeare, a few suffixes, and every character of the test sentences (bare and "##"),
both lower-cased and as written, so both lower_case settings have something to match,
plus every character of the conformance suite's samples.
[BOS] and [EOS] are left out on purpose: the tokenizer must append them.
"""
import collections
import json
import sys
import unicodedata

SENTENCES = [
    "Hello, World! How are you?",
    "First Citizen:\nBefore we proceed any further, hear me speak.",
    "H\u00e9llo na\u00efve caf\u00e9 r\u00e9sum\u00e9",
    "\u039f\u0394\u039f\u03a3 \u03a3\u03af\u03c3\u03c5\u03c6\u03bf\u03c2 \u039f\u0394\u039f\u03a3.",
    "\u0130stanbul",
    "\u4e2d\u6587\u5b57\u7b26 mixed with English",
    "tab\tand\u00a0nbsp\u3000ideographic space",
    "control\x00chars\x07here\ufffd and\u200bzero width",
    "a" * 201 + " short",
    "unbelievable kingly lovingly",
    "line\u2028sep and\u0085nel",
    "don't stop-believing... (really)",
    "\u201cquoted\u201d \u2014 dashes\u2026 \u00bfqu\u00e9?",
    "",
    "   ",
    "\uff26\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48 \ufb01ne",
    "\ud55c\uad6d\uc5b4 text",
    "\U0001f642 ok",
    "Z\u00fcrich \u00c5NGSTR\u00d6M",
    "[CLS] is not special in text [SEP]",
    "xyzzy \u0416\u0436\u0436",
]

# Characters of tests/tokenizer/conformance.cpp's text samples, so that its round-trip
# checks meet no [UNK] (which would decode to the text "[UNK]").
CONFORMANCE_CHARS = ("Hello, world! The quick brown fox jumps over the lazy dog. "
                     "h\u00e9llo w\u00f6rld na\u00efve caf\u00e9 \u00df\u00f8 "
                     "\u65e5\u672c\u8a9e \u2713 \u20ac5 \U0001f600\U0001f44d\U0001f3fd "
                     "0123456789 !@#$%^&*()_+-=[]{}|;':\",./<>?`~ DON'T x86_64")

SUFFIXES = ["##s", "##ing", "##ed", "##er", "##ly", "##ness", "##able", "##ie", "##ve"]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def is_ws(c):
    return c in " \t\n\r" or unicodedata.category(c) == "Zs"


def is_ctrl(c):
    if c in "\t\n\r":
        return False
    return unicodedata.category(c).startswith("C")


def is_punc(c):
    o = ord(c)
    if 33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126:
        return True
    return unicodedata.category(c).startswith("P")


CJK = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
       (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]


def basic_words(text, lower):
    out = []
    for c in text:
        if ord(c) == 0 or ord(c) == 0xFFFD or is_ctrl(c):
            continue
        if is_ws(c):
            out.append(" ")
        elif any(a <= ord(c) <= b for a, b in CJK):
            out.append(" " + c + " ")
        else:
            out.append(c)
    words = []
    for w in "".join(out).split():
        if lower:
            w = "".join(c for c in unicodedata.normalize("NFD", w.lower())
                        if unicodedata.category(c) != "Mn")
        cur = ""
        for c in w:
            if is_punc(c):
                if cur:
                    words.append(cur)
                cur = ""
                words.append(c)
            else:
                cur += c
        if cur:
            words.append(cur)
    return " ".join(words).split()


def wordpiece(words, vocab):
    ids = []
    for w in words:
        if len(w) > 200:
            ids.append(vocab["[UNK]"])
            continue
        pieces, start, ok = [], 0, True
        while start < len(w):
            end, hit = len(w), None
            while end > start:
                p = ("##" if start > 0 else "") + w[start:end]
                if p in vocab:
                    hit = vocab[p]
                    break
                end -= 1
            if hit is None:
                ok = False
                break
            pieces.append(hit)
            start = end
        ids.extend(pieces if ok else [vocab["[UNK]"]])
    return ids


def main():
    text = open(sys.argv[1], encoding="utf-8").read()
    counts = collections.Counter(basic_words(text, True))
    tokens = list(SPECIALS)
    seen = set(tokens)

    def add(t):
        if t not in seen:
            seen.add(t)
            tokens.append(t)

    for w, _ in counts.most_common(400):
        add(w)
    for s in SUFFIXES:
        add(s)
    chars = set()
    for s in SENTENCES + [text[:2000], CONFORMANCE_CHARS]:
        for lower in (True, False):
            for w in basic_words(s, lower):
                chars.update(w)
    for c in sorted(chars):
        add(c)
        add("##" + c)
    for w in ["hello", "world", "Hello", "World", "First", "Citizen", "cafe", "naive",
              "resume", "##lie", "un", "##bel", "##iev", "king", "istanbul", "fine"]:
        add(w)
    # The Cyrillic zhe pieces are removed so "Жжж" has no WordPiece split: [UNK].
    tokens = [t for t in tokens if t.lstrip("#") not in ("\u0416", "\u0436")]
    with open("wordpiece-vocab.txt", "w", encoding="utf-8", newline="\n") as f:
        for t in tokens:
            f.write(t + "\n")
    vocab = {t: i for i, t in enumerate(tokens)}
    ref = {"vocab_size_in_file": len(tokens), "cases": []}
    for s in SENTENCES:
        ref["cases"].append({
            "text": s,
            "lower": wordpiece(basic_words(s, True), vocab),
            "cased": wordpiece(basic_words(s, False), vocab),
        })
    with open("wordpiece-ref.json", "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print(len(tokens), "tokens")


if __name__ == "__main__":
    main()
