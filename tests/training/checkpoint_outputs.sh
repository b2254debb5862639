#!/usr/bin/env bash
# What `loom checkpoint merge` and `convert` write, and where they refuse to (issue 35):
#  1. merge's output may not be its input, nor lie inside it (the checkpoint's own
#     model.safetensors, spelled directly, through `..`, through a link to the folder, or as a
#     hard link): exit 2, and the checkpoint still loads; an existing file is replaced only
#     with --overwrite; no temporary file is left; a file that links out of the checkpoint
#     folder is refused (exit 2);
#  2. convert follows `loom run`'s save-folder rule (one function): into a folder that holds
#     checkpoints it does not continue, it is refused (exit 2) and the tracker stays (72 -> 5
#     would make load = "auto" resume from 5), a checkpoint of the same iteration is not
#     replaced; --overwrite allows both; converting a checkpoint into its own folder is refused.
#  3. the same rule for the other commands that write a file: `generate --logits-out` and
#     `eval --output` refuse an existing file without --overwrite (it was replaced without a
#     word) and a file inside the checkpoint they read, before the model loads.
#   checkpoint_outputs.sh LOOM
set -euo pipefail
loom=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
scratch

tiny_recipe t.toml
run() {  # run SAVE ITERS
  "$loom" run t.toml --set checkpoint.save="$1" --set train.iters="$2" 2> run.log ||
    { tail -20 run.log; exit 1; }
}
run ck 5
sum=$(sha256sum ck/iter_0000005/model.safetensors)

echo "== 1: merge"
expect 2 "the output ck/iter_0000005/model.safetensors lies inside the input ck" \
  "$loom" checkpoint merge ck ck/iter_0000005/model.safetensors --overwrite
expect 2 "is the input" \
  "$loom" checkpoint merge ck/iter_0000005 ck/iter_0000005/../iter_0000005 --overwrite
ln -s ck/iter_0000005 via
expect 2 "lies inside the input" "$loom" checkpoint merge ck via/model.safetensors --overwrite
ln ck/iter_0000005/model.safetensors hard.safetensors
expect 2 "the output hard.safetensors is the input" \
  "$loom" checkpoint merge ck/iter_0000005/model.safetensors hard.safetensors --overwrite
[ "$(sha256sum ck/iter_0000005/model.safetensors)" = "$sum" ] || { echo "merge changed ck"; exit 1; }
"$loom" checkpoint merge ck full.safetensors > /dev/null
expect 2 "loom checkpoint merge: the output full.safetensors already exists; pass --overwrite" \
  "$loom" checkpoint merge ck full.safetensors
"$loom" checkpoint merge ck full.safetensors --overwrite > /dev/null
[ -z "$(ls -A | grep '^\.full')" ] || { echo "a temporary file was left"; ls -A; exit 1; }
"$loom" checkpoint diff ck ck --rtol 0 | tail -1
# A checkpoint's file that is a link out of its folder is refused like a bad manifest entry.
cp -r ck linked
mv linked/iter_0000005/model.safetensors outside.safetensors
ln -s ../../outside.safetensors linked/iter_0000005/model.safetensors
expect 2 "entry 'model.safetensors' is a link that leaves the folder" \
  "$loom" checkpoint merge linked linked.safetensors

echo "== 2: convert follows run's save-folder rule"
run big 7
expect 2 "loom checkpoint convert: big already holds checkpoints (newest iter_7) and this conversion does not resume from them: it would write over them" \
  "$loom" checkpoint convert ck big
[ "$(cat big/latest_checkpointed_iteration.txt)" = 7 ] || { echo "the tracker moved"; exit 1; }
[ ! -e big/iter_0000005 ] || { echo "convert wrote into big"; exit 1; }
run same 5
before=$(sha256sum same/iter_0000005/manifest.json)
expect 2 "newest iter_5" "$loom" checkpoint convert ck same
[ "$(sha256sum same/iter_0000005/manifest.json)" = "$before" ] || { echo "iter_5 replaced"; exit 1; }
# The run's own refusal, from the same function.
expect 2 "checkpoint.save = \"big\" already holds checkpoints (newest iter_7) and this run does not resume from them" \
  "$loom" run t.toml --set checkpoint.save=big
expect 2 "holds the input" "$loom" checkpoint convert ck/iter_0000005 ck --overwrite
"$loom" checkpoint convert ck big --overwrite > /dev/null
[ "$(cat big/latest_checkpointed_iteration.txt)" = 5 ] || { echo "--overwrite did not write"; exit 1; }
"$loom" checkpoint convert ck fresh > /dev/null
"$loom" checkpoint diff ck fresh --rtol 0 | tail -1

echo "== 3: generate --logits-out and eval --output"
gen() { "$loom" generate --checkpoint ck --prompt "ab" --max-new-tokens 0 "$@"; }
gen --logits-out l.st > /dev/null
sum=$(sha256sum l.st)
expect 2 "loom generate --logits-out: the output l.st already exists; pass --overwrite" \
  gen --logits-out l.st
[ "$(sha256sum l.st)" = "$sum" ] || { echo "generate replaced l.st"; exit 1; }
expect 2 "lies inside the input ck" gen --logits-out ck/iter_0000005/model.safetensors --overwrite
gen --logits-out l.st --overwrite > /dev/null
printf 'one two three four five six seven eight nine ten\n' > wiki.txt
echo '{"note": "mine"}' > results.json
expect 2 "loom eval --output: the output results.json already exists; pass --overwrite" \
  "$loom" eval --checkpoint ck --task wikitext --data wiki.txt --seq-len 8 --output results.json
grep -q mine results.json || { echo "eval replaced results.json"; exit 1; }
expect 2 "is the input" "$loom" eval --checkpoint ck --task wikitext --data wiki.txt \
  --seq-len 8 --output wiki.txt --overwrite
"$loom" eval --checkpoint ck --task wikitext --data wiki.txt --seq-len 8 --overlapping-eval 8 \
  --output results.json --overwrite > /dev/null 2> eval.log || { cat eval.log; exit 1; }
grep -q '"wikitext"\|ppl' results.json || { echo "eval wrote no results"; cat results.json; exit 1; }
echo "all passed"
