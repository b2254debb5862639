#!/usr/bin/env bash
# Hugging Face interop against the real `transformers` (the GPU machine's python3 has it; it
# needs no GPU, only the library, and skips with exit 77 where it is missing):
#  1. GPT2LMHeadModel, LlamaForCausalLM (GQA, untied), Qwen2ForCausalLM, Qwen3ForCausalLM
#     (head_dim apart from hidden / heads), Qwen2MoeForCausalLM, Qwen3MoeForCausalLM and
#     DeepseekV3ForCausalLM, Mamba2ForCausalLM (one group: transformers' eager gated norm
#     spans all channels, mamba_ssm's and Loom's each group) and NemotronHForCausalLM (one
#     group too) from tiny random configs,
#     save_pretrained, `loom import-hf`: Loom's logits of every prompt position match
#     transformers' within 1e-4 of max |logit| (fp32);
#  2. a Loom-trained GPT, Llama, Qwen3, Qwen2-MoE-style and NemotronH-style model (its hub
#     names, backbone., which transformers renames), `loom export-hf`, from_pretrained unchanged:
#     transformers' logits match Loom's within 1e-4;
#  3. LoRA on the GPT and the Llama of 2 (`loom export-peft`): where `peft` is installed,
#     PeftModel.from_pretrained over the base's export gives Loom's LoRA logits within 1e-4
#     (skipped with a line where it is not).
#   hf_transformers.sh LOOM
set -euo pipefail
loom=$1
. "$(dirname "$0")/../support/lib.sh"
python_has torch/transformers/safetensors "import torch, transformers, safetensors"
scratch
echo "1 7 42 3 9 90 13 55 0 27 64 8" > prompt.txt
quiet=(--set backend.measure_gemm=false)

compare() {  # compare LOOM_LOGITS HF_LOGITS WHAT
  python3 - "$@" <<'PY'
import sys
from safetensors.torch import load_file
a, b = load_file(sys.argv[1])["logits"].double(), load_file(sys.argv[2])["logits"].double()
assert a.shape == b.shape, (a.shape, b.shape)
err = ((a - b).abs().max() / max(1.0, b.abs().max().item())).item()
print(f"{sys.argv[3]}: logits {tuple(a.shape)}, max |loom - transformers| / max(1, max |hf|) = {err:.2e}")
sys.exit(0 if err <= 1e-4 else 1)
PY
}

hf_logits() {  # hf_logits HF_DIR OUT: transformers' logits of prompt.txt
  python3 - "$@" <<'PY'
import sys, torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32).eval()
ids = torch.tensor([[int(t) for t in open("prompt.txt").read().split()]])
with torch.no_grad():
    save_file({"logits": m(ids).logits[0].float().contiguous()}, sys.argv[2])
PY
}

echo "== transformers -> Loom"
python3 <<'PY'
import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
GPT2LMHeadModel(GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                           initializer_range=0.2)).save_pretrained("hf-gpt2")
LlamaForCausalLM(LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             max_position_embeddings=64, rope_theta=500000.0,
                             tie_word_embeddings=False, initializer_range=0.2)).save_pretrained("hf-llama")
qwen = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            initializer_range=0.2)
moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24)
transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**qwen)).save_pretrained("hf-qwen2")
transformers.Qwen3ForCausalLM(transformers.Qwen3Config(head_dim=12, **qwen)).save_pretrained("hf-qwen3")
transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(
    shared_expert_intermediate_size=40, **moe, **qwen)).save_pretrained("hf-qwen2moe")
transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(
    head_dim=12, norm_topk_prob=True, **moe, **qwen)).save_pretrained("hf-qwen3moe")
# DeepSeek-V3 (its router bias starts at zero: transformers' 0.0 mask and Loom's -inf pick alike)
transformers.DeepseekV3ForCausalLM(transformers.DeepseekV3Config(
    vocab_size=96, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8,
    n_shared_experts=1, num_experts_per_tok=4, n_group=4, topk_group=2,
    first_k_dense_replace=1, q_lora_rank=16, kv_lora_rank=8, qk_nope_head_dim=8,
    qk_rope_head_dim=4, v_head_dim=8, max_position_embeddings=64, rope_scaling=None,
    initializer_range=0.2)).save_pretrained("hf-deepseek")
transformers.Mamba2ForCausalLM(transformers.Mamba2Config(
    vocab_size=96, hidden_size=32, num_hidden_layers=2, num_heads=8, head_dim=8, n_groups=1,
    state_size=16, chunk_size=8, initializer_range=0.2)).save_pretrained("hf-mamba2")
# NemotronH (Mamba-2, attention, squared-ReLU MLP), one group as Mamba-2's above
transformers.NemotronHForCausalLM(transformers.NemotronHConfig(
    vocab_size=96, hidden_size=32, num_hidden_layers=4, hybrid_override_pattern="M*-M",
    num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=64,
    mamba_num_heads=8, mamba_head_dim=8, n_groups=1, ssm_state_size=16, chunk_size=8,
    max_position_embeddings=64, tie_word_embeddings=False,
    initializer_range=0.2)).save_pretrained("hf-nemotronh")
PY
for m in gpt2 llama qwen2 qwen3 qwen2moe qwen3moe deepseek mamba2 nemotronh; do
  "$loom" import-hf hf-$m loom-$m
  "$loom" generate --checkpoint loom-$m --prompt "$(cat prompt.txt)" --max-new-tokens 0 \
    --logits-out loom-$m.st "${quiet[@]}" > /dev/null
  hf_logits hf-$m hf-$m.st
  compare loom-$m.st hf-$m.st "transformers $m -> loom"
done

echo "== Loom -> transformers"
{
  toml_section train iters=3 micro_batch_size=2 seq_len=16
  toml_section backend measure_gemm=false
  toml_section model n_layer=2 n_head=4 n_embd=32 max_seq_len=32
  toml_section tokenizer plugin=null vocab_size=95
  toml_section data plugin=mock
} > t.toml
for style in gpt llama qwen3 qwen2moe nemotronh; do
  train_style $style t.toml
  "$loom" generate --checkpoint trained-$style --prompt "$(cat prompt.txt)" --max-new-tokens 0 \
    --logits-out trained-$style.st "${quiet[@]}" > /dev/null
  "$loom" export-hf trained-$style trained-$style.hf
  hf_logits trained-$style.hf trained-$style.hf.st
  compare trained-$style.st trained-$style.hf.st "loom $style -> transformers"
done

echo "== Loom LoRA -> PEFT"
if ! python3 -c "import peft" 2> /dev/null; then
  echo "skipped: python3 has no peft"
  exit 0
fi
for style in gpt llama; do
  # the trained model's own recipe (its model keys), LoRA on top of its weights
  "$loom" run trained-$style/iter_*/recipe.toml "${quiet[@]}" \
    --set checkpoint.finetune=trained-$style --set checkpoint.load= \
    --set checkpoint.save=lora-$style --set model.peft=lora --set model.peft_rank=4 \
    --set model.peft_alpha=8 --set lr.max=0.05 \
    > lora-$style.log 2>&1 || { cat lora-$style.log; exit 1; }
  "$loom" generate --checkpoint lora-$style --prompt "$(cat prompt.txt)" --max-new-tokens 0 \
    --logits-out lora-$style.st "${quiet[@]}" > /dev/null
  "$loom" export-peft lora-$style lora-$style.peft
  python3 - trained-$style.hf lora-$style.peft lora-$style.hf.st <<'PY'
import sys, torch
from peft import PeftModel
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM
base = AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32)
m = PeftModel.from_pretrained(base, sys.argv[2]).eval()
ids = torch.tensor([[int(t) for t in open("prompt.txt").read().split()]])
with torch.no_grad():
    save_file({"logits": m(ids).logits[0].float().contiguous()}, sys.argv[3])
PY
  compare lora-$style.st lora-$style.hf.st "loom lora $style -> peft"
done
