#!/usr/bin/env bash
# The zero-bubble schedules through `loom parity` (issue 40): ZB-H1, ZB-V and DualPipeV (the
# last two with their V of two chunks a rank) at PP2 and PP4 match 1 rank over 20 iterations,
# in fp64 (1e-9) and fp32 (1e-5), for a GPT-2-style model, a Llama-style one (RMSNorm,
# SwiGLU, RoPE, GQA) and a mixture of experts (4 experts, top-2, balancing and z losses). The
# models are the quick-start ones shrunk to 8 layers of width 16 with untied embeddings (a V
# puts the first and last stage on one rank), so that PP4's V has a layer a stage.
#   parity_schedules.sh LOOM MPIEXEC [ITERS [DTYPES]]   (ITERS: 20, DTYPES: "fp64 fp32"; the sanitizer
#   build passes 3 and fp64: it looks for memory errors, and fp32 takes the same paths)
set -uo pipefail
loom=$1 mpiexec=$2 iters=${3:-20} dtypes=${4:-fp64 fp32}
. "$(dirname "$0")/../support/lib.sh"
parity_scratch
small=(--iters "$iters" --mpiexec "$mpiexec" --set model.n_layer=8 --set model.n_head=2
       --set model.n_embd=16 --set model.max_seq_len=16 --set model.tie_embeddings=false
       --set train.seq_len=16 --set train.micro_batch_size=1 --set train.global_batch_size=8
       --set backend.threads=1 --set backend.measure_gemm=false --set train.eval_interval=0
       --set "data.path=$dir/docs.jsonl")
layouts=pp2+zbh1,pp4+zbh1,pp2+zbv,pp4+zbv,pp2+dualpipev,pp4+dualpipev
cd "$tests_dir/.."
llama=(--set model.norm=rmsnorm --set model.activation=swiglu --set model.position=rope
       --set model.n_head=4 --set model.n_kv_head=2 --set model.bias=false)
moe=(--set model.n_kv_head=2 --set model.num_experts=4 --set model.moe_ffn_hidden_size=16)
for dtype in $dtypes; do
  parity_layouts gpt recipes/quickstart.toml "$layouts" 6 $dtype
  parity_layouts llama recipes/quickstart.toml "$layouts" 6 $dtype "${llama[@]}"
  parity_layouts moe recipes/moe-quickstart.toml "$layouts" 6 $dtype "${moe[@]}"
done
echo "parity: ZB-H1, ZB-V and DualPipeV at PP2 and PP4 match 1 rank for GPT, Llama and MoE"
