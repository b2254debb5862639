#!/usr/bin/env bash
# Mixed precision on the CPU (the same engine code runs on any backend):
#  1. bf16 follows fp32 for 50 iterations (loss within 1e-2 relative at every step);
#  2. fp16 from Megatron's initial scale 2^32: overflowing steps are skipped and the scale
#     follows Megatron's DynamicGradScaler (halve after `hysteresis` overflows in a row,
#     double after `window` clean steps), then the model trains;
#  3. fp16 (100 iterations) resumes bitwise: the loss scale and the optimizer's step count
#     live in the checkpoint;
#  4. bf16 with the distributed optimizer on 2 ranks (f32 main params sharded): memory per
#     parameter is Megatron's 6 + 12/d, it follows one bf16 rank, and resumes bitwise.
#   mixed_precision.sh LOOM MPIEXEC
set -euo pipefail
loom=$1 mpiexec=$2
. "$(dirname "$0")/../support/lib.sh"
scratch
{
  toml_section train seed=11 iters=50 micro_batch_size=2 global_batch_size=8 seq_len=16 \
    log_interval=10
  toml_section lr max=3e-3 warmup_iters=2 decay_iters=50
  gpt_sections num_documents=200 doc_length=64
} > r.toml
export OMP_NUM_THREADS=1
run() { "$loom" run r.toml "$@" 2>> log || { tail -20 log; exit 1; }; }
mpi() { mpi_ranks 2 "$loom" run r.toml --set comm.plugin=mpi "$@" 2>> log || { tail -20 log; exit 1; }; }
run --set train.metrics=fp32.jsonl
run --set precision.dtype=bf16 --set train.metrics=bf16.jsonl
fp16=(--set precision.dtype=fp16 --set precision.loss_scale_window=20 --set lr.decay_iters=100)
run "${fp16[@]}" --set train.iters=100 --set train.metrics=fp16.jsonl
run "${fp16[@]}" --set train.iters=40 --set train.metrics=fp16r.jsonl --set checkpoint.save=fp16ck
run "${fp16[@]}" --set train.iters=100 --set train.metrics=fp16r.jsonl --set checkpoint.save=fp16ck \
    --set checkpoint.load=fp16ck
rm -f log
mpi --set precision.dtype=bf16 --set parallel.data=distributed-optimizer --set train.iters=12 \
    --set train.metrics=dist.jsonl --set checkpoint.save=dist12
grep -q "memory per parameter on this rank: 2.00 (param) + 4.00 (grad) + 2.00 (f32 main param) + 4.00 (optimizer state) = 12.00 bytes" log ||
  { grep "memory per" log; echo "bf16 + distributed optimizer: not 6 + 12/2 bytes per parameter"; exit 1; }
mpi --set precision.dtype=bf16 --set parallel.data=distributed-optimizer --set train.iters=6 \
    --set train.metrics=distr.jsonl --set checkpoint.save=dist6
mpi --set precision.dtype=bf16 --set parallel.data=distributed-optimizer --set train.iters=12 \
    --set train.metrics=distr.jsonl --set checkpoint.save=dist6 --set checkpoint.load=dist6
"$loom" checkpoint diff dist12 dist6 --rtol 0
python3 - <<'PY'
import json, sys
def rows(f): return [json.loads(l) for l in open(f) if '"loss"' in l]
fp32, bf16, fp16 = rows("fp32.jsonl"), rows("bf16.jsonl"), rows("fp16.jsonl")
worst = max(abs(a["loss"] - b["loss"]) / a["loss"] for a, b in zip(fp32, bf16))
assert len(bf16) == 50 and worst <= 1e-2, f"bf16 vs fp32: worst relative loss difference {worst}"
print(f"bf16 follows fp32 over 50 iterations: worst relative loss difference {worst:.2e}")

# Megatron's DynamicGradScaler, replayed from the logged overflows
scale, hyst, clean, window = 2.0**32, 2, 0, 20
for r in fp16:
    assert r["loss_scale"] == scale, (r["iter"], r["loss_scale"], scale)
    if r["skipped"]:
        clean = 0
        hyst -= 1
        if hyst <= 0:
            scale, hyst = max(scale / 2, 1.0), 2
    else:
        clean += 1
        if clean == window:
            clean, hyst, scale = 0, 2, scale * 2
skipped = sum(r["skipped"] for r in fp16)
assert 0 < skipped < 60, skipped
assert fp16[-1]["loss"] < fp16[0]["loss"] - 0.3, (fp16[0]["loss"], fp16[-1]["loss"])
print(f"fp16: {skipped} overflowing steps skipped, the scale follows Megatron's rule "
      f"(2^32 -> {fp16[-1]['loss_scale']:g}); loss {fp16[0]['loss']:.3f} -> {fp16[-1]['loss']:.3f}")

resumed = rows("fp16r.jsonl")
assert [r["iter"] for r in resumed] == list(range(1, 101))
for a, b in zip(fp16, resumed):
    assert (a["loss"], a["loss_scale"], a["skipped"]) == (b["loss"], b["loss_scale"], b["skipped"]), (a, b)
print("fp16 resumed at 40 is identical to the straight run (loss, scale, skips)")

dist, distr = rows("dist.jsonl"), rows("distr.jsonl")
worst = max(abs(a["loss"] - b["loss"]) / a["loss"] for a, b in zip(bf16, dist))
assert worst <= 1e-2, f"bf16 2 ranks vs 1: {worst}"
assert [(r["loss"], r["grad_norm"]) for r in dist] == [(r["loss"], r["grad_norm"]) for r in distr]
print(f"bf16 + distributed optimizer on 2 ranks follows 1 rank (worst {worst:.2e}) and resumes bitwise")
PY
