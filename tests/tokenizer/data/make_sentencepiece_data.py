#!/usr/bin/python3
"""Trains sp-shakespeare-bpe.model and writes sp-ref.json for test_tokenizer_sentencepiece.

Run once from this folder with Debian's python3-sentencepiece (0.1.97 here):
    /usr/bin/python3 make_sentencepiece_data.py /work/shared/data/tinyshakespeare/input.txt

A 700-piece BPE model set up like Llama-2's tokenizer.model: special ids <unk>=0, <s>=1,
</s>=2 and no pad, identity normalisation, whitespace kept as written, digits split, and
byte_fallback, so characters the model never saw still round-trip. Training is
single-threaded and seeded for reproducibility, but the test only needs the stored model:
the reference ids are computed by python3-sentencepiece from that same file.
"""
import json
import os
import sys

import sentencepiece as spm

SENTENCES = [
    "Hello world",
    "First Citizen:\nBefore we proceed any further, hear me speak.",
    "  leading and  double  spaces ",
    "O Romeo, Romeo! wherefore art thou Romeo?",
    "Caf\u00e9 na\u00efve \u4e2d\u6587 \U0001f642",
    "tabs\tand\nnewlines\r\n",
    "<s> and </s> are text here",
    "In 1599, 42 players",
    "",
]


def main():
    spm.SentencePieceTrainer.train(
        input=sys.argv[1], model_prefix="sp-shakespeare-bpe", model_type="bpe",
        vocab_size=700, character_coverage=1.0, byte_fallback=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1,
        normalization_rule_name="identity", remove_extra_whitespaces=False, split_digits=True,
        input_sentence_size=0, shuffle_input_sentence=False, minloglevel=2)
    os.remove("sp-shakespeare-bpe.vocab")  # the test needs the .model only
    sp = spm.SentencePieceProcessor(model_file="sp-shakespeare-bpe.model")
    ref = {"vocab_size": sp.get_piece_size(), "bos": sp.bos_id(), "eos": sp.eos_id(),
           "cases": []}
    for s in SENTENCES:
        ids = sp.encode(s)
        ref["cases"].append({"text": s, "ids": ids, "decoded": sp.decode(ids)})
    with open("sp-ref.json", "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=True, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
