#!/usr/bin/env bash
# train.cuda_graph = "step" (issue 33; Megatron's --cuda-graph-impl full_iteration) on
# backend/cpu, which lends loom.graph/1 without graphs: a launch runs the recorded body under
# the capture rules, which refuse the host's waits and copies inside it. So these runs check
# what a GPU's graph needs of the host and of the model (the micro-batches read from device
# copies, loom.microbatch-device/1; the learning rate, the loss and the norm through device
# tensors; nothing read back inside the step), and that the replayed steps give the eager
# steps' numbers: every logged number and the final checkpoint's files identical to the bit
# against train.cuda_graph = "none", for
#   1. fp32 AdamW with the clip acting, evaluations and saves between replayed steps (each
#      makes the next step record again), learned positions (uploaded once, not per step);
#   2. bf16 with f32 main parameters, fp64, Lion, SGD, recomputed activations, Llama's RoPE;
#   3. train.nan_check = "rerun" with a poisoned step after a capture (eager, and the next
#      step records again);
# and the refusals (exit 2, naming what is missing): multi-token prediction and a mixture of
# experts (loss terms the host cannot count), packed sequences, timers,
# train.grad_norm_on_device = false, and under mpirun two ranks.
#   cuda_graph.sh LOOM MPIEXEC
set -uo pipefail
loom=$1 mpiexec=${2:-}
. "$(dirname "$0")/../support/lib.sh"
scratch
{
  toml_section train seed=7 iters=12 micro_batch_size=2 global_batch_size=4 seq_len=16 \
    log_interval=2 grad_clip=0.05 cuda_graph_warmup_steps=2 eval_interval=5 eval_iters=1
  toml_section lr max=3e-3 warmup_iters=2
  toml_section optimizer plugin=adamw
  small_gpt_sections 200
} > r.toml

# same NAME ARGS...: the run with train.cuda_graph = "step" and "none", metrics and final
# checkpoints compared; $records (4: steps 3 after the warm-up, 6 after the evaluation at 5, 9
# after the save at 8, 11 after the evaluation at 10) the "step recorded" lines the graph run
# must print.
records=4
same() {
  local name=$1 mode
  shift
  for mode in step none; do
    rm -rf "ck_$name.$mode"
    "$loom" run r.toml --set "train.cuda_graph=$mode" --set "train.metrics=$name.$mode.jsonl" \
      --set "checkpoint.save=ck_$name.$mode" --set checkpoint.interval=8 "$@" \
      2> "$name.$mode.log" || { tail -5 "$name.$mode.log"; fail "$name: the run with $mode failed"; }
  done
  same_metrics "$name" "$name.step.jsonl" "$name.none.jsonl" || fail "$name: the two runs differ"
  same_state "ck_$name.step" "ck_$name.none" || fail "$name: the checkpoints differ"
  local got
  got=$(grep -c "train.cuda_graph: the step recorded" "$name.step.log")
  [ "$got" = "$records" ] || fail "$name: $got steps recorded, not $records"
  ! grep -q "train.cuda_graph" "$name.none.log" || fail "$name: none recorded a step"
}

same adamw
grep -q 'eval_loss' adamw.step.jsonl || fail "adamw: no evaluation ran between the steps"
clip_acts adamw.step.jsonl 0.05
same bf16 --set precision.dtype=bf16
same fp64 --set precision.dtype=fp64
same lion --set optimizer.plugin=lion
same sgd --set optimizer.plugin=sgd --set optimizer.momentum=0.9
same recompute --set train.recompute_granularity=full --set train.recompute_method=uniform \
  --set train.recompute_num_layers=1
same llama --set model.position=rope --set model.norm=rmsnorm --set model.activation=swiglu
# A poisoned step 7 (replayed otherwise): eager, its rerun eager, then step 8 records again.
records=5 LOOM_TEST_NAN_AT=7 same rerun --set train.nan_check=rerun
grep -q "a transient fault" rerun.step.log || fail "rerun: no rerun line"

# Refusals, before any step.
for args in "--set model.mtp_num_layers=1 --set model.position=rope" "--set model.num_experts=4" \
  "--set data.pack_sequences=true" "--set train.timers=true" \
  "--set train.grad_norm_on_device=false"; do
  # shellcheck disable=SC2086
  "$loom" run r.toml --set train.cuda_graph=step $args > refused.log 2>&1
  rc=$?
  [ $rc = 2 ] || { cat refused.log; fail "$args: exit $rc, not 2"; }
  grep -q 'train.cuda_graph = "step" needs' refused.log || { cat refused.log; fail "$args: the message"; }
  echo "refused ($args): $(grep -o 'train.cuda_graph = "step" needs.*' refused.log | cut -c1-150)"
done
if [ -n "$mpiexec" ]; then
  mpi_ranks 2 "$loom" run r.toml --set train.cuda_graph=step > refused.log 2>&1
  rc=$?
  [ $rc = 2 ] && grep -q 'train.cuda_graph = "step" needs one rank' refused.log ||
    { cat refused.log; fail "two ranks: exit $rc"; }
  echo "refused (2 ranks): one rank"
fi
