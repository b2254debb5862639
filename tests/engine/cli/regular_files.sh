#!/usr/bin/env bash
# Every file Loom reads by name must be a regular file (issue 35): /dev/zero, a FIFO (which
# would block a reader forever) and a directory are refused with exit 2, naming the path and
# what it is, promptly (each command runs under `timeout 20`, so a hang fails the test):
#   data.path (run and validate), a recipe include, a tokenizer file, an HF model.safetensors
#   and tokenizer.json for import-hf, a file of a checkpoint (run from it, and generate),
#   `loom preprocess --input`, `loom eval --data` and the package of `loom install`.
#   regular_files.sh LOOM HF_GPT2_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
loom=$1 hf=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
mkfifo fifo
mkdir folder
cp "$here/../../support/tiny_gpt.toml" r.toml
fail() { echo "FAIL: $*"; cat out.log 2>/dev/null | tail -5; exit 1; }

# refused WHAT KIND CMD...: CMD exits 2 within 20 s and its error names WHAT and KIND.
refused() {
  local what=$1 kind=$2
  shift 2
  timeout 20 "$@" > out.log 2>&1
  local rc=$?
  [ $rc = 124 ] && fail "$* hung on $what"
  [ $rc = 2 ] || fail "$*: exit $rc, expected 2"
  grep -q "$what" out.log && grep -q "$kind" out.log || fail "$*: the error names not $what ($kind)"
  echo "ok: $* -> exit 2: $(grep -m1 'error' out.log)"
}
declare -A kinds=([/dev/zero]="a character device" [fifo]="a FIFO" [folder]="a directory")

for bad in /dev/zero fifo folder; do
  kind=${kinds[$bad]}
  # data.path of dataset/jsonl, through the run and through validate
  for cmd in run validate; do
    refused "$bad" "$kind" "$loom" $cmd r.toml --set data.plugin=jsonl --set data.path=$bad
  done
  # a tokenizer file
  refused "$bad" "$kind" "$loom" validate r.toml --set tokenizer.plugin=hf-json \
    --set tokenizer.tokenizer_file=$bad
  # `loom preprocess --input`
  refused "$bad" "$kind" "$loom" preprocess --input $bad --output-prefix pre \
    --tokenizer-type byte
done

# a recipe include, and the recipe itself (a directory is already its own message)
for bad in /dev/zero fifo; do
  printf 'include = "%s"\n' "$(realpath -s $bad)" > inc.toml
  refused "$bad" "${kinds[$bad]}" "$loom" validate inc.toml
  refused "$bad" "${kinds[$bad]}" "$loom" validate $bad
  refused "$bad" "${kinds[$bad]}" "$loom" install $bad --dir plugins
done

# an HF directory for import-hf: model.safetensors, then tokenizer.json
mkdir hf
cp "$hf/config.json" hf/
mkfifo hf/model.safetensors
refused "hf/model.safetensors" "a FIFO" "$loom" import-hf hf hf.loom
rm hf/model.safetensors
cp "$hf/model.safetensors" hf/
mkfifo hf/tokenizer.json
refused "hf/tokenizer.json" "a FIFO" "$loom" import-hf hf hf.loom2

# a checkpoint's files: its recipe.toml and a tensor file, when resumed and for generate
timeout 60 "$loom" run r.toml --set checkpoint.save=ck > out.log 2>&1 || fail "the first run"
it=$(ls -d ck/iter_*/ | tail -1)
for f in recipe.toml model_rank0.safetensors; do
  [ -f "$it/$f" ] || f=$(cd "$it" && ls | grep -m1 safetensors)
  cp -r ck ck2
  rm "ck2/$(basename "$it")/$f"
  mkfifo "ck2/$(basename "$it")/$f"
  refused "$f" "a FIFO" "$loom" run r.toml --set train.iters=4 --set checkpoint.save=ck2 \
    --set checkpoint.load=auto
  refused "$f" "a FIFO" "$loom" generate --checkpoint ck2 --prompt hi --max-new-tokens 1
  rm -rf ck2
done

# `loom eval --data`
for task in lambada wikitext; do
  refused fifo "a FIFO" "$loom" eval --checkpoint ck --task $task --data fifo
done
echo "PASS"
