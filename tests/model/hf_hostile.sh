#!/usr/bin/env bash
# What import-hf and export-hf do with hostile or stale folders (issue 35):
#  1. config.json sizes (n_layer, num_hidden_layers, hidden_size, vocab_size, n_embd,
#     num_local_experts: huge, negative, fractional) are checked against the tensors' shapes
#     before anything is allocated: exit 2 naming the key, its value and the tensor, within
#     a few seconds and a 2 GB address space;
#  2. the shard index's names (../../etc/passwd, /dev/zero, a link out of the folder) are
#     refused (exit 2) naming the index and the entry, as a checkpoint manifest's are;
#  3. export-hf into an old export refuses without --overwrite (exit 2, the path named), and
#     with it replaces the folder whole: no stale shard or index survives, import-hf reads the
#     new weights; a failed export leaves the old one intact; an output inside the input is
#     refused; import-hf over a folder of checkpoints is refused without --overwrite;
#  4. a trained model exported and imported again: `checkpoint diff` calls it identical
#     (the padding rows past the real vocabulary are not compared, and it says so).
#   hf_hostile.sh LOOM
set -euo pipefail
loom=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
scratch
# A refusal must come before the allocation a size implies: 2 GB of address space, 60 s. The
# sanitizer build (LOOM_TEST_ASAN=1) reserves terabytes of shadow address space, so there the
# bound is ASan's own: 2 GB of resident memory.
if [ "${LOOM_TEST_ASAN:-0}" = 1 ]; then
  bounded() { ASAN_OPTIONS="${ASAN_OPTIONS:-}:hard_rss_limit_mb=2000" timeout 60 "$@"; }
else
  bounded() { (ulimit -v 2000000 && timeout 60 "$@"); }
fi

edit() {  # edit MODEL PYTHON: bad/ is a copy of MODEL whose config.json `c` PYTHON changes
  rm -rf bad bad.out && cp -r "$here/hf/$1" bad
  python3 -c "import json; c = json.load(open('bad/config.json')); $2; json.dump(c, open('bad/config.json', 'w'))"
}

echo "== 1: config sizes against the tensors"
edit gpt2-f32 "c['n_layer'] = 1000000000"
expect 2 '"n_layer" = 1000000000 disagrees with the tensors: there is no tensor h.2.*' \
  bounded "$loom" import-hf bad bad.out
edit gpt2-f32 "c['n_layer'] = 1e9"
expect 2 '"n_layer" = 1000000000.0 is not a positive integer' bounded "$loom" import-hf bad bad.out
edit gpt2-f32 "c['n_layer'] = -3"
expect 2 '"n_layer" = -3 is not a positive integer' bounded "$loom" import-hf bad bad.out
edit gpt2-f32 "c['n_embd'] = 10**12"
expect 2 '"n_embd" = 1000000000000 disagrees with tensor wte.weight of shape (96, 16)' \
  bounded "$loom" import-hf bad bad.out
edit gpt2-f32 "c['vocab_size'] = 2.5"
expect 2 '"vocab_size" = 2.5 is not a positive integer' bounded "$loom" import-hf bad bad.out
edit llama-gqa-f32 "c['num_hidden_layers'] = 10**9"
expect 2 '"num_hidden_layers" = 1000000000 disagrees with the tensors: there is no tensor model.layers.2.*' \
  bounded "$loom" import-hf bad bad.out
edit llama-gqa-f32 "c['hidden_size'] = 4096"
expect 2 '"hidden_size" = 4096 disagrees with tensor model.embed_tokens.weight' \
  bounded "$loom" import-hf bad bad.out
edit llama-gqa-f32 "c['vocab_size'] = -1"
expect 2 '"vocab_size" = -1 is not a positive integer' bounded "$loom" import-hf bad bad.out
edit mixtral-f32 "c['num_local_experts'] = 10**9"
expect 2 '"num_local_experts" = 1000000000 disagrees with the tensors: there is no tensor model.layers.0.block_sparse_moe.experts.4.*' \
  bounded "$loom" import-hf bad bad.out
[ ! -e bad.out ] || { echo "a refused import left bad.out"; exit 1; }

echo "== 2: the shard index names files of the folder only"
index() {  # index PYTHON: bad/ is llama-gqa-f32 whose index `m` (weight_map) PYTHON changes
  rm -rf bad bad.out && cp -r "$here/hf/llama-gqa-f32" bad
  python3 -c "import json; i = json.load(open('bad/model.safetensors.index.json')); m = i['weight_map']; $1; json.dump(i, open('bad/model.safetensors.index.json', 'w'))"
}
index "m['lm_head.weight'] = '../../etc/passwd'"
expect 2 "model.safetensors.index.json: entry '../../etc/passwd' is a path, not a plain file name" \
  "$loom" import-hf bad bad.out
index "m['lm_head.weight'] = '/dev/zero'"
expect 2 "entry '/dev/zero' is an absolute path" "$loom" import-hf bad bad.out
index "m['lm_head.weight'] = 'escape.safetensors'"
cp bad/model-00001-of-00002.safetensors outside.safetensors
ln -s ../outside.safetensors bad/escape.safetensors
expect 2 "entry 'escape.safetensors' is a link that leaves the folder" "$loom" import-hf bad bad.out
# The directory's own files too: a tokenizer file that links out of it is not copied in.
rm -rf bad && cp -r "$here/hf/gpt2-f32" bad && ln -s /etc/passwd bad/vocab.json
expect 2 "entry 'vocab.json' is a link that leaves the folder" "$loom" import-hf bad bad.out
[ ! -e bad.out ] || { echo "a refused import left bad.out"; exit 1; }
index "m['lm_head.weight'] = ['x']"
expect 2 'weight_map["lm_head.weight"] is ["x"], not a file name' "$loom" import-hf bad bad.out
# The same rule for a checkpoint's manifest (its entries were refused before, as exit 1).
"$loom" import-hf "$here/hf/gpt2-f32" ck > /dev/null
python3 -c "
import json; p = 'ck/iter_0000000/manifest.json'; m = json.load(open(p))
m['files']['../../../etc/passwd'] = m['files'].pop('recipe.toml'); json.dump(m, open(p, 'w'))"
expect 2 "manifest.json: entry '../../../etc/passwd' is a path" "$loom" export-hf ck ck.hf
rm -rf ck

echo "== 3: export-hf over an old export; import-hf over checkpoints"
"$loom" import-hf "$here/hf/llama-gqa-f32" llama > /dev/null
"$loom" export-hf llama old.hf --max-shard-size 20000 > /dev/null
[ -f old.hf/model.safetensors.index.json ] || { echo "no sharded export"; exit 1; }
expect 2 "loom export-hf: the output old.hf already exists; pass --overwrite" \
  "$loom" export-hf llama old.hf
"$loom" import-hf "$here/hf/gpt2-f32" gpt > /dev/null
"$loom" export-hf gpt old.hf --overwrite > /dev/null
ls old.hf | grep -q "index\|model-0" && { echo "stale files survive:"; ls old.hf; exit 1; }
"$loom" import-hf old.hf again > /dev/null
"$loom" checkpoint diff gpt again --rtol 0 | tail -2
# A failed export (a tokenizer file that is a folder, refused before anything is written, by the
# regular-file rule) leaves the old export as it was; a write that fails part-way is
# train.units' (test_tool_output.cpp).
cp -r "$here/hf/llama-gqa-f32" withtok
cp "$here/../tokenizer/data/hf-llama2-bf.json" withtok/tokenizer.json
echo '{"model_max_length": 64}' > withtok/tokenizer_config.json
"$loom" import-hf withtok tok > /dev/null
rm tok/tokenizer/tokenizer_config.json
mkdir tok/tokenizer/tokenizer_config.json  # still there, but a folder
before=$(ls -l old.hf)
set +e
"$loom" export-hf tok old.hf --overwrite > out.log 2>&1
rc=$?
set -e
[ $rc = 2 ] && grep -q "tokenizer_config.json is a directory, not a regular file" out.log ||
  { echo "the failing export exited $rc"; cat out.log; exit 1; }
[ "$(ls -l old.hf)" = "$before" ] || { echo "a failed export changed old.hf"; ls -l old.hf; exit 1; }
[ -z "$(ls -A | grep '^\.old\.hf\.')" ] || { echo "a temporary folder was left"; ls -A; exit 1; }
echo "a failed export (exit $rc: $(head -c 150 out.log)) left old.hf as it was"
expect 2 "the output gpt/iter_0000000/hf lies inside the input gpt" "$loom" export-hf gpt gpt/iter_0000000/hf
expect 2 "holds the input" "$loom" export-hf gpt/iter_0000000 gpt --overwrite
expect 2 "loom import-hf: llama already holds checkpoints (newest iter_0) and this import does not resume from them" \
  "$loom" import-hf "$here/hf/gpt2-f32" llama
"$loom" import-hf "$here/hf/gpt2-f32" llama --overwrite > /dev/null

echo "== 4: a trained model out and back is identical"
tiny_recipe t.toml
"$loom" run t.toml --set checkpoint.save=trained 2> run.log || { tail -20 run.log; exit 1; }
"$loom" export-hf trained trained.hf > /dev/null
"$loom" import-hf trained.hf back > /dev/null
"$loom" checkpoint diff trained back --rtol 0 > diff.log || { cat diff.log; exit 1; }
grep -q "^match: " diff.log || { cat diff.log; exit 1; }
grep -qF "wte: the 257 rows of the real vocabulary compared; the padding rows" diff.log ||
  { cat diff.log; exit 1; }
cat diff.log
echo "all passed"
