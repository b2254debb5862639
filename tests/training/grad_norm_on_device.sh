#!/usr/bin/env bash
# train.grad_norm_on_device (issue 33's step without a host wait before the update): the
# optimizer clips with the norm's squares on the device (loom.opt-clip/1, summed by the
# backend's loom.sum-squares-total/1) and the host reads the norm after the update is
# enqueued. The reference is the same run with the host reading the norm first
# (train.grad_norm_on_device = false): every logged number and the final checkpoint's files
# must be identical to the bit, for
#   1. AdamW with clipping active on every step (grad_clip below every norm), fp32 and fp64;
#      Lion and SGD with momentum; bf16 (f32 main parameters);
#   2. fp16's dynamic loss scale, whose first steps overflow (the device skips them);
#   3. train.nan_check with NaN gradients injected: skip, rerun (a transient fault) and stop
#      (the message, the exit code and the saved state);
#   4. under mpirun: DP2 with the distributed optimizer (the norm summed over the world) and a
#      mixture of experts at EP2 (dense and expert squares over their own groups), and PP2
#      (whose schedule adds the losses up on the host).
# The losses too (ABI 2.28): backend/cpu lists loom.ce-loss-total/1, so the true runs keep the
# cross-entropy's sums on the device (loom.device-losses/1, the "lm" and multi-token
# prediction's "mtp" terms; a mixture of experts' terms on the host beside them) and read them
# with the norm after the update; the logged losses must still equal the host's to the bit.
# And the schedule (ABI 2.30): the three optimizers list loom.opt-schedule/1, so the true runs'
# updates read the learning rate (warming up, then decaying) and the step count (which a
# skipped step does not advance) from a device tensor, not from their args.
#   grad_norm_on_device.sh LOOM MPIEXEC
set -uo pipefail
loom=$1 mpiexec=${2:-}
. "$(dirname "$0")/../support/lib.sh"
scratch
{
  toml_section train seed=7 iters=12 micro_batch_size=2 global_batch_size=4 seq_len=16 \
    log_interval=4 grad_clip=0.05
  toml_section lr max=3e-3 warmup_iters=2
  toml_section optimizer plugin=adamw
  small_gpt_sections 200
} > r.toml
# same NAME ARGS...: the run with ARGS both ways (under $launch when set), then their metrics
# (every number but the clocks and memory) and final checkpoints compared.
launch=()
same() {
  local name=$1
  shift
  same_both_ways train.grad_norm_on_device "$name" r.toml "$@"
  grep -q "train.grad_norm_on_device: the gradient norm and the clip, the learning rate and the step count (loom.opt-schedule/1) stay on the device; the host reads the norm and the losses (loom.device-losses/1)" \
    "$name.true.log" || fail "$name: the device path was not taken"
  ! grep -q "stay on the device" "$name.false.log" || fail "$name: false took the device path"
}

same adamw
clip_acts adamw.true.jsonl 0.05
same fp64 --set precision.dtype=fp64
same lion --set optimizer.plugin=lion
same sgd --set optimizer.plugin=sgd --set optimizer.momentum=0.9
same bf16 --set precision.dtype=bf16
same mtp --set model.mtp_num_layers=1 --set model.position=rope
# From 2^25 with no hysteresis: the first 5 steps overflow, halving the scale each time.
same fp16 --set precision.dtype=fp16 --set train.grad_clip=1 \
  --set precision.initial_loss_scale=33554432 --set precision.hysteresis=1
grep -q "gradients overflowed" fp16.true.log || fail "fp16: no step overflowed"
[ "$(grep -c 'gradients overflowed' fp16.true.log)" = "$(grep -c 'gradients overflowed' fp16.false.log)" ] ||
  fail "fp16: the overflows differ"
LOOM_TEST_NAN_AT=5:always same skip --set train.nan_check=skip
grep -q 'update skipped (train.nan_check = "skip"; 1 skipped so far)' skip.true.log ||
  fail "skip: no line"
LOOM_TEST_NAN_AT=5 same rerun --set train.nan_check=rerun
grep -q "a transient fault" rerun.true.log || fail "rerun: no line"
for mode in true false; do
  LOOM_TEST_NAN_AT=5:always "$loom" run r.toml --set train.grad_norm_on_device=$mode \
    --set checkpoint.save=ck_stop.$mode 2> stop.$mode.log
  rc=$?
  [ $rc = 1 ] || fail "stop ($mode): exit $rc"
  grep -q "iteration 5: loss .*, gradient norm nan is not finite; first non-finite gradient: wte on rank 0; the last good state (iteration 4) is saved under ck_stop.$mode" \
    stop.$mode.log || fail "stop ($mode): the message"
done
same_state ck_stop.true ck_stop.false || fail "stop: the saved states differ"
echo "stop: exit 1 naming wte, iteration 4 saved, the same files"

if [ -n "$mpiexec" ]; then
  launch=(mpi_ranks 2)
  same dp2dist --set parallel.data=distributed-optimizer
  same ep2 --set model.num_experts=4 --set model.moe_router_topk=2 \
    --set model.activation=swiglu --set model.moe_ffn_hidden_size=24 --set parallel.expert=2
  same pp2 --set parallel.pipeline=2
fi
echo "train.grad_norm_on_device: every run identical to the host's norm"
