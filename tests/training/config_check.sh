#!/usr/bin/env bash
# `loom validate` refuses whatever `loom run` refuses for a configuration reason (issue 17):
# every plugin's check_config (ABI 2.15) runs the same checks as its create. For each case,
# `run` and `validate` both exit 2 with the same message; layout-dependent cases compare
# `validate --world N` with a run under mpirun.
#   config_check.sh LOOM MPIEXEC
set -uo pipefail
loom=$1 mpiexec=$2
. "$(dirname "$0")/../support/lib.sh"
scratch
{
  toml_section train seed=1 iters=1 micro_batch_size=2 seq_len=32
  gpt_sections max_seq_len=32 num_documents=50 doc_length=64
} > r.toml
fail() { echo "FAIL: $*"; exit 1; }
n=0
# same WORLD WANT SETS...: run (under mpirun when WORLD > 1) and validate --world WORLD exit 2
# with one error line that holds WANT, and the same line.
same() {
  local world=$1 want=$2
  shift 2
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  if [ "$world" = 1 ]; then
    "$loom" run r.toml "${sets[@]}" > run.txt 2>&1
  else
    "$mpiexec" -np "$world" "$loom" run r.toml --set comm.plugin=mpi "${sets[@]}" > run.txt 2>&1
  fi
  local rc_run=$?
  "$loom" validate r.toml --world "$world" "${sets[@]}" > val.txt 2>&1
  local rc_val=$?
  local e_run e_val
  e_run=$(grep -m1 "loom: error:" run.txt | sed 's/rank [0-9]*: //')
  e_val=$(grep -m1 "loom: error:" val.txt)
  [ "$rc_val" = 2 ] || { cat val.txt; fail "validate exit $rc_val for $*"; }
  [ "$world" = 1 ] && [ "$rc_run" != 2 ] && { tail -3 run.txt; fail "run exit $rc_run for $*"; }
  [ "$world" != 1 ] && [ "$rc_run" = 0 ] && fail "run exit 0 for $*"
  [[ "$e_val" == *"$want"* ]] || fail "validate said '$e_val' for $*; expected '$want'"
  [ "$e_run" = "$e_val" ] || fail "run said '$e_run', validate '$e_val' for $*"
  n=$((n + 1))
  echo "ok: $* -> ${e_val#loom: error: }"
}
same 1 "n_embd (32) must be a multiple of n_head (7)" model.n_head=7
same 1 "seq_len 64 exceeds max_seq_len 32" train.seq_len=64
same 1 "n_head (4) must be a multiple of n_kv_head (3)" model.n_kv_head=3
same 1 "needs an even head dim, got 9" model.position=rope model.n_embd=36
same 1 "moe_router_topk = 5 exceeds num_experts = 4" model.num_experts=4 model.moe_router_topk=5
same 1 "moe_router_pre_softmax applies to the softmax score function only" model.num_experts=4 \
  model.moe_router_pre_softmax=true model.moe_router_score_function=sigmoid
same 1 "moe_router_enable_expert_bias biases the sigmoid scores" model.num_experts=4 \
  model.moe_router_enable_expert_bias=true
same 1 "a mixture of experts runs in fp32" model.num_experts=4 precision.dtype=bf16
same 2 "a fully sharded strategy (parallel.data = \"fsdp\") with a tied embedding across pipeline stages" \
  parallel.data=fsdp parallel.pipeline=2
same 2 "n_head = 3 is not divisible by tensor = 2" model.n_head=3 model.n_embd=36 parallel.tensor=2
same 2 "ffn_hidden = 31 is not divisible by tensor = 2" model.ffn_hidden=31 parallel.tensor=2
same 2 "n_layer = 3 is not divisible by pipeline (2) x virtual_stages (1) = 2 stages" model.n_layer=3 parallel.pipeline=2
same 2 "with virtual pipeline stages (parallel.virtual_stages > 1) is not implemented" \
  parallel.data=fsdp parallel.pipeline=2 parallel.virtual_stages=2 parallel.schedule=interleaved-1f1b \
  model.tie_embeddings=false \
  model.n_layer=4 train.micro_batch_size=1 train.global_batch_size=2
same 2 "train.seq_len = 30 is not divisible by 2 x context = 4" parallel.context=2 \
  train.seq_len=30
same 2 "runs causal GPT, Llama and mixture-of-experts models for now" parallel.context=2 model.attention_window=8
same 2 "model.num_experts = 3 is not divisible by expert = 2" model.num_experts=3 \
  model.moe_router_topk=1 parallel.expert=2
echo "config_check: $n refusals, validate = run for each"
