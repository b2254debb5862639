#!/usr/bin/env bash
# train.schedule_trace and `loom schedule show --trace` on two pipeline ranks (comm/mpi): a
# tiny GPT trains 3 iterations of 4 micro-batches, tracing iteration 2. Checks:
#  1. 1F1B: each pipeline rank writes <path>.<rank>, a header (schedule, layout, the stages
#     its chunks hold) and one line per computation: a forward and a backward per micro-batch,
#     in 1F1B's order for that rank (warm-up forwards, then alternating), each ending after
#     it starts, and every backward of a micro-batch after its forward;
#  2. ZB-V: two chunks a rank, rank 0 holding stages 0 and 3 and rank 1 stages 1 and 2; per
#     chunk and micro-batch a forward, an input backward and, after it, a weight backward
#     (model/gpt's split backward);
#  3. `loom schedule show --trace` draws both ranks, prints the measured bubble and the
#     schedule's own timeline with the measured times; a file that is not a trace is refused
#     naming it (exit 2).
#   schedule_trace.sh LOOM MPIEXEC
set -euo pipefail
loom=$1 mpiexec=$2
. "$(dirname "$0")/../support/lib.sh"
scratch
{
  toml_section train seed=7 iters=3 micro_batch_size=2 global_batch_size=8 seq_len=16 \
    log_interval=1 eval_interval=0 schedule_trace=tr schedule_trace_iter=2
  toml_section lr max=1e-3 warmup_iters=1
  toml_section backend plugin=cpu measure_gemm=false threads=1
  toml_section comm plugin=mpi
  toml_section parallel pipeline=2
  toml_section model plugin=gpt n_layer=4 n_head=2 n_embd=32 max_seq_len=16 tie_embeddings=false
  toml_section tokenizer plugin=byte
  toml_section data plugin=mock num_documents=64 doc_length=48
} > r.toml
trained() {  # NAME [--set ...]
  local name=$1
  shift
  "$mpiexec" -n 2 "$loom" run r.toml --set train.schedule_trace="$name" "$@" > "$name.log" 2>&1 ||
    { tail -20 "$name.log"; fail "the $name run failed"; }
}
trained f1b --set parallel.schedule=1f1b
trained zbv --set parallel.schedule=zb-v --set parallel.virtual_stages=2
python3 - <<'PY'
import json
def read(path):
    lines = [json.loads(l) for l in open(path)]
    return lines[0], lines[1:]
for rank, want in ((0, "F0 F1 B0 F2 B1 F3 B2 B3"), (1, "F0 B0 F1 B1 F2 B2 F3 B3")):
    head, steps = read(f"f1b.{rank}")
    assert head["schedule"] == "1f1b" and head["pipeline"] == 2 and head["rank"] == rank, head
    assert head["microbatches"] == 4 and head["iteration"] == 2 and head["stages"] == [rank], head
    got = " ".join("FB"[s["phase"]] + str(s["mb"]) for s in steps)
    assert got == want, (rank, got)
    assert all(s["end"] > s["start"] for s in steps)
    fwd_end = {s["mb"]: s["end"] for s in steps if s["phase"] == 0}
    assert all(s["start"] >= fwd_end[s["mb"]] for s in steps if s["phase"] == 1)
for rank, stages in ((0, [0, 3]), (1, [1, 2])):
    head, steps = read(f"zbv.{rank}")
    assert head["schedule"] == "zb-v" and head["stages"] == stages, head
    # model/gpt splits its backward: an input backward (2) and a weight backward (3) per
    # forward (0), the W after its B
    assert sorted((s["chunk"], s["mb"], s["phase"]) for s in steps) == \
        sorted((c, m, p) for c in (0, 1) for m in range(4) for p in (0, 2, 3)), steps
    end_b = {(s["chunk"], s["mb"]): s["end"] for s in steps if s["phase"] == 2}
    assert all(s["start"] >= end_b[(s["chunk"], s["mb"])] for s in steps if s["phase"] == 3)
print("traces: 1F1B's order per rank, ZB-V's V of stages (0, 3) and (1, 2)")
PY
"$loom" schedule show --trace f1b > show.txt 2>&1 || { cat show.txt; fail "schedule show --trace"; }
grep -q "^rank 1 " show.txt && grep -q "bubble measured: .* the schedule's own timeline" show.txt ||
  { cat show.txt; fail "schedule show --trace printed no drawing or bubble"; }
grep "bubble measured" show.txt
printf '{"schedule": "1f1b", "pipeline": 1, "virtual_stages": 1, "microbatches": 1, "stages": [0]}\nnot json\n' > bad.0
expect 2 "bad.0:2: not a traced computation" "$loom" schedule show --trace bad
