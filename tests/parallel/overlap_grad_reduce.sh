#!/usr/bin/env bash
# parallel.overlap_grad_reduce on two ranks (comm/mpi): a GPT of 6 layers x 128 trains 5
# iterations of 2 micro-batches per rank with buckets of 40000 elements, once reducing after
# the backward pass and once overlapping it, with grad/ddp and with the distributed
# optimizer (and once with overlap_param_gather as well). Checks:
#  1. the numbers are identical: every iteration's loss and gradient norm, to the last digit
#     the metrics file prints (both runs reduce the same buckets through the same calls);
#     the distributed optimizer's too, and a run of it resumed at iteration 3 with buckets of
#     another size (other shards: the checkpoint must be resharded, not read as this rank's
#     own) continues with the same losses (the gradient norm, summed over other shards,
#     within 1e-14);
#  2. a traced run (LOOM_LOG_LEVEL=debug; grad/ddp and the engine stamp their lines with one
#     monotonic clock) shows reductions in flight while the backward pass goes on: in every
#     iteration rank 0 starts some bucket before its backward passes end, and some bucket
#     completes before they end in at least one iteration; without overlap every bucket
#     starts after them.
# Usage: overlap_grad_reduce.sh LOOM_EXECUTABLE MPIEXEC   (KEEP=1 keeps the work folder)
set -uo pipefail
loom=${1:?usage: $0 LOOM_EXECUTABLE MPIEXEC}
mpiexec=${2:?usage: $0 LOOM_EXECUTABLE MPIEXEC}
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
. "$(dirname "$0")/../support/lib.sh"
mpi_session_in "$work"
{
  toml_section train seed=7 iters=5 micro_batch_size=2 global_batch_size=8 seq_len=32 \
    log_interval=1 eval_interval=0
  toml_section precision dtype=fp32
  toml_section lr max=1e-3 warmup_iters=1
  toml_section backend plugin=cpu threads=1
  toml_section comm plugin=mpi
  toml_section parallel data=ddp bucket_size=40000
  toml_section model plugin=gpt n_layer=6 n_head=4 n_embd=128 max_seq_len=32
  toml_section attention plugin=reference
  toml_section optimizer plugin=adamw
  toml_section tokenizer plugin=byte
  toml_section data plugin=mock num_documents=64 doc_length=96
} > "$work/r.toml"
run() {  # NAME [--set ...]
  local name=$1
  shift
  # each rank's output in its own files (two ranks writing one file can cut lines)
  LOOM_LOG_LEVEL=debug "$mpiexec" -n 2 --output-filename "$work/$name.out" "$loom" run \
    "$work/r.toml" --set "train.metrics=$work/$name.jsonl" "$@" >/dev/null 2>&1
  local rc=$?
  cat "$work/$name.out"/1/rank.0/std* >"$work/$name.log" 2>/dev/null
  [ $rc = 0 ] || {
    echo "FAIL: the $name run failed:"
    cat "$work/$name.out"/1/rank.*/std* | grep -v debug | tail -20
    exit 1
  }
}
run plain
# A bucket completes during the backward pass only when the other rank has started it too; on
# a loaded 2-core machine that rank can lag a whole backward pass behind (about 1 run in 5
# under the full suite). The timing is observed up to 3 times; the numbers are checked once.
for attempt in 1 2 3; do
  run overlap --set parallel.overlap_grad_reduce=true
  grep -q "complete during the backward pass" "$work/overlap.log" && break
  echo "overlap run $attempt: no bucket completed during the backward passes (timing); again"
done
dist=(--set parallel.data=distributed-optimizer)
run dist "${dist[@]}" --set checkpoint.save="$work/ck" --set checkpoint.interval=3
run dist-overlap "${dist[@]}" --set parallel.overlap_grad_reduce=true
# and the parameter all-gather overlapped with the next forward (completed per layer)
run dist-gather "${dist[@]}" --set parallel.overlap_grad_reduce=true \
  --set parallel.overlap_param_gather=true
run dist-resumed "${dist[@]}" --set checkpoint.load="$work/ck/iter_0000003" \
  --set parallel.bucket_size=1000000
grep -q "resharding" "$work/dist-resumed.log" || {
  echo "FAIL: the resume with other buckets did not reshard the checkpoint"
  exit 1
}
python3 - "$work" <<'PY'
import json, re, sys
work = sys.argv[1]
def rows(name):
    out = []
    for line in open(f"{work}/{name}.jsonl"):
        r = json.loads(line)
        if "loss" in r and "grad_norm" in r:
            out.append((r["iter"], repr(r["loss"]), repr(r["grad_norm"])))
    return out
bad = []
def same(a_name, b_name, what, n=5, norm_rtol=0.0):
    a, b = rows(a_name), rows(b_name)
    if len(a) != 5 or len(b) != n:
        bad.append(f"{what}: expected 5 and {n} iterations, got {len(a)} and {len(b)}")
    b_at = {r[0]: r for r in b}
    for r in a:
        o = b_at.get(r[0])
        if o and (r[1] != o[1] or
                  abs(float(r[2]) - float(o[2])) > norm_rtol * abs(float(r[2])) or
                  (norm_rtol == 0 and r[2] != o[2])):
            bad.append(f"{what}, iteration {r[0]}: loss, grad_norm {r[1:]} and {b_at[r[0]][1:]}")
    print(f"{what}: {len(b)} iterations compared, losses and gradient norms match: "
          f"{not any(x.startswith(what) for x in bad)}")
same("plain", "overlap", "ddp with and without overlap")
same("dist", "dist-overlap", "distributed optimizer with and without overlap")
same("dist", "dist-gather", "distributed optimizer with overlap_param_gather too")
same("dist", "dist-resumed", "distributed optimizer resumed with other buckets", 2, 1e-14)

def trace(name):
    """per iteration of rank 0: (bucket start times during/after, completions, end)"""
    its, cur = [], {"during": [], "after": [], "complete": []}
    for line in open(f"{work}/{name}.log"):
        m = re.search(r"t=(\d+)us bucket \d+ of \d+ \(\d+ elements\) started (during|after)", line)
        if m:
            cur["during" if m.group(2) == "during" else "after"].append(int(m.group(1)))
            continue
        m = re.search(r"t=(\d+)us bucket \d+ of \d+ complete during", line)
        if m:
            cur["complete"].append(int(m.group(1)))
            continue
        m = re.search(r"t=(\d+)us backward passes done", line)
        if m:
            cur["end"] = int(m.group(1))
            its.append(cur)
            cur = {"during": [], "after": [], "complete": []}
    return its
over = trace("overlap")
plain_t = trace("plain")
if len(over) != 5 or len(plain_t) != 5:
    bad.append(f"traced {len(over)} and {len(plain_t)} iterations, expected 5 (debug lines missing?)")
completed = 0
for k, it in enumerate(over, 1):
    early = [t for t in it["during"] if t < it["end"]]
    done = [t for t in it["complete"] if t < it["end"]]
    completed += len(done)
    print(f"overlap, iteration {k}: {len(early)} buckets started before the backward passes "
          f"ended (the first {(it['end'] - min(early)) / 1000 if early else 0:.1f} ms before), "
          f"{len(done)} complete before")
    if not early:
        bad.append(f"iteration {k}: no bucket started before the backward passes ended")
if over and completed == 0:
    bad.append("no bucket completed while the backward passes went on")
for k, it in enumerate(plain_t, 1):
    if it["during"]:
        bad.append(f"without overlap, iteration {k}: {len(it['during'])} buckets started during the backward pass")
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
