#!/usr/bin/env bash
# precision.fp8 = "delayed" (issue 39) on backend/cpu: the scales come from amax histories,
# which are model state (f32 buffers "<w>.fp8_amax_history" (3, len) and "<w>.fp8_scale" (3)
# beside each FP8 weight "<w>.weight"; rows input, weight, gradient).
#  1. The state, read back from checkpoints saved at iterations 1, 2 and 3 of a run with a
#     window of 3 steps and fp8_amax_compute_algo = "max" (the independent reader of
#     tests/model/hf/st.py): the weight row of each history holds the amax of the weight that
#     step's forward cast (the previous checkpoint's, computed here), rolled as Transformer
#     Engine rolls it (the current amax to the end, slot 0 restarted at 0); every scale is
#     the format's largest (448 for e4m3 rows, 57344 for the e5m2 gradient row) over the
#     window's largest amax, rounded once to f32.
#  2. Delayed scaling, fp32 and bf16, and with the "max" window, follows the run without FP8
#     on the 4-layer GPT for 60 iterations within fp8.sh's bound (1 % relative after the
#     warm-up) and trains (at least 90 % of its loss drop).
#  3. Resume: 30 iterations, save, 30 more: bitwise the 60 in one go (the histories and scales
#     are saved and loaded). precision.fp8 may change at a resume (as Megatron's: Transformer
#     Engine's extra state is optional): a checkpoint without the state resumed into delayed
#     FP8 starts it fresh (the log says so; iterations 31-60 then within the bound of the run
#     without FP8), and a delayed one resumed without FP8, in its layout or resharded from
#     TP2, leaves it (the log says so).
#  4. Layouts: the step's amaxes are reduced with MAX over the tensor and data x context
#     groups before each update, so every rank casts with one rank's scales: the first step
#     of DP2, TP2 (60 iterations), PP2, TP2 with sequence parallelism, CP2, DP2 with the
#     distributed optimizer and DP2 under FSDP (20 each) equals one rank's within 1e-6, and
#     each follows it within the FP8 bound (a gradient summed in another order can still
#     move a code by one step). A TP2 checkpoint resumed on
#     one rank (the state resharded, replicated) gives the TP2 run's next loss within 1e-6
#     (measured 1.4e-9; a fresh state's scales of 1 would not) and follows it within the bound.
#  5. `loom export-hf` leaves the state out (training state, not weights).
#   fp8_delayed.sh LOOM MPIEXEC [LAYOUT_ITERS]
# (LAYOUT_ITERS: the 20-iteration layouts' count; the sanitizer build's 4, as layouts.cmake's.)
set -uo pipefail
loom=$1 mpiexec=${2:-} layout_iters=${3:-20}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
scratch
fp8_curves_recipe
export OMP_NUM_THREADS=1 PYTHONPATH=$tests_dir/support

# 1. The state after iterations 1, 2 and 3.
run_curve chain --set precision.fp8=delayed --set precision.fp8_amax_history_len=3 \
  --set precision.fp8_amax_compute_algo=max --set train.iters=3 --set checkpoint.interval=1 \
  --set checkpoint.save=chain
python3 - "$here/../model/hf" <<'PY' || fail "the delayed scaling state"
import sys
sys.path.insert(0, sys.argv[1])
from st import read, floats  # an independent safetensors reader
from fp8_curves import f32

ck = {k: read(f"chain/iter_{k:07d}/model.safetensors") for k in (1, 2, 3)}
def t(k, name):
    dtype, shape, data = ck[k][name]
    return shape, list(floats(dtype, data))
weights = sorted(n[:-len(".weight")] for n in ck[1]
                 if n.endswith(".weight") and n[:-len(".weight")] + ".fp8_scale" in ck[1])
assert len(weights) == 16, weights  # 4 layers x (c_attn, c_proj, c_fc, mlp c_proj)
assert not any(n.endswith(".fp8_scale") for n in ck[1] if n.startswith(("wte", "lm_head")))
for w in weights:
    hist = {k: t(k, w + ".fp8_amax_history") for k in ck}
    scale = {k: t(k, w + ".fp8_scale") for k in ck}
    assert all(h[0] == [3, 3] and s[0] == [3] for h, s in zip(hist.values(), scale.values()))
    row = lambda k, r: hist[k][1][3 * r:3 * r + 3]
    amax = {k: f32(max(abs(v) for v in t(k, w + ".weight")[1])) for k in (1, 2)}
    # the weight row: step 2 cast iteration 1's weights, step 3 iteration 2's
    a1 = row(2, 1)[1]  # step 1's (the initial weights, which no checkpoint holds)
    assert row(1, 1) == [0.0, 0.0, a1], (w, row(1, 1), a1)
    assert row(2, 1) == [0.0, a1, amax[1]], (w, row(2, 1), amax[1])
    assert row(3, 1) == [0.0, amax[1], amax[2]], (w, row(3, 1), amax[2])
    # every row rolled, and every scale from its window: this step's amax (now the row's end)
    # and the slots before it (the previous checkpoint's, zeros before step 1)
    for k in (1, 2, 3):
        for r, largest in ((0, 448.0), (1, 448.0), (2, 57344.0)):
            before = row(k - 1, r) if k > 1 else [0.0, 0.0, 0.0]
            assert row(k, r)[:2] == [0.0, before[2]], (w, k, r, row(k, r), before)
            window = [row(k, r)[2]] + before[1:]
            got = scale[k][1][r]
            assert got == f32(largest / max(window)), (w, k, r, got, window)
    assert all(v > 0 for r in (0, 2) for v in row(3, r)[1:]), (w, hist[3])
print(f"{len(weights)} weights: histories hold the cast weights' amaxes, rolled; scales "
      "448 or 57344 over each window's largest")
PY

# 2. Curves.
run_curve fp32
run_curve bf16 --set precision.dtype=bf16
run_curve delayed --set precision.fp8=delayed
run_curve delayed_bf16 --set precision.dtype=bf16 --set precision.fp8=delayed
run_curve delayed_max --set precision.fp8=delayed --set precision.fp8_amax_history_len=16 \
  --set precision.fp8_amax_compute_algo=max
grep -q "precision.fp8 = delayed" delayed.log || fail "delayed: no line naming FP8"

# 3. Resume.
run_curve resumed --set precision.fp8=delayed --set train.iters=30 --set checkpoint.save=ck
run_curve resumed --set precision.fp8=delayed --set checkpoint.save=ck --set checkpoint.load=ck
same_metrics resume resumed.jsonl delayed.jsonl || fail "delayed: the resumed run differs"

# 3b. precision.fp8 may change at a resume: a checkpoint saved without FP8 resumed with
#     delayed scaling (its state starts fresh, the rest loads) and a delayed one resumed
#     without (its state is not loaded).
run_curve plain --set train.iters=30 --set checkpoint.save=plainck
run_curve to_fp8 --set precision.fp8=delayed --set checkpoint.save=plainck \
  --set checkpoint.load=plainck
grep -q "holds no FP8 scaling state for 32 .*start fresh" to_fp8.log ||
  { tail -5 to_fp8.log; fail "resumed into delayed FP8: no line saying its state starts fresh"; }
run_curve from_fp8 --set train.iters=62 --set checkpoint.save=fromck --set checkpoint.load=ck
grep -q "holds 32 FP8 amax histories and scales .* not loaded" from_fp8.log ||
  { tail -5 from_fp8.log; fail "resumed without FP8: no line saying its state is left"; }

# 4. Layouts, and a TP2 checkpoint resumed on one rank.
if [ -n "$mpiexec" ]; then
  layout() {
    local name=$1
    shift
    mpi_ranks 2 "$loom" run r.toml --set comm.plugin=mpi --set precision.fp8=delayed \
      --set "train.metrics=$name.jsonl" "$@" 2> "$name.log" ||
      { tail -5 "$name.log"; fail "$name failed"; }
  }
  layout dp2
  layout tp2 --set parallel.tensor=2
  # the other axes, 20 iterations each (the layouts' acceptance)
  short=(--set "train.iters=$layout_iters")
  layout pp2 --set parallel.pipeline=2 --set parallel.schedule=1f1b "${short[@]}"
  layout tp2sp --set parallel.tensor=2 --set parallel.sequence_parallel=true "${short[@]}"
  layout cp2 --set parallel.context=2 "${short[@]}"
  layout dp2dist --set parallel.data=distributed-optimizer "${short[@]}"
  layout dp2fsdp --set parallel.data=fsdp "${short[@]}"
  layout tp2_half --set parallel.tensor=2 --set train.iters=30 --set checkpoint.save=tp2ck
  run_curve tp2_resumed --set precision.fp8=delayed --set checkpoint.save=tp2one \
    --set checkpoint.load=tp2ck
  # and without FP8 (the state, resharded, not loaded)
  run_curve tp2_plain --set checkpoint.save=tp2plain --set checkpoint.load=tp2ck
  grep -q "resharding" tp2_plain.log && grep -q "FP8 amax histories and scales .* not loaded" \
    tp2_plain.log || { tail -5 tp2_plain.log; fail "TP2's delayed checkpoint without FP8"; }
fi

bound=0.01  # fp8.sh's (the issue's 1 %)
python3 - "$bound" "${mpiexec:+mpi}" "$layout_iters" <<'PY' || fail "the delayed FP8 curves"
import sys
from fp8_curves import losses, worst, check_curves, check_layouts, check_resumed
bound, mpi, short = float(sys.argv[1]), sys.argv[2] == "mpi", int(sys.argv[3])
base = {"fp32": losses("fp32.jsonl"), "bf16": losses("bf16.jsonl")}
check_curves([("delayed", "fp32"), ("delayed_max", "fp32"), ("delayed_bf16", "bf16")], base,
             bound)
# resumed into FP8 at 30: iterations 31-60 within the bound of the run without FP8
fp32, to_fp8 = losses("fp32.jsonl"), losses("to_fp8.jsonl")
assert len(losses("plain.jsonl")) == 30 and len(to_fp8) == 30, len(to_fp8)
w = worst(to_fp8, fp32[30:], 0)
print(f"resumed into delayed FP8 at 30: worst {w:.2e} against the run without FP8")
assert 0 < w <= bound, w
if mpi:
    check_layouts(losses("delayed.jsonl"),
                  [("dp2", 60), ("tp2", 60), ("pp2", short), ("tp2sp", short), ("cp2", short),
                   ("dp2dist", short), ("dp2fsdp", short)], bound, "delayed ")
    # the state came along: the first step after the load casts with TP2's scales (a fresh
    # state's scales of 1 would not)
    check_resumed("TP2's checkpoint at 30 resumed on 1 rank vs the TP2 run",
                  losses("tp2_resumed.jsonl"), losses("tp2.jsonl")[30:], bound)
PY

# 5. The Hugging Face export leaves the state out.
"$loom" export-hf ck hf > export.log 2>&1 || { tail -5 export.log; fail "export-hf"; }
python3 - "$here/../model/hf" <<'PY' || fail "export-hf of a delayed FP8 checkpoint"
import sys
sys.path.insert(0, sys.argv[1])
from st import read_dir
names = read_dir("hf")
assert names and not any("fp8" in n for n in names), sorted(names)
print(f"export-hf: {len(names)} tensors, no FP8 state")
PY
echo "fp8_delayed: ok"
