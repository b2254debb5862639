#!/usr/bin/python3
"""Renders conversations.jsonl with each model family's published Hugging Face chat template,
as transformers' apply_chat_template does (Jinja2 with trim_blocks and lstrip_blocks,
raise_exception, the config's bos_token and eos_token), into references.jsonl: one line per
format, conversation and add_generation_prompt, with the text or the template's exception.

    make_references.py FORMAT=tokenizer_config.json ...

FORMAT is a loom chat format (chatml, llama3, mistral, gemma, deepseek-v3) and the file that
model's tokenizer_config.json (its "chat_template", "bos_token", "eos_token"). The files
used for the stored references are the ones of Qwen/Qwen2.5-7B-Instruct (chatml),
meta-llama/Meta-Llama-3-8B-Instruct (llama3), mistralai/Mixtral-8x7B-Instruct-v0.1
(mistral), google/gemma-2-9b-it (gemma) and deepseek-ai/DeepSeek-V3 (deepseek-v3). They are
not kept here (the templates are those projects' text); Debian's python3-jinja2 renders them.
"""
import json
import os
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def conversation(line):
    if "messages" in line:
        return line["messages"]
    return [{"role": "user", "content": line["prompt"]},
            {"role": "assistant", "content": line["completion"]}]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "conversations.jsonl"), encoding="utf-8") as f:
        convs = [json.loads(line) for line in f if line.strip()]
    out = []
    for arg in sys.argv[1:]:
        name, path = arg.split("=", 1)
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        tmpl = env.from_string(cfg["chat_template"])
        for i, line in enumerate(convs):
            for gen in (False, True):
                row = {"format": name, "conversation": i, "generation_prompt": gen}
                try:
                    row["text"] = tmpl.render(messages=conversation(line), add_generation_prompt=gen,
                                              bos_token=cfg.get("bos_token", ""),
                                              eos_token=cfg.get("eos_token", ""))
                except jinja2.exceptions.TemplateError as e:
                    row["error"] = str(e)
                out.append(row)
    with open(os.path.join(here, "references.jsonl"), "w", encoding="utf-8") as f:
        for row in out:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(out)} references written")


if __name__ == "__main__":
    main()
