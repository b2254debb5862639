#!/usr/bin/env bash
# LoRA's exports on GPT-2 (Conv1D weights stored transposed: PEFT's fan_in_fan_out) and the
# refusals around them (docs/finetuning.md):
#  1. LoRA finetuning from an imported GPT-2 trains only the adapters, and its checkpoints
#     hold them alone, naming the base (loom.peft_base): merged, the frozen weights are the
#     base's bitwise; a run resumed from such a checkpoint follows the straight one bitwise;
#     with the base gone, reading it is refused by name;
#  2. export-peft's adapters are exactly the merged export's difference from the base, as PEFT
#     merges them (st.py peft: an independent reader), for all four projections and for two
#     of them (target_modules then names attn.c_proj, which mlp.c_proj would match too);
#  3. refused by name: export-hf of adapters without --merge-lora, export-peft of a model
#     with none, half of a fused projection's HF names, GPT-2's ambiguous c_proj, dropout,
#     LoRA with a mixture of experts or under FSDP.
#   hf_peft.sh LOOM
set -euo pipefail
loom=$1
here=$(cd "$(dirname "$0")" && pwd)
st="python3 $here/hf/st.py"
. "$here/../support/lib.sh"
scratch
"$loom" import-hf "$here/hf/gpt2-f32" base > /dev/null
lora() {  # lora OUT SETS...: 3 iterations of LoRA from the base
  local out=$1
  shift
  "$loom" run base/iter_0000000/recipe.toml --set model.peft=lora --set model.peft_rank=2 \
    --set model.peft_alpha=4 --set checkpoint.finetune=base --set train.iters=3 \
    --set checkpoint.save="$out" --set train.micro_batch_size=2 --set train.seq_len=16 \
    --set backend.measure_gemm=false --set lr.max=0.05 "$@"
}

echo "== 1. the frozen weights stay, the adapters train"
lora all > all.log 2>&1 || { cat all.log; exit 1; }
grep -q "peft: .* trained adapter parameters, .* frozen" all.log
"$loom" checkpoint merge all all.safetensors > /dev/null
PYTHONPATH=$here/hf python3 - base/iter_0000000/model.safetensors all/iter_0000003/model.safetensors \
  all.safetensors "$PWD/base/iter_0000000" <<'PY'
import json, struct, sys
import st
base, own, merged = st.read(sys.argv[1]), st.read(sys.argv[2]), st.read(sys.argv[3])
with open(sys.argv[2], "rb") as f:
    meta = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))["__metadata__"]
assert meta["loom.peft_base"] == sys.argv[4], meta.get("loom.peft_base")
adapters = sorted(own)
assert all(".lora_" in k for k in adapters) and len(adapters) == 16, adapters
assert sorted(merged) == sorted(set(base) | set(own)), sorted(merged)
assert all(merged[k] == base[k] for k in base), [k for k in base if merged[k] != base[k]]
assert any(max(map(abs, st.floats("F32", own[k][2]))) > 0 for k in adapters if "lora_B" in k)
print(f"the checkpoint holds {len(adapters)} adapter tensors and names its base; merged, "
      f"{len(base)} frozen tensors are the base's bitwise")
PY
lora straight --set train.iters=6 > straight.log 2>&1 || { cat straight.log; exit 1; }
lora half --set train.iters=6 --set train.exit_interval=3 > half.log 2>&1 || { cat half.log; exit 1; }
lora half --set train.iters=6 --set checkpoint.load=half > resumed.log 2>&1 ||
  { cat resumed.log; exit 1; }
grep -q "resumed from .* at iteration 3" resumed.log || { echo "FAIL: did not resume at 3"; cat resumed.log; exit 1; }
"$loom" checkpoint diff straight half --rtol 0 | tail -1
mv base base.away
expect 1 "holds LoRA adapters alone; their frozen base" "$loom" generate --checkpoint all \
  --prompt "1 2 3" --max-new-tokens 2
mv base.away base

echo "== 2. export-peft = the merged export's difference from the base"
for t in all "two c_attn,linear_proj"; do
  set -- $t
  name=$1 targets=${2:-}
  if [ -n "$targets" ]; then
    lora "$name" --set model.peft_target_modules="$targets" > "$name.log" 2>&1 ||
      { cat "$name.log"; exit 1; }
  fi
  "$loom" export-peft "$name" "$name.peft" > /dev/null
  "$loom" export-hf --merge-lora "$name" "$name.merged" > /dev/null
  $st peft "$here/hf/gpt2-f32" "$name.merged" "$name.peft" 1e-6
  grep -q '"fan_in_fan_out": true' "$name.peft/adapter_config.json"
done
grep -q '"attn.c_proj"' two.peft/adapter_config.json

echo "== 3. refusals"
expect 2 "holds LoRA adapters" "$loom" export-hf all plain
expect 2 "has no LoRA adapters" "$loom" export-peft base nope
expect 2 "names q_proj without k_proj" lora x --set model.peft_target_modules=q_proj,v_proj
expect 2 "c_proj is GPT-2's name of both" lora x --set model.peft_target_modules=c_proj
expect 2 "unknown module 'qkv'" lora x --set model.peft_target_modules=qkv
expect 2 "the layer library has no dropout" lora x --set model.peft_dropout=0.1
expect 2 "not a mixture of experts" lora x --set model.num_experts=2 --set checkpoint.finetune=
expect 2 "with LoRA (model.peft = \"lora\"" lora x --set parallel.data=fsdp \
  --set checkpoint.finetune=
echo "PASS"
