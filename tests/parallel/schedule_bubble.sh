#!/usr/bin/env bash
# The bubble `loom schedule show` prints is the idle time a traced run measures, at P = 4
# pipeline ranks and M = 8 micro-batches, for 1F1B, ZB-H1, ZB-V and DualPipeV, within 10 % of
# the step. The runs are `loom run` under mpirun (comm/mpi, schedule/pipeline, the engine's
# trace) of model/paced (tests/parallel/plugins/paced_model.cpp), whose forward, input
# backward and weight backward of a rank's share of the model each take 30 ms (15 ms a chunk
# in a V) and compute nothing: four ranks wait on the clock, so the measurement holds on a
# machine with fewer cores than ranks (CI has two).
# With F = B = W the printed bubbles are 1F1B's (p-1)/(m+p-1) = 27.3 %, ZB-H1's
# (p-1)/(3m+p-1) = 11.1 %, and what ZB-V's and DualPipeV's own timelines give. Also: the
# measured step of each against 1F1B's, printed (docs/performance.md has the numbers).
#   schedule_bubble.sh LOOM MPIEXEC PACED_DIR
set -euo pipefail
loom=$1 mpiexec=$2
export LOOM_PLUGIN_PATH=$3
. "$(dirname "$0")/../support/lib.sh"
scratch
{
  toml_section train seed=1 iters=3 micro_batch_size=1 global_batch_size=8 seq_len=8 \
    log_interval=1 eval_interval=0 schedule_trace_iter=3
  toml_section lr max=1e-3
  toml_section backend plugin=cpu measure_gemm=false threads=1
  toml_section comm plugin=mpi
  toml_section parallel pipeline=4
  toml_section model plugin=paced forward_ms=30 backward_ms=30 weight_ms=30
  toml_section tokenizer plugin=byte
  toml_section data plugin=mock num_documents=64 doc_length=48
  toml_section checkpoint interval=0
} > r.toml
# Waiting ranks yield their core to ranks whose wait has ended (OpenMPI's busy polling would
# otherwise delay a woken rank by a scheduler slice on a machine with fewer cores than ranks).
export OMPI_MCA_mpi_yield_when_idle=1
for s in 1f1b zb-h1 zb-v dualpipev; do
  v=() extra=()  # the V schedules: two chunks a rank
  case $s in zb-v | dualpipev) v=(-v 2) extra=(--set parallel.virtual_stages=2) ;; esac
  "$mpiexec" -n 4 "$loom" run r.toml --set parallel.schedule=$s --set train.schedule_trace=$s \
    "${extra[@]}" > $s.log 2>&1 || { tail -20 $s.log; fail "the $s run failed"; }
  "$loom" schedule show $s -p 4 -m 8 "${v[@]}" > $s.show 2>&1 || { cat $s.show; fail "show $s"; }
  "$loom" schedule show --trace $s > $s.trace 2>&1 || { cat $s.trace; fail "show --trace $s"; }
  printed=$(sed -n 's/^bubble: \([0-9.]*\) %.*/\1/p' $s.show)
  measured=$(sed -n 's/^bubble measured: \([0-9.]*\) % of the step (\([0-9.e+-]*\) s).*/\1 \2/p' \
    $s.trace)
  [ -n "$printed" ] && [ -n "$measured" ] || { cat $s.show $s.trace; fail "$s: no bubble printed"; }
  echo "$s $printed $measured" >> table
done
python3 - <<'PY'
import sys
rows = [l.split() for l in open("table")]
base = float(rows[0][3])
print(f"{'schedule':10} {'printed':>8} {'measured':>9} {'apart':>6} {'step':>8} {'vs 1F1B':>8}")
bad = []
for name, printed, measured, step in rows:
    p, m, t = float(printed), float(measured), float(step)
    print(f"{name:10} {p:7.1f}% {m:8.1f}% {abs(p - m):5.1f}% {t:7.3f}s {base / t:7.2f}x")
    if abs(p - m) > 10:
        bad.append(name)
published = {"1f1b": 100 * 3 / 11, "zb-h1": 100 * 3 / 27}
for name, printed, _, _ in rows:
    if name in published and abs(float(printed) - published[name]) > 0.1:
        bad.append(name + " (printed, against the published formula)")
if bad:
    sys.exit("printed and measured bubbles more than 10 % of the step apart: " + ", ".join(bad))
print("P = 4, M = 8: every schedule's printed bubble within 10 % of the step of its traced run")
PY
