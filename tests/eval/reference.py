"""Megatron's zero-shot evaluation recomputed in float64 for tests/eval/eval.sh, written
anew from Megatron's definitions (tasks/zeroshot_gpt): the WikiText detokenizer, the
overlapping windows, loss / perplexity / adjusted perplexity / token ratio, and LAMBADA's
cloze accuracy (strict: the whole last word). The model's logits for each window come from
`loom generate --logits-out` (byte tokenizer: a token is a byte, 256 the end of document).

  reference.py make-data            training text, wiki.tokens and lambada.jsonl
  reference.py check LOOM CKPT      compare wikitext*.json and lambada*.json with the reference
"""
import json
import math
import os
import random
import re
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model", "hf"))
import st  # noqa: E402  (the standard-library safetensors reader of the HF tests)

SEQ = 32


def make_data():
    rng = random.Random(3)
    words = "the king and queen said that a man of old came to the land by the sea".split()
    with open("train.jsonl", "w") as f:
        for _ in range(300):
            f.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(10)) + " ."}) + "\n")
    # WikiText's raw shape: " = Heading = \n", space-separated tokens, @-@ and friends
    parts = [" = The king = \n", " \n"]
    pieces = words + ["@-@", "@,@", "@.@", ",", ".", "(", ")", "'s", "N", "\"", ";"]
    for _ in range(6):
        parts.append(" " + " ".join(rng.choice(pieces) for _ in range(rng.randint(8, 20))) + " \n")
    open("wiki.tokens", "w").write("".join(parts))
    with open("lambada.jsonl", "w") as f:
        for _ in range(9):
            f.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(rng.randint(4, 9)))}) + "\n")


def detokenize(s):
    s = s.replace("s '", "s'")
    s = re.sub(r"/' [0-9]/", r"/'[0-9]/", s)
    s = s.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
    for p in [":", ";", ".", "!", "?", ","]:
        s = s.replace(" " + p + " ", p + " ")
    s = re.sub(r"\(\s*([^\)]*?)\s*\)", r"(\1)", s)
    s = re.sub(r"\[\s*([^\]]*?)\s*\]", r"[\1]", s)
    s = re.sub(r"{\s*([^}]*?)\s*}", r"{\1}", s)
    s = re.sub(r"\"\s*([^\"]*?)\s*\"", r'"\1"', s)
    s = re.sub(r"'\s*([^']*?)\s*'", r"'\1'", s)
    s = s.replace("= = = =", "====").replace("= = =", "===").replace("= =", "==")
    s = s.replace(" " + chr(176) + " ", chr(176))
    s = s.replace(" \n", "\n").replace("\n ", "\n").replace(" N ", " 1 ").replace(" 's", "'s")
    return s


def logits(loom, ck, ids):
    """Per-position logits (list of rows) of the byte string `ids` from one rank's decode."""
    text = bytes(ids).decode("ascii")
    subprocess.run([loom, "generate", "--checkpoint", ck, "--prompt", text, "--max-new-tokens", "0",
                    "--logits-out", "l.safetensors", "--overwrite"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    dtype, shape, raw = st.read("l.safetensors")["logits"]
    vals = struct.unpack("<%df" % (shape[0] * shape[1]), raw)
    return [vals[i * shape[1]:(i + 1) * shape[1]] for i in range(shape[0])]


def nll(row, target):
    mx = max(row)
    return mx + math.log(sum(math.exp(v - mx) for v in row)) - row[target]


def wikitext(loom, ck, ov):
    raw = open("wiki.tokens", encoding="utf-8").read()
    words = len(raw.strip().split(" "))
    ids = list(detokenize(raw).encode("utf-8"))
    total, windows, scored = 0.0, 0, 0
    n = max(math.ceil(max(len(ids) - 1 - ov, 0) / ov) + 1, 1)
    for w in range(n):
        seg = ids[w * ov:w * ov + SEQ + 1]
        rows = logits(loom, ck, seg[:SEQ])
        for t in range(len(seg) - 1):
            if w > 0 and t < SEQ - ov:
                continue  # an overlapped window scores only its last `ov` targets
            total += nll(rows[t], seg[t + 1])
            scored += 1
        windows += 1
    loss = total / (len(ids) - 1)
    ratio = (len(ids) - 1) / (words - 1)
    return {"avg_loss": loss, "ppl": math.exp(min(20, loss)),
            "adjusted_ppl": math.exp(min(20, loss * ratio)), "token_ratio": ratio,
            "windows": windows, "scored_tokens": scored, "tokens": len(ids), "words": words}


def lambada(loom, ck, strict):
    correct = total = 0
    for line in open("lambada.jsonl"):
        text = json.loads(line)["text"]
        if strict:
            last = text.split()[-1]
            context = list(text[:text.rfind(last)].strip().encode())
            answer = list((" " + last).encode())
        else:
            b = list(text.encode())
            context, answer = b[:-1], b[-1:]
        keep = SEQ + 1 - len(answer)  # a longer passage keeps its last SEQ + 1 tokens
        context = context[-keep:]
        rows = logits(loom, ck, context + answer[:-1])
        ok = all(max(range(len(rows[p])), key=lambda v: rows[p][v]) == answer[i]
                 for i, p in enumerate(range(len(context) - 1, len(context) - 1 + len(answer))))
        correct += ok
        total += 1
    return {"correct": correct, "total": total, "accuracy": correct / total}


def check(loom, ck):
    for name, ov in (("wikitext.json", 8), ("wikitext32.json", 32)):
        got, want = json.load(open(name)), wikitext(loom, ck, ov)
        for k in ("windows", "scored_tokens", "tokens", "words"):
            assert got[k] == want[k], (name, k, got[k], want[k])
        for k in ("avg_loss", "ppl", "adjusted_ppl", "token_ratio"):
            assert abs(got[k] - want[k]) <= 2e-5 * abs(want[k]), (name, k, got[k], want[k])
        print(f"{name}: {got['windows']} windows, avg loss {got['avg_loss']:.7f} (float64 reference "
              f"{want['avg_loss']:.7f}), adjusted ppl {got['adjusted_ppl']:.4f} ({want['adjusted_ppl']:.4f}), "
              f"token ratio {got['token_ratio']:.6f}")
    for strict in (False, True):
        name = "lambada--strict.json" if strict else "lambada.json"
        got, want = json.load(open(name)), lambada(loom, ck, strict)
        assert (got["correct"], got["total"]) == (want["correct"], want["total"]), (name, got, want)
        print(f"{name}: {got['correct']:.0f}/{got['total']:.0f} correct (reference {want['correct']}/{want['total']})")


if __name__ == "__main__":
    if sys.argv[1] == "make-data":
        make_data()
    else:
        check(sys.argv[2], sys.argv[3])
