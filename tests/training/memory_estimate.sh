#!/usr/bin/env bash
# `loom validate --memory` against the peak a real run measures. For seven layouts of a small
# GPT (1 rank; TP2 with SP; PP2; DP2 with the distributed optimizer; DP2 with FSDP (ZeRO-3);
# full recompute; a mixture of experts under EP2), the estimate for rank 0, walked through on backend/meta before
# anything runs, must be within 10% of rank 0's measured backend peak over 3 real iterations
# (mem_bytes in the metrics file); the table must name every role (a PP2 run has a first and
# a last stage); the device line gives the host's memory for backend/cpu (/proc/meminfo) and
# says when the peak does not fit.
#   memory_estimate.sh LOOM MPIEXEC
set -euo pipefail
loom=$1 mpiexec=$2
. "$(dirname "$0")/../support/lib.sh"
scratch
{
  toml_section train seed=3 iters=3 micro_batch_size=2 global_batch_size=8 seq_len=64
  gpt_sections n_layer=4 n_embd=64 max_seq_len=64 num_documents=200 doc_length=128
} > base.toml
check() {  # check NAME NP SETS...
  local name=$1 np=$2
  shift 2
  "$loom" validate base.toml --world "$np" --memory "$@" > $name.est 2> $name.err ||
    { cat $name.est $name.err; exit 1; }
  mpi_ranks "$np" "$loom" run base.toml --set comm.plugin=mpi --set train.metrics=$name.jsonl "$@" 2> $name.log ||
    { tail -30 $name.log; exit 1; }
  python3 - "$name" <<'PY'
import json, sys
name = sys.argv[1]
lines = open(name + ".est").read().splitlines()
at = [i for i, l in enumerate(lines) if l.startswith("memory per rank")]
assert at, "no memory table in:\n" + "\n".join(lines)
rows = [l.split() for l in lines[at[0] + 2:] if l.strip()]
est = float(next(r for r in rows if r[0] == "0")[-1])
measured = max(json.loads(l).get("mem_bytes", 0) for l in open(name + ".jsonl")) / 2**20
rel = (est - measured) / measured
print(f"{name}: estimate {est:.2f} MiB, measured {measured:.2f} MiB ({rel:+.1%})")
if abs(rel) > 0.10:
    sys.exit(f"{name}: the estimate is off by more than 10%:\n" + "\n".join(lines[at[0]:]))
PY
}
check one 1
# the device line: backend/cpu's capacity (ABI 2.11's mem_total) is the host's physical memory
python3 - <<'PY'
import re
line = next(l for l in open("one.est") if l.startswith("device memory (backend/cpu"))
got = float(re.search(r"\): ([0-9.]+) MiB;", line).group(1))
want = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal:")) / 1024
assert abs(got - want) <= 0.01 * want, (got, want, line)
print(f"device memory {got:.1f} MiB, /proc/meminfo {want:.1f} MiB")
PY
# a 38-billion-parameter model does not fit, and says so without allocating it
"$loom" validate base.toml --memory --set model.n_embd=8192 --set model.n_head=64 \
  --set model.n_layer=48 > big.est
grep -q "it does not fit" big.est || { cat big.est; exit 1; }
echo "a 38B model: $(grep -o 'is [0-9.]* MiB, [0-9.]*% of it: it does not fit' big.est)"
check tp2sp 2 --set parallel.tensor=2 --set parallel.sequence_parallel=true
check pp2 2 --set parallel.pipeline=2
grep -q "(first)" pp2.est && grep -q "(last)" pp2.est || { cat pp2.est; exit 1; }
# the schedules' own activations in flight: a V (rank 0 holds the first and the last stage)
# and DualPipeV's paired chunks, each against its measured run
check pp2zbv 2 --set parallel.pipeline=2 --set parallel.virtual_stages=2 \
  --set parallel.schedule=zb-v --set model.tie_embeddings=false
grep -q "(first, last)" pp2zbv.est || { cat pp2zbv.est; exit 1; }
check pp2dualpipev 2 --set parallel.pipeline=2 --set parallel.virtual_stages=2 \
  --set parallel.schedule=dualpipev --set model.tie_embeddings=false
check dp2dist 2 --set parallel.data=distributed-optimizer
check dp2fsdp 2 --set parallel.data=fsdp
check recompute 1 --set train.recompute_granularity=full
check moeep2 2 --set parallel.expert=2 --set model.num_experts=4 --set model.moe_router_topk=2
