#!/usr/bin/env bash
# LoRA's exports on GPT-2 (Conv1D weights stored transposed: PEFT's fan_in_fan_out) and the
# refusals around them (docs/finetuning.md):
#  1. LoRA finetuning from an imported GPT-2 trains only the adapters (the frozen weights come
#     back unchanged in its checkpoint);
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
PYTHONPATH=$here/hf python3 - base/iter_0000000/model.safetensors all/iter_0000003/model.safetensors <<'PY'
import sys
import st
base, run = st.read(sys.argv[1]), st.read(sys.argv[2])
adapters = sorted(k for k in run if ".lora_" in k)
assert sorted(set(run) - set(base)) == adapters and len(adapters) == 16, adapters
assert all(run[k] == base[k] for k in base), [k for k in base if run[k] != base[k]]
assert any(max(map(abs, st.floats("F32", run[k][2]))) > 0 for k in adapters if "lora_B" in k)
print(f"{len(base)} frozen tensors unchanged after 3 steps; {len(adapters)} adapter tensors")
PY

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
