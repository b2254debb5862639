#!/usr/bin/env bash
# import-hf records the model's chat format: a tokenizer_config.json whose chat_template is
# Llama 3's (its distinctive rule, written here) gives the imported recipe
# serve.chat_format = "llama3", which loom serve then uses; one that is no known format
# gives none, and says so; the tokenizer files are copied either way.
#   hf_chat_format.sh LOOM
set -euo pipefail
loom=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
scratch
cp -r "$here/hf/llama-gqa-f32" hf
python3 - <<'PY'
import json
template = ("{% for message in messages %}{% set content = '<|start_header_id|>' + message['role'] + "
            "'<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{{ content }}"
            "{% endfor %}")
json.dump({"chat_template": template, "bos_token": "<|begin_of_text|>"},
          open("hf/tokenizer_config.json", "w"))
PY
"$loom" import-hf hf ck > import.log 2>&1 || { cat import.log; exit 1; }
grep -q 'chat format llama3' import.log || { echo "FAIL: no chat format line"; cat import.log; exit 1; }
python3 -c '
import sys, tomllib
r = tomllib.load(open("ck/iter_0000000/recipe.toml", "rb"))
assert r["serve"]["chat_format"] == "llama3", r.get("serve")
print("import-hf: serve.chat_format = llama3 recorded")'
[ -f ck/tokenizer/tokenizer_config.json ] || { echo "FAIL: tokenizer_config.json not copied"; exit 1; }

echo '{"chat_template": "{{ messages }}"}' > hf/tokenizer_config.json
"$loom" import-hf hf ck2 > import2.log 2>&1 || { cat import2.log; exit 1; }
grep -q "none of Loom's chat formats" import2.log || { echo "FAIL: no notice"; cat import2.log; exit 1; }
if grep -q chat_format ck2/iter_0000000/recipe.toml; then
  echo "FAIL: an unknown template set serve.chat_format"; exit 1
fi
echo "PASS"
