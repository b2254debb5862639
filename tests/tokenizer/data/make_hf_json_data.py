#!/usr/bin/python3
"""Writes the tokenizer.json test files for test_tokenizer_hf_json.

Run once from this folder, after make_sentencepiece_data.py, with Debian's python3 and
python3-sentencepiece:
    /usr/bin/python3 make_hf_json_data.py

  hf-gpt2-skeleton.json    GPT-2's tokenizer.json layout (ByteLevel pre-tokenizer, post-
                           processor and decoder, <|endoftext|> added) with an empty model;
                           the test fills model.vocab/merges from shared/data/gpt2.
  hf-llama3-skeleton.json  the Llama-3 layout: Split with Llama-3's regex, then ByteLevel
                           without its own regex, <|begin_of_text|> (50257) and
                           <|end_of_text|> (50258) added, a TemplateProcessing BOS.
  hf-llama2-bf.json        sp-shakespeare-bpe.model converted the way Llama-2's HF files are:
                           Prepend + Replace normalizer, no pre-tokenizer, BPE with
                           byte_fallback and fuse_unk, <s> template, Replace/ByteFallback/
                           Fuse/Strip decoder.
  hf-llama2-metaspace.json the same model the newer way: no normalizer, a Metaspace
                           pre-tokenizer (prepend_scheme "first", no split), Metaspace
                           decoder after ByteFallback/Fuse.
  hf-sp-lower.json         the same model with NFKC + Lowercase + a Replace regex, a
                           Sequence of Digits and Metaspace (split) pre-tokenizers, and
                           <|endoftext|> as an added non-special token with lstrip.

Merges for the SentencePiece-derived files: for each piece in id order (BPE pieces are
ranked by id), every split into two pieces that are both in the vocabulary, ordered by
the two parts' ids. Reference ids come from make_hf_json_ref.js.
"""
import json

import sentencepiece as spm

META = "\u2581"


def gpt2_skeleton():
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": True,
                          "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "vocab": {}, "merges": []},
    }


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def llama3_skeleton():
    j = gpt2_skeleton()
    j["added_tokens"] = [
        {"id": 50257, "content": "<|begin_of_text|>", "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True},
        {"id": 50258, "content": "<|end_of_text|>", "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True},
    ]
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": False}]}
    j["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
         "use_regex": True},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                  {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                  {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [50257],
                                                  "tokens": ["<|begin_of_text|>"]}}}]}
    return j


def sp_model(path):
    sp = spm.SentencePieceProcessor(model_file=path)
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    vocab = {p: i for i, p in enumerate(pieces)}
    merges = []
    for i, p in enumerate(pieces):
        if sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i):
            continue
        splits = [(p[:k], p[k:]) for k in range(1, len(p)) if p[:k] in vocab and p[k:] in vocab]
        splits.sort(key=lambda ab: (vocab[ab[0]], vocab[ab[1]]))
        merges.extend([a, b] for a, b in splits)
    model = {"type": "BPE", "dropout": None, "unk_token": "<unk>",
             "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
             "byte_fallback": True, "ignore_merges": False, "vocab": vocab, "merges": merges}
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, c in enumerate(pieces[:3])]
    return model, added


def bos_template():
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}


def llama2_bf(model, added):
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": META},
            {"type": "Replace", "pattern": {"String": " "}, "content": META}]},
        "pre_tokenizer": None,
        "post_processor": bos_template(),
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": META}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": model,
    }


def llama2_metaspace(model, added):
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": META, "prepend_scheme": "first",
                          "split": False},
        "post_processor": bos_template(),
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Metaspace", "replacement": META, "prepend_scheme": "first",
             "split": False}]},
        "model": model,
    }


def sp_lower(model, added):
    added = added + [{"id": 700, "content": "<|endoftext|>", "single_word": False,
                      "lstrip": True, "rstrip": False, "normalized": True, "special": False}]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFKC"}, {"type": "Lowercase"},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "Metaspace", "replacement": META, "prepend_scheme": "always",
             "split": True}]},
        "post_processor": None,
        "decoder": {"type": "Metaspace", "replacement": META, "prepend_scheme": "always",
                    "split": True},
        "model": model,
    }


def write(name, j):
    with open(name, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    write("hf-gpt2-skeleton.json", gpt2_skeleton())
    write("hf-llama3-skeleton.json", llama3_skeleton())
    model, added = sp_model("sp-shakespeare-bpe.model")
    write("hf-llama2-bf.json", llama2_bf(model, added))
    write("hf-llama2-metaspace.json", llama2_metaspace(model, added))
    write("hf-sp-lower.json", sp_lower(model, added))


if __name__ == "__main__":
    main()
