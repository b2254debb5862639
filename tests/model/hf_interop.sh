#!/usr/bin/env bash
# Hugging Face interop against stored PyTorch references (tests/model/hf/make_reference.py):
#  1. import-hf of each tiny model (GPT-2 f32 and f16 without the "transformer." prefix and
#     with mask buffers; Llama GQA f32 sharded, untied, rope_theta 5e5; Llama MQA bf16 tied;
#     Mixtral, 4 experts top-2, GQA f32; Qwen2 with q/k/v biases; Qwen3 bf16 tied with QK-norm
#     and head_dim 8 over hidden 16 / 4 heads; Qwen2-MoE with a gated shared expert,
#     unnormalised top-2 and a dense layer (mlp_only_layers); Qwen3-MoE; DeepSeek-V3 bf16
#     with MLA's interleaved rotary pairs, a dense first layer, grouped routing and the
#     router bias in float32; Mamba-2 f32, 3 mixers of 8 heads in 2 groups; Llama with Llama
#     3.1's rope_scaling; DeepSeek-V3 with YaRN; NemotronH's hybrid "M*-M" with attention
#     without position encoding and a squared-ReLU MLP)
#     reproduces the reference logits of every prompt position (fp32, <= 1e-5 of max |logit|);
#  2. export-hf writes every tensor byte-identical to the original (dtype, shape, data), one
#     file or shards with an index, and re-importing that gives the same checkpoint bitwise;
#  3. a Loom-trained GPT, Llama, Qwen3, Qwen2-MoE, DeepSeek-V3-style, Mamba-2 and NemotronH-style
#     model exported,
#     re-imported and exported again give
#     byte-identical tensors (and every non-vocabulary tensor of the checkpoints is equal);
#  4. what does not map is refused, naming it (a config key, a config value, a shape, a
#     tensor with no place);
#  5. checkpoint.finetune from the HF directory and from its import train the same losses
#     bitwise on one rank, and within 1e-5 under TP2; a model key that disagrees stops the
#     run with exit 2 naming both values.
#   hf_interop.sh LOOM MPIEXEC
set -euo pipefail
loom=$1 mpiexec=$2
here=$(cd "$(dirname "$0")" && pwd)
st="python3 $here/hf/st.py"
. "$here/../support/lib.sh"
scratch
quiet=(--set backend.measure_gemm=false)

echo "== 1-2: import, logits, export, re-import"
for m in gpt2-f32 gpt2-f16-base llama-gqa-f32 llama-mqa-tied-bf16 mixtral-f32 qwen2-f32 \
         qwen3-tied-bf16 qwen2-moe-f32 qwen3-moe-f32 deepseek-v3-bf16 mamba2-f32 \
         llama-rope-llama3-f32 deepseek-v3-yarn-bf16 nemotron-h-f32; do
  src=$here/hf/$m
  "$loom" import-hf "$src" $m
  "$loom" generate --checkpoint $m --prompt "$(cat "$src/prompt.txt")" --max-new-tokens 0 \
    --logits-out $m.logits.safetensors "${quiet[@]}" > /dev/null 2> gen.log || { cat gen.log; exit 1; }
  $st logits $m.logits.safetensors "$src/reference.safetensors" 1e-5
  shard=()
  [ -f "$src/model.safetensors.index.json" ] && shard=(--max-shard-size 20000)
  "$loom" export-hf $m $m.hf "${shard[@]}"
  [ ${#shard[@]} = 0 ] || [ -f $m.hf/model.safetensors.index.json ] || { echo "no index"; exit 1; }
  $st same "$src" $m.hf
  "$loom" import-hf $m.hf $m.again > /dev/null
  "$loom" checkpoint diff $m $m.again --rtol 0 | tail -1
done

echo "== 2b: tokenizer files travel with the model"
cp -r "$here/hf/llama-gqa-f32" withtok
cp "$here/../tokenizer/data/hf-llama2-bf.json" withtok/tokenizer.json
echo '{"model_max_length": 64}' > withtok/tokenizer_config.json
"$loom" import-hf withtok withtok.loom > /dev/null
grep -q "^plugin = \"hf-json\"" withtok.loom/iter_0000000/recipe.toml ||
  { cat withtok.loom/iter_0000000/recipe.toml; exit 1; }
"$loom" export-hf withtok.loom withtok.hf
cmp withtok/tokenizer.json withtok.hf/tokenizer.json
cmp withtok/tokenizer_config.json withtok.hf/tokenizer_config.json
echo "tokenizer.json and tokenizer_config.json copied in (tokenizer/hf-json) and out unchanged"

echo "== 3: a Loom-trained model out and back"
tiny_recipe t.toml 3
for style in gpt llama qwen3 qwen2moe dsv3 dsv3mtp mamba2 nemotronh; do
  train_style $style t.toml
  "$loom" export-hf trained-$style trained-$style.hf
  "$loom" import-hf trained-$style.hf trained-$style.back > /dev/null
  # The real vocabulary's rows and every other tensor bitwise (the padded rows past it are
  # the model's random initialisation in training and zero after an import: diff leaves them).
  "$loom" checkpoint diff trained-$style trained-$style.back --rtol 0 > diff.log ||
    { cat diff.log; exit 1; }
  "$loom" export-hf trained-$style.back trained-$style.back.hf > /dev/null
  $st same trained-$style.hf trained-$style.back.hf
done
# DeepSeek's layout of the MTP module: layer 4 after the model's 4, its embedding and head
# stored again (identical), the config counting it
ST_DIR="$here/hf" python3 - <<'PY'
import json, os, sys
sys.path.insert(0, os.environ["ST_DIR"])
import st
names = st.read("trained-dsv3mtp.hf/model.safetensors")
m = "model.layers.4."
for n in ("enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight",
          "self_attn.kv_b_proj.weight", "mlp.experts.3.down_proj.weight",
          "mlp.gate.e_score_correction_bias", "mlp.shared_experts.up_proj.weight"):
    assert m + n in names, m + n
assert names[m + "embed_tokens.weight"] == names["model.embed_tokens.weight"]
assert names[m + "shared_head.head.weight"] == names["lm_head.weight"]
assert not any(k.startswith("model.layers.5.") for k in names)
c = json.load(open("trained-dsv3mtp.hf/config.json"))
assert c["num_nextn_predict_layers"] == 1 and c["num_hidden_layers"] == 4, c
print("dsv3mtp: the MTP module exported as DeepSeek's layer 4 (embedding and head repeated)")
PY

echo "== 4: refusals"
refuse() {  # refuse WHAT EXPECTED-TEXT: import of bad/ must fail naming it
  if "$loom" import-hf bad bad.out > out.log 2>&1; then echo "$1: accepted"; exit 1; fi
  grep -q -- "$2" out.log || { echo "$1: expected '$2' in:"; cat out.log; exit 1; }
  echo "$1 refused: $(grep -m1 -- "$2" out.log)"
  rm -rf bad bad.out
}
same_logits() {  # same_logits MODEL WHAT: bad/ (an edit of MODEL) imports to MODEL's logits
  "$loom" import-hf bad bad.out > out.log 2>&1 || { cat out.log; exit 1; }
  "$loom" generate --checkpoint bad.out --prompt "$(cat "$here/hf/$1/prompt.txt")" \
    --max-new-tokens 0 --logits-out bad.logits.safetensors "${quiet[@]}" > /dev/null
  $st logits bad.logits.safetensors "$here/hf/$1/reference.safetensors" 1e-5
  echo "$2: imported, the same logits"
  rm -rf bad bad.out bad.logits.safetensors
}
edit() {  # edit MODEL PYTHON: a copy of MODEL whose config.json `c` PYTHON changes
  rm -rf bad && cp -r "$here/hf/$1" bad
  python3 -c "import json; c = json.load(open('bad/config.json')); $2; json.dump(c, open('bad/config.json', 'w'))"
}
edit llama-gqa-f32 "c['rope_scaling'] = {'rope_type': 'dynamic', 'factor': 2.0}"
refuse "dynamic NTK rope scaling" '"rope_scaling" = {"factor":2.0,"rope_type":"dynamic"} does not map'
edit llama-gqa-f32 "c['sliding_window'] = 4096"
refuse "an unknown config key" '"sliding_window"'
# transformers 5 saves RoPE's base and scaling as one rope_parameters dict
edit llama-rope-llama3-f32 "c['rope_parameters'] = dict(c.pop('rope_scaling'), rope_theta=c.pop('rope_theta', 10000.0))"
same_logits llama-rope-llama3-f32 "Llama 3.1's scaling in rope_parameters"
edit deepseek-v3-bf16 "c['rope_parameters'] = {'rope_theta': c.pop('rope_theta', 10000.0), 'rope_type': 'default'}; c.pop('rope_scaling', None)"
same_logits deepseek-v3-bf16 "DeepSeek-V3's rope_parameters"
edit deepseek-v3-yarn-bf16 "rs = c.pop('rope_scaling'); rs['rope_type'] = rs.pop('type'); c['rope_parameters'] = dict(rs, rope_theta=c.pop('rope_theta', 10000.0))"
same_logits deepseek-v3-yarn-bf16 "DeepSeek-V3's YaRN in rope_parameters"
edit deepseek-v3-bf16 "c['rope_parameters'] = {'rope_type': 'linear', 'factor': 4.0, 'rope_theta': 10000.0}"
refuse "DeepSeek-V3 with linear scaling in rope_parameters" '"rope_parameters" = {"factor":4.0,"rope_theta":10000.0,"rope_type":"linear"} does not map'
edit gpt2-f32 "c['n_inner'] = 32"
refuse "a size the tensors contradict" '"n_inner" = 32 disagrees with tensor h.0.mlp.c_fc.weight of shape (16, 64)'
edit llama-gqa-f32 "c['num_key_value_heads'] = 4"
refuse "a shape the config contradicts" 'model.layers.0.self_attn.k_proj.weight has shape (8, 16), config.json implies (16, 16)'
edit gpt2-f32 "c['n_layer'] = 1"
refuse "a tensor with no place" 'transformer.h.1.* \?.*has no place\|tensor transformer.h.1.'
edit gpt2-f32 "c['activation_function'] = 'relu'"
refuse "another activation" '"activation_function" = "relu"'
edit mixtral-f32 "c['router_jitter_noise'] = 0.01"
refuse "Mixtral's router noise" '"router_jitter_noise" = 0.01 does not map'
edit mixtral-f32 "c['sliding_window'] = 4096"
refuse "Mixtral's sliding window" '"sliding_window" = 4096 does not map'
edit qwen2-f32 "c['use_sliding_window'] = True"
refuse "Qwen2's sliding window" '"use_sliding_window" = true does not map'
edit qwen3-tied-bf16 "c['attention_bias'] = True"
refuse "Qwen3's o_proj bias" '"attention_bias" = true does not map'
edit qwen3-moe-f32 "c['decoder_sparse_step'] = 0"
refuse "Qwen-MoE's sparse step 0" '"decoder_sparse_step" must be at least 1'
edit qwen3-moe-f32 "c['mlp_only_layers'] = [2]"
refuse "a dense layer that is not there" '"mlp_only_layers" = \[2\] names a layer outside \[0, 2)'
edit qwen3-moe-f32 "c['mlp_only_layers'] = [1]"
refuse "a dense layer whose tensors are experts'" 'no tensor model.layers.1.mlp.gate_proj.weight'
edit deepseek-v3-bf16 "c['rope_scaling'] = {'type': 'linear', 'factor': 40}"
refuse "DeepSeek-V3 with linear rope scaling" '"rope_scaling" = {"factor":40,"type":"linear"} does not map'
# DeepSeek-V3's multi-token prediction module: a config naming one whose files hold none of
# its tensors (what transformers saves) maps the main model, the same logits; a module
# partly there is refused, naming the missing tensor; a repeated embedding that differs
# from the model's is refused; more modules said than the files hold are refused
edit deepseek-v3-bf16 "c['num_nextn_predict_layers'] = 1"
same_logits deepseek-v3-bf16 "DeepSeek-V3 with num_nextn_predict_layers = 1 and no MTP tensors"
edit deepseek-v3-bf16 "c['num_nextn_predict_layers'] = 1"
$st add bad/model.safetensors model.layers.3.eh_proj.weight
refuse "an MTP module without its norms" 'no tensor model.layers.3.enorm.weight (config.json implies it)'
edit deepseek-v3-bf16 "c['num_nextn_predict_layers'] = 1"
$st add bad/model.safetensors model.layers.3.enorm.weight
refuse "MTP tensors without eh_proj" 'model.layers.3.enorm.weight has no place.*maps when its eh_proj.weight is there'
rm -rf mtp.hf && cp -r trained-dsv3mtp.hf mtp.hf
python3 -c "import json; c = json.load(open('mtp.hf/config.json')); c['num_nextn_predict_layers'] = 2; json.dump(c, open('mtp.hf/config.json', 'w'))"
rm -rf bad && mv mtp.hf bad
refuse "two MTP modules said, one there" '"num_nextn_predict_layers" = 2 but the files hold 1 module(s)'
cp -r trained-dsv3mtp.hf bad
$st add bad/model.safetensors model.layers.4.embed_tokens.weight
refuse "a repeated embedding that differs" 'model.layers.4.embed_tokens.weight differs from model.embed_tokens.weight'
edit deepseek-v3-bf16 "c['topk_group'] = 1"
refuse "a group score model/gpt cannot take" '"topk_group" must be num_experts_per_tok / 2'
edit mamba2-f32 "c['n_groups'] = 3"
refuse "Mamba-2 groups that do not divide the heads" '"n_groups" must divide num_heads'
# NemotronH: its layer kinds as transformers 5 saves them (new names, no pattern), its base
# model's tensors under model. (transformers' class) rather than backbone. (the hub's), and
# the embedding named as older hub files do, each the same logits; MoE layers and another
# MLP activation refused by name
edit nemotron-h-f32 "c['layers_block_type'] = ['linear_attention', 'full_attention', 'mlp', 'linear_attention']; del c['hybrid_override_pattern']"
same_logits nemotron-h-f32 "NemotronH's layers_block_type (transformers 5's names)"
edit nemotron-h-f32 "pass"
$st rename bad/model.safetensors backbone. model.
same_logits nemotron-h-f32 "NemotronH's tensors under model."
edit nemotron-h-f32 "pass"
$st rename bad/model.safetensors backbone.embeddings. backbone.embedding.
same_logits nemotron-h-f32 "NemotronH's older embedding name (backbone.embedding.weight)"
edit nemotron-h-f32 "c['hybrid_override_pattern'] = 'ME-M'"
refuse "NemotronH's MoE layers" '= "ME-M" has MoE layers (E)'
edit nemotron-h-f32 "c['mlp_hidden_act'] = 'silu'"
refuse "a NemotronH MLP other than relu2" '"mlp_hidden_act" = "silu" does not map'
edit nemotron-h-f32 "c['layers_block_type'] = ['mamba', 'mlp', 'mlp', 'mamba']"
refuse "two NemotronH patterns that disagree" '"layers_block_type" = .* disagrees with "M\*-M"'
edit mamba2-f32 "c['time_step_limit'] = [0.0, float('inf')]"  # Python's bare Infinity
"$loom" import-hf bad bad.out > out.log 2>&1 || { cat out.log; exit 1; }
echo "Mamba2Config's default time_step_limit [0.0, Infinity] read"
rm -rf bad bad.out
edit mamba2-f32 "c['time_step_limit'] = [0.001, 0.1]"
refuse "a clamped Mamba-2 step" 'model/gpt does not clamp the step dt'
# transformers 5 saves Qwen3-MoE's expert count under Mixtral's key (Qwen3MoeConfig's
# attribute_map); the same model, the same logits
edit qwen3-moe-f32 "c['num_local_experts'] = c.pop('num_experts')"
same_logits qwen3-moe-f32 "Qwen3-MoE's num_experts under transformers 5's name (num_local_experts)"
edit qwen3-moe-f32 "c['num_local_experts'] = c['num_experts'] - 1"
refuse "two expert counts that disagree" '"num_local_experts" = 3 disagrees with num_experts = 4'
edit qwen3-tied-bf16 "c['head_dim'] = 6"
refuse "a head_dim the tensors contradict" '"head_dim" = 6 disagrees with tensor'

echo "== 5: finetuning from pretrained weights"
{
  toml_section train seed=11 iters=4 micro_batch_size=2 global_batch_size=4 seq_len=16
  toml_section backend measure_gemm=false threads=1
  toml_section model n_layer=2 n_head=4 n_embd=16 max_seq_len=32
  toml_section tokenizer plugin=null vocab_size=95
  toml_section data plugin=mock
  toml_section checkpoint "finetune=$here/hf/gpt2-f32"
} > ft.toml
"$loom" run ft.toml --set train.metrics=hf.jsonl 2> ft.log || { tail -20 ft.log; exit 1; }
grep -q "finetuning from $here/hf/gpt2-f32: weights only" ft.log || { cat ft.log; exit 1; }
"$loom" run ft.toml --set train.metrics=loom.jsonl --set checkpoint.finetune=gpt2-f32 2> ft.log ||
  { tail -20 ft.log; exit 1; }
"$mpiexec" -np 2 --oversubscribe --allow-run-as-root --mca btl self,vader "$loom" run ft.toml \
  --set comm.plugin=mpi --set parallel.tensor=2 --set train.metrics=tp2.jsonl 2> ft.log ||
  { tail -20 ft.log; exit 1; }
python3 - <<'PY'
import json
rows = {n: [json.loads(l) for l in open(n + ".jsonl") if "loss" in l] for n in ("hf", "loom", "tp2")}
assert [r["iter"] for r in rows["hf"]] == [1, 2, 3, 4], rows["hf"]  # iteration starts at 0
a, b, c = ([r["loss"] for r in rows[n]] for n in ("hf", "loom", "tp2"))
assert a == b, (a, b)
worst = max(abs(x - z) / abs(x) for x, z in zip(a, c))
assert worst <= 1e-5, (a, c)
print(f"finetune losses {[round(x, 4) for x in a]}: from HF == from its import (bitwise); "
      f"TP2 within {worst:.1e}")
PY
if "$loom" run ft.toml --set model.n_layer=3 > out.log 2>&1; then echo "n_layer 3 accepted"; exit 1
else rc=$?; fi
[ $rc = 2 ] || { echo "exit $rc, expected 2"; cat out.log; exit 1; }
grep -q "model.n_layer is 3 in the recipe but 2 in" out.log || { cat out.log; exit 1; }
echo "mismatch refused (exit 2): $(grep -m1 -o 'model.n_layer is 3 in the recipe but 2 in' out.log)"
if "$loom" run ft.toml --set checkpoint.finetune= --set checkpoint.load=gpt2-f32 > out.log 2>&1; then
  echo "resuming an import accepted"; exit 1
else rc=$?; fi
[ $rc = 2 ] && grep -q "no optimizer state (an import?); start from it with checkpoint.finetune" out.log ||
  { echo "exit $rc"; cat out.log; exit 1; }
echo "resuming an import (no optimizer state) refused (exit 2), pointing at checkpoint.finetune"
