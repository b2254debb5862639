#!/usr/bin/env bash
# precision.fp8 with a mixture of experts (issue 39) on backend/cpu: each routed expert's
# GEMMs are an FP8 linear layer over its rows (its rows and its weight cast with their own
# scales, as Transformer Engine's grouped linear layer casts each GEMM's tensors), the shared
# expert's those of a dense layer; the router and its gate keep the compute dtype. On the
# 4-layer GPT with 4 experts (top 2), a shared expert and the balancing loss:
#  1. Delayed scaling's state is per expert: "<w>.fp8_amax_history" (E, 3, len) and
#     "<w>.fp8_scale" (E, 3) beside each expert weight (E, out, in), split over the expert
#     group as the weight is; none beside the router. Read back (tests/model/hf/st.py) from
#     checkpoints at iterations 1 and 2 of a window of 2 ("max"): expert e's weight row at 2
#     holds the amax of W_e as iteration 1's checkpoint holds it, and every expert's scales
#     are the format's largest over its own window.
#  2. Tensorwise, blockwise and delayed follow the run without FP8 for 60 iterations within
#     fp8.sh's bound (1 % relative after the warm-up) and train. (fp32 compute: a mixture of
#     experts refuses bf16 for now, the GPU coverage issue's part.)
#  3. Delayed resumes bitwise.
#  4. Layouts (delayed; each expert's amaxes MAX-reduced over the tensor group and the ranks
#     that hold it): DP2, EP2, TP2 (60 iterations) and EP2 x TP2 with the experts split over
#     the tensor group (LAYOUT_ITERS): the first step equals one rank's within 1e-6, then
#     follows it within the bound. An EP2 checkpoint resumed on one rank (the expert state
#     resharded: each rank's (2, 3, len) into (4, 3, len)) gives the EP2 run's next loss
#     within 1e-6. Tensorwise under EP2 stays within the bound but is not one rank's from the
#     first step: an expert's rows from both ranks are cast together (one amax over both
#     micro-batches), as current scaling without an amax reduction does.
#   fp8_moe.sh LOOM MPIEXEC [LAYOUT_ITERS]
set -uo pipefail
loom=$1 mpiexec=${2:-} layout_iters=${3:-20}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
scratch
fp8_curves_recipe num_experts=4 moe_router_topk=2 moe_shared_expert_intermediate_size=64 \
  moe_aux_loss_coeff=1e-2
export OMP_NUM_THREADS=1 PYTHONPATH=$tests_dir/support

# 1. The state after iterations 1 and 2.
run_curve chain --set precision.fp8=delayed --set precision.fp8_amax_history_len=2 \
  --set precision.fp8_amax_compute_algo=max --set train.iters=2 --set checkpoint.interval=1 \
  --set checkpoint.save=chain
python3 - "$here/../model/hf" <<'PY' || fail "the experts' delayed scaling state"
import sys
sys.path.insert(0, sys.argv[1])
from st import read, floats  # an independent safetensors reader
from fp8_curves import f32

ck = {k: read(f"chain/iter_{k:07d}/model.safetensors") for k in (1, 2)}
def t(k, name):
    dtype, shape, data = ck[k][name]
    return shape, list(floats(dtype, data))
experts = sorted(n[:-len(".weight")] for n in ck[1] if ".experts." in n and n.endswith(".weight"))
assert len(experts) == 8, experts  # 4 layers x (c_fc, c_proj)
assert not any("router" in n and "fp8" in n for n in ck[1]), "state beside the router"
# 4 layers x (attention's c_attn and c_proj, the shared expert's c_fc and c_proj, 2 experts')
assert sum(n.endswith(".fp8_scale") for n in ck[1]) == 24, sorted(ck[1])
for w in experts:
    shape, weight = t(1, w + ".weight")
    E, per = shape[0], shape[1] * shape[2]
    hist = {k: t(k, w + ".fp8_amax_history") for k in ck}
    scale = {k: t(k, w + ".fp8_scale") for k in ck}
    assert hist[1][0] == [E, 3, 2] and scale[1][0] == [E, 3], (w, hist[1][0], scale[1][0])
    for e in range(E):
        row = lambda k, r: hist[k][1][6 * e + 2 * r:6 * e + 2 * r + 2]
        amax = f32(max(abs(v) for v in weight[e * per:(e + 1) * per]))
        # step 2 cast iteration 1's W_e, rolled to the end of the row; step 1 the initial one
        assert row(2, 1) == [0.0, amax], (w, e, row(2, 1), amax)
        for k in (1, 2):
            for r, largest in ((0, 448.0), (1, 448.0), (2, 57344.0)):
                before = row(k - 1, r)[1] if k > 1 else 0.0
                got = scale[k][1][3 * e + r]
                assert got == f32(largest / max(row(k, r)[1], before)), (w, e, k, r, got)
    # each expert its own: the weight rows differ between experts
    assert len({tuple(hist[2][1][6 * e + 2:6 * e + 4]) for e in range(E)}) == E, (w, hist[2])
print(f"{len(experts)} expert weights: (E, 3, 2) histories holding each expert's own weight "
      "amax, (E, 3) scales from each expert's window")
PY

# 2. Curves.
run_curve fp32
run_curve tensorwise --set precision.fp8=tensorwise
run_curve blockwise --set precision.fp8=blockwise
run_curve delayed --set precision.fp8=delayed

# 3. Resume.
run_curve resumed --set precision.fp8=delayed --set train.iters=30 --set checkpoint.save=ck
run_curve resumed --set precision.fp8=delayed --set checkpoint.save=ck --set checkpoint.load=ck
same_metrics resume resumed.jsonl delayed.jsonl || fail "delayed MoE: the resumed run differs"

# 4. Layouts, and an EP2 checkpoint resumed on one rank.
if [ -n "$mpiexec" ]; then
  layout() {
    local np=$1 name=$2
    shift 2
    mpi_ranks "$np" "$loom" run r.toml --set comm.plugin=mpi --set precision.fp8=delayed \
      --set "train.metrics=$name.jsonl" "$@" 2> "$name.log" ||
      { tail -5 "$name.log"; fail "$name failed"; }
  }
  layout 2 dp2
  layout 2 ep2 --set parallel.expert=2
  layout 2 tp2 --set parallel.tensor=2
  layout 4 ep2tp2 --set parallel.expert=2 --set parallel.tensor=2 --set parallel.expert_tensor=2 \
    --set "train.iters=$layout_iters"
  layout 2 ep2_tensorwise --set parallel.expert=2 --set precision.fp8=tensorwise
  layout 2 ep2_half --set parallel.expert=2 --set train.iters=30 --set checkpoint.save=ep2ck
  python3 - "$here/../model/hf" <<'PY' || fail "EP2's expert state"
import sys
sys.path.insert(0, sys.argv[1])
from st import read
for r in (0, 1):
    ck = read(f"ep2ck/iter_0000030/model-ep{r:02d}.safetensors")
    shape = ck["h.0.moe.experts.c_fc.fp8_amax_history"][1]
    assert shape == [2, 3, 1], shape  # this expert rank's 2 of the 4
print("EP2's checkpoint: each expert rank holds its experts' (2, 3, 1) histories")
PY
  run_curve ep2_resumed --set precision.fp8=delayed --set checkpoint.save=ep2one \
    --set checkpoint.load=ep2ck
fi

bound=0.01  # fp8.sh's (the issue's 1 %)
python3 - "$bound" "${mpiexec:+mpi}" "$layout_iters" <<'PY' || fail "the MoE FP8 curves"
import sys
from fp8_curves import losses, worst, check_curves, check_layouts, check_resumed
bound, mpi, short = float(sys.argv[1]), sys.argv[2] == "mpi", int(sys.argv[3])
check_curves([("tensorwise", "fp32"), ("blockwise", "fp32"), ("delayed", "fp32")],
             {"fp32": losses("fp32.jsonl")}, bound, "MoE ")
if mpi:
    check_layouts(losses("delayed.jsonl"), [("dp2", 60), ("ep2", 60), ("tp2", 60),
                                            ("ep2tp2", short)], bound, "MoE delayed ")
    tw, ep2tw = losses("tensorwise.jsonl"), losses("ep2_tensorwise.jsonl")
    w = worst(ep2tw, tw, 0)
    print(f"MoE tensorwise EP2 vs 1 rank: first step {abs(ep2tw[0] - tw[0]) / tw[0]:.2e}, "
          f"worst {w:.2e}")
    assert w <= bound, f"tensorwise EP2: {w}"
    check_resumed("EP2's checkpoint at 30 resumed on 1 rank vs the EP2 run",
                  losses("ep2_resumed.jsonl"), losses("ep2.jsonl")[30:], bound)
PY
echo "fp8_moe: ok"
