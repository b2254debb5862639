#!/usr/bin/env bash
# precision.fp8 (issue 39) on backend/cpu, whose loom.fp8/1 emulates e4m3/e5m2 to the bit:
#  1. tensorwise and blockwise, with fp32 and bf16 compute, follow the run without FP8 on a
#     4-layer GPT for 60 iterations (every logged loss after the warm-up within $bound of
#     it, relative: 1 %), as tensorwise and delayed do on a 4-layer BERT; fp8_first_last_bf16
#     keeps layers out (another curve, as close); tensorwise and delayed (a 16-step window)
#     on a 2 + 2-layer T5 (its encoder, decoder and cross-attention projections); each FP8
#     run's loss falls by at least 90 % of the drop of the run without it;
#  2. the run resumes bitwise (tensorwise and blockwise keep no state: every scale comes from
#     its tensor), as T5's delayed one does (its encoder's and decoder's histories saved);
#  3. data parallelism (2 ranks): its first step equals one rank's (1e-6: each micro-batch's
#     tensors, and so their scales, are the same wherever it runs), then follows it within the
#     FP8 bound: a gradient summed in another order moves a weight by an f32 ulp, which can
#     move a code across a rounding boundary, one FP8 step (2^-3 relative) for that element;
#     tensor parallelism (2 ranks) within the same bound (each rank scales its own weight
#     shard, as Transformer Engine does without an amax reduction); T5 under delayed
#     scaling, DP2 and TP2, one rank's first step within 1e-6, then within the bound;
#  4. `loom validate --memory` walks an FP8 run (backend/meta lends loom.fp8/1); refusals,
#     exit 2 with the reason: fp64, first/last layers that leave none in FP8. (Every shipped
#     backend lends loom.fp8/1, so the refusal of one that does not is not exercised here.
#     Delayed scaling, whose scales are state: fp8_delayed.sh; a mixture of experts:
#     fp8_moe.sh.)
#   fp8.sh LOOM MPIEXEC
set -uo pipefail
loom=$1 mpiexec=${2:-}
. "$(dirname "$0")/../support/lib.sh"
scratch
fp8_curves_recipe
export OMP_NUM_THREADS=1 PYTHONPATH=$tests_dir/support
run_curve fp32
run_curve bf16 --set precision.dtype=bf16
run_curve tensorwise --set precision.fp8=tensorwise
run_curve blockwise --set precision.fp8=blockwise
run_curve tensorwise_bf16 --set precision.dtype=bf16 \
  --set precision.fp8=tensorwise
run_curve blockwise_bf16 --set precision.dtype=bf16 --set precision.fp8=blockwise
run_curve e4m3 --set precision.fp8=tensorwise --set precision.fp8_format=e4m3
run_curve first_last --set precision.fp8=tensorwise \
  --set precision.fp8_first_last_bf16=true
grep -q "precision.fp8 = tensorwise" tensorwise.log || fail "tensorwise: no line naming FP8"
# BERT (post-norm layers; its pooler and heads keep the compute dtype), 4 layers.
{
  toml_section train seed=5 iters=60 micro_batch_size=2 global_batch_size=8 seq_len=16 \
    log_interval=1
  toml_section lr max=3e-3 warmup_iters=5 decay_iters=60
  toml_section backend measure_gemm=false threads=1
  toml_section model plugin=bert n_layer=4 n_head=4 n_embd=32 max_seq_len=16
  bert_data_sections
} > bert.toml
curve_recipe=bert.toml run_curve bert
curve_recipe=bert.toml run_curve bert_tensorwise --set precision.fp8=tensorwise
curve_recipe=bert.toml run_curve bert_delayed --set precision.fp8=delayed
# T5: its encoder's and decoder's layers, cross-attention's projections among them, 2 + 2
# layers; delayed scaling's state over both stacks (first/last bf16 per stack).
{
  toml_section train seed=5 iters=60 micro_batch_size=2 global_batch_size=8 seq_len=32 \
    log_interval=1
  toml_section lr max=3e-3 warmup_iters=5 decay_iters=60
  toml_section backend measure_gemm=false threads=1
  toml_section model plugin=t5 n_layer=2 decoder_layers=2 n_head=2 n_embd=32 max_seq_len=32 \
    decoder_seq_len=12
  toml_section tokenizer plugin=wordpiece "vocab_file=$tests_dir/data/data/bert_masking/vocab.txt" \
    vocab_extra_ids=10
  toml_section data plugin=t5 "prefix=$tests_dir/data/data/bert_masking/sentences" split=100,0,0 \
    decoder_seq_len=12
} > t5.toml
curve_recipe=t5.toml run_curve t5
curve_recipe=t5.toml run_curve t5_tensorwise --set precision.fp8=tensorwise
# Delayed with a 16-step "max" window: Megatron's default (1 step, most_recent) reached
# 1.2e-2 at iteration 56 here (2026-12-08; margin 1: 4.3e-3, a 4-step window 5.8e-3): this
# T5's gradient amaxes jump between steps faster than one step's history follows, and the
# casts saturate, what the window is for.
t5_delayed=(--set precision.fp8=delayed --set precision.fp8_amax_history_len=16
  --set precision.fp8_amax_compute_algo=max)
curve_recipe=t5.toml run_curve t5_delayed "${t5_delayed[@]}"
# (stopped at 30 by exit_interval: dataset/t5 draws its samples for the run's whole length)
curve_recipe=t5.toml run_curve t5_resumed "${t5_delayed[@]}" --set train.exit_interval=30 \
  --set checkpoint.save=t5ck
curve_recipe=t5.toml run_curve t5_resumed "${t5_delayed[@]}" --set checkpoint.save=t5ck \
  --set checkpoint.load=t5ck
same_metrics t5_resume t5_resumed.jsonl t5_delayed.jsonl || fail "T5 delayed: the resumed run differs"
# The memory walk-through (backend/meta, which lends loom.fp8/1 computing nothing) takes it too.
"$loom" validate r.toml --memory --set precision.fp8=blockwise > validate.log 2>&1 ||
  { tail -5 validate.log; fail "validate --memory with precision.fp8"; }
grep -q "memory per rank" validate.log || fail "validate --memory: no memory table"

# 2. Resume: 30 iterations, save, 30 more; against the 60 in one go.
run_curve resumed --set precision.fp8=blockwise --set train.iters=30 --set checkpoint.save=ck
run_curve resumed --set precision.fp8=blockwise --set checkpoint.save=ck --set checkpoint.load=ck
same_metrics resume resumed.jsonl blockwise.jsonl || fail "blockwise: the resumed run differs"

# 3. Layouts.
if [ -n "$mpiexec" ]; then
  mpi_ranks 2 "$loom" run r.toml --set comm.plugin=mpi --set precision.fp8=tensorwise \
    --set train.metrics=dp2.jsonl 2> dp2.log || { tail -5 dp2.log; fail "dp2 failed"; }
  mpi_ranks 2 "$loom" run r.toml --set comm.plugin=mpi --set precision.fp8=tensorwise \
    --set parallel.tensor=2 --set train.metrics=tp2.jsonl 2> tp2.log ||
    { tail -5 tp2.log; fail "tp2 failed"; }
  # T5 under delayed scaling (its amaxes reduced): DP2, TP2; 60 iterations (dataset/t5's
  # samples depend on the run's length: a shorter run draws others)
  for tensor in 1 2; do
    mpi_ranks 2 "$loom" run t5.toml --set comm.plugin=mpi "${t5_delayed[@]}" \
      --set parallel.tensor=$tensor --set train.metrics=t5_tp$tensor.jsonl \
      2> t5_tp$tensor.log || { tail -5 t5_tp$tensor.log; fail "T5 on 2 ranks, tensor=$tensor"; }
  done
fi

# The bound: the issue's 1 % (its llama-1b curve against bf16). Measured on this model
# (2026-12-07): 1.3e-3 at worst over the recipes, formats and layouts.
bound=0.01
python3 - "$bound" "${mpiexec:+mpi}" <<'PY' || fail "the FP8 curves"
import sys
from fp8_curves import losses, worst, check_curves, check_layouts
bound, mpi = float(sys.argv[1]), sys.argv[2] == "mpi"
base = {k: losses(k + ".jsonl") for k in ("fp32", "bf16", "bert", "t5")}
check_curves([("tensorwise", "fp32"), ("blockwise", "fp32"), ("e4m3", "fp32"),
              ("first_last", "fp32"), ("tensorwise_bf16", "bf16"), ("blockwise_bf16", "bf16"),
              ("bert_tensorwise", "bert"), ("bert_delayed", "bert"), ("t5_tensorwise", "t5"),
              ("t5_delayed", "t5")], base, bound)
if mpi:
    one, tp2 = losses("tensorwise.jsonl"), losses("tp2.jsonl")
    check_layouts(one, [("dp2", 60)], bound, "tensorwise ")
    check_layouts(losses("t5_delayed.jsonl"), [("t5_tp1", 60), ("t5_tp2", 60)], bound,
                  "delayed ")
    t = worst(tp2, one)  # (each rank scales its own shard: not one rank's from the start)
    print(f"tensorwise TP2 vs 1 rank: {t:.2e} after the warm-up")
    assert len(tp2) == 60 and t <= bound, f"TP2: {t}"
PY

# 4. Refusals.
refused() {
  local needle=$1
  shift
  "$loom" run r.toml --set train.iters=2 "$@" > refused.log 2>&1
  local rc=$?
  [ $rc = 2 ] || { cat refused.log; fail "$*: exit $rc, not 2"; }
  grep -qF "$needle" refused.log || { cat refused.log; fail "$*: no \"$needle\""; }
  echo "refused ($*): $(grep -oF "$needle" refused.log | head -1)"
}
refused 'fp64 is the layouts' --set precision.fp8=tensorwise --set precision.dtype=fp64
refused 'none left in FP8' --set precision.fp8=tensorwise --set precision.fp8_first_last_bf16=true \
  --set precision.fp8_layers_at_start_bf16=2 --set precision.fp8_layers_at_end_bf16=2
echo "fp8: ok"
