#!/usr/bin/python3
"""Reference ids for tokenizer/gpt2-bpe, from an implementation that shares no code with it.

Writes, under tests/tokenizer/data/ (checked in; the tests only read them):
  tinyshakespeare_10000.gpt2.ids  the GPT-2 BPE ids of the first 10,000 bytes of Tiny
                                  Shakespeare;
  gpt2_cases.json                 ids of short texts that probe the pre-tokenising regex
                                  (scripts, marks, digits, every kind of whitespace,
                                  contractions) and of long single chunks.
Run once:

    /usr/bin/python3 tests/tokenizer/make_gpt2_reference.py [--shared ../shared/data]

It needs the `regex` module (Debian: python3-regex), the one GPT-2 and Megatron-LM use for
the pre-tokenising pattern. The BPE here is the textbook loop on GPT-2's character
spelling of bytes (find the lowest-ranked adjacent pair, merge all its occurrences left to
right, repeat), deliberately unlike the plugin's byte/id heap, so the two check each other.
"""
import argparse
import hashlib
import json
import os
import platform
import random
import sys

import regex

PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
NUM_BYTES = 10000
HERE = os.path.dirname(os.path.abspath(__file__))


def byte_to_char():
    """GPT-2's files write byte b as chr(b) for printable Latin-1 bytes, and the other 68
    bytes as chr(256), chr(257), ... in ascending order."""
    printable = set(range(33, 127)) | set(range(161, 173)) | set(range(174, 256))
    table, spare = [], 256
    for b in range(256):
        if b in printable:
            table.append(chr(b))
        else:
            table.append(chr(spare))
            spare += 1
    return table


class Gpt2Bpe:
    def __init__(self, vocab_path, merges_path):
        with open(vocab_path, encoding="utf-8") as f:
            self.vocab = json.load(f)
        with open(merges_path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        if lines and lines[0].startswith("#version"):
            lines = lines[1:]
        pairs = [tuple(line.split()) for line in lines if line.strip()]
        self.rank = {pair: i for i, pair in enumerate(pairs)}
        self.chars = byte_to_char()
        self.pattern = regex.compile(PATTERN)

    def merge(self, word):
        """word: list of symbols (strings) -> list of symbols after every applicable merge."""
        never = len(self.rank)
        while len(word) > 1:
            best, best_rank = None, never
            for pair in zip(word, word[1:]):
                r = self.rank.get(pair, never)
                if r < best_rank:
                    best, best_rank = pair, r
            if best is None:
                break
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == best[0] and word[i + 1] == best[1]:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            word = out
        return word

    def encode(self, text):
        ids, memo = [], {}
        for piece in self.pattern.findall(text):
            if piece not in memo:
                spelt = [self.chars[b] for b in piece.encode("utf-8")]
                memo[piece] = [self.vocab[symbol] for symbol in self.merge(spelt)]
            ids.extend(memo[piece])
        return ids


def probe_texts():
    """(name, text) pairs whose splitting or merging is easy to get wrong."""
    rng = random.Random(1234)
    letters = "etaoinshrdlu"
    random_words = "".join(rng.choice(letters + " ") for _ in range(3000))
    return [
        ("contractions", "I'm it's we've they're you'll he'd she's can't"),
        ("upper-case contractions are not special", "I'M IT'S 'S 'T 'LL"),
        ("apostrophe runs", "''s '''t rock'n'roll 'tis"),
        ("latin accents", "Voil\u00e0, l'\u00e9t\u00e9 o\u00f9 \u00e7a s'arr\u00eate. Stra\u00dfe"),
        ("greek and cyrillic", "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1. "
         "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!"),
        ("cjk and hangul", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002"
         "\ud55c\uad6d\uc5b4"),
        ("combining marks", "e\u0301 a\u0308 n\u0303o\u0300"),
        ("emoji", "\U0001f44d\U0001f3fd family \U0001f468\u200d\U0001f469\u200d\U0001f467 "
         "\U0001f1eb\U0001f1f7"),
        ("digits of other scripts", "\u0661\u0662\u0663 \u096a\u096b \u216b\u2163 \u00bd \u00b2"),
        ("unicode whitespace", "a\u00a0b\u3000c\u2028d\u0085e\u2009f\u202fg \u00a0 h"),
        ("U+180E is not whitespace", "a\u180eb \u180e c"),
        ("zero-width and format chars", "a\u200bb\u200cc\ufeffd"),
        ("separators 0x1c-0x1f are not whitespace", "a\x1cb\x1dc\x1ed\x1fe \x1c"),
        ("controls", "\x00\x01\x07\x7f x\x00"),
        ("space runs", "a  b   c\n\n\nd \n e\t \tf   "),
        ("leading spaces", "   lead"),
        ("trailing spaces", "trail   "),
        ("blank lines with spaces", "x\n  \n  y\r\n\r\nz"),
        ("numbers", "3.14159 1,000,000 2024-01-31 0x1F 1e-9 99999999999 007"),
        ("punctuation runs", "!!!??? ... --- ;;;::: (([[{{}}]]))"),
        ("code", "def f(x):\n    return x**2  # square\n\tpass\n"),
        ("endoftext written out", "<|endoftext|> a<|endoftext|>b"),
        ("a long letter run", "a" * 1500),
        ("a long digit run", "7" * 1500),
        ("a long space run", " " * 1500 + "x" + " " * 20),
        ("a long punctuation run", "-=" * 700),
        ("random words", random_words),
    ]


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", default=os.path.join(HERE, "..", "..", "..", "shared", "data"))
    ap.add_argument("--out", default=os.path.join(HERE, "data"))
    args = ap.parse_args()

    vocab = os.path.join(args.shared, "gpt2", "gpt2-vocab.json")
    merges = os.path.join(args.shared, "gpt2", "gpt2-merges.txt")
    source = os.path.join(args.shared, "tinyshakespeare", "input.txt")
    bpe = Gpt2Bpe(vocab, merges)

    # The checks MEGATRON_FORMATS.md lists for the shared vocabulary.
    assert bpe.encode("Hello world") == [15496, 995]
    assert bpe.encode("First Citizen:\nBefore we proceed") == [5962, 22307, 25, 198, 8421, 356,
                                                                5120]

    with open(source, "rb") as f:
        whole = f.read()
    part = whole[:NUM_BYTES]
    ids = bpe.encode(part.decode("utf-8"))  # strict: the slice must be valid UTF-8
    # The whole file, kept as a count and a digest (the ids themselves would be 1.7 MB).
    all_ids = bpe.encode(whole.decode("utf-8"))
    all_digest = sha256(" ".join(str(x) for x in all_ids).encode("ascii"))

    with open(vocab, "rb") as f:
        vocab_sha = sha256(f.read())
    with open(merges, "rb") as f:
        merges_sha = sha256(f.read())
    made_by = (f"Python {platform.python_version()}, regex {regex.__version__} from Debian's "
               "python3-regex")
    header = [
        f"GPT-2 BPE ids of bytes [0, {NUM_BYTES}) of tinyshakespeare/input.txt",
        f"input.txt: {len(whole)} bytes, sha256 {sha256(whole)}",
        f"bytes [0, {NUM_BYTES}): sha256 {sha256(part)}",
        f"whole input.txt: {len(all_ids)} ids, whose decimal text joined by single spaces has "
        f"sha256 {all_digest}",
        f"gpt2/gpt2-vocab.json sha256 {vocab_sha}",
        f"gpt2/gpt2-merges.txt sha256 {merges_sha}",
        "made by tests/tokenizer/make_gpt2_reference.py, an independent Python implementation",
        f"of GPT-2 BPE ({made_by}), run as",
        "  /usr/bin/python3 tests/tokenizer/make_gpt2_reference.py",
        f"{len(ids)} ids follow, separated by whitespace; lines starting with # are comments",
    ]
    out = os.path.join(args.out, "tinyshakespeare_10000.gpt2.ids")
    with open(out, "w", encoding="ascii") as f:
        for line in header:
            f.write(f"# {line}\n")
        for i in range(0, len(ids), 16):
            f.write(" ".join(str(x) for x in ids[i:i + 16]) + "\n")
    print(f"wrote {out}: {len(ids)} ids", file=sys.stderr)

    cases = [{"name": name, "text": text, "ids": bpe.encode(text)} for name, text in probe_texts()]
    doc = {
        "about": [
            "GPT-2 BPE ids of probe texts (each text is a JSON string: its UTF-8 is the input)",
            f"gpt2/gpt2-vocab.json sha256 {vocab_sha}",
            f"gpt2/gpt2-merges.txt sha256 {merges_sha}",
            f"made by tests/tokenizer/make_gpt2_reference.py ({made_by})",
        ],
        "cases": cases,
    }
    out = os.path.join(args.out, "gpt2_cases.json")
    with open(out, "w", encoding="ascii") as f:  # one case per line
        f.write('{"about": ' + json.dumps(doc["about"], indent=1) + ',\n"cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=True) for c in cases))
        f.write("\n]}\n")
    print(f"wrote {out}: {len(cases)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
