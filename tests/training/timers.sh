#!/usr/bin/env bash
# train.timers on backend/cpu: the step profile accounts for the step and counts what the
# model must do. Checked against numbers this script derives from the recipe alone:
#  - the timed kinds cover the step: the gap (wall time no timed call covers) is under 10 % of
#    the step time, and the kinds sum to the step time less the gap;
#  - the GEMM FLOPs per step are 6 x (the matrix parameters) x (tokens per step), computed
#    here from n_layer, n_embd and the vocabulary, split in three equal thirds (forward, input
#    gradient, weight gradient), and the calls are 6 per layer (q, k, v, projection, fc,
#    fc2) plus the head, per micro-batch;
#  - the attention FLOPs are the causal half of 4 B T H D S per layer, forward, and 2.5 times
#    that backward;
#  - per-layer times: one entry for the embedding and head and one per layer, each > 0, and
#    with the calls outside the layers (data, gradient norm, optimizer) they sum to the kinds;
#  - with timers off (the default) the metrics carry none of it, and the losses are the same
#    bits with timers on (timing reads the clock; it changes no number).
#   timers.sh LOOM
set -euo pipefail
loom=$1
. "$(dirname "$0")/../support/lib.sh"
scratch
{
  toml_section train iters=6 micro_batch_size=4 global_batch_size=8 seq_len=64 log_interval=3 \
    metrics=m.jsonl
  gpt_sections threads= n_layer=3 n_embd=128 max_seq_len=64
} > r.toml
"$loom" run r.toml --set train.timers=true 2> log || { tail -20 log; exit 1; }
grep -q "step profile, mean of 3 step(s)" log || { echo "no profile table in the log:"; tail -40 log; exit 1; }
"$loom" run r.toml --set train.metrics=off.jsonl 2> log_off || { tail -20 log_off; exit 1; }
python3 - <<'PY'
import json, sys

lines = [json.loads(l) for l in open("m.jsonl")]
off = [json.loads(l) for l in open("off.jsonl")]
fail = []
for a, b in zip(lines, off):
    if a["loss"] != b["loss"] or a["grad_norm"] != b["grad_norm"]:
        fail.append(f"iteration {a['iter']}: loss {a['loss']!r} / {b['loss']!r} with timers on / off")
if any(k.startswith("timer") for l in off for k in l):
    fail.append("timers off, but the metrics carry timer keys")
prof = [l for l in lines if "timer_step_ms" in l]
if [l["iter"] for l in prof] != [1, 3, 6]:
    fail.append(f"profile on iterations {[l['iter'] for l in prof]}, expected the log lines 1, 3, 6")

L, C, H, T, V = 3, 128, 4, 64, 257  # the byte tokenizer's 256 bytes + EOD
B, micro = 4, 2
tokens = B * T * micro
n_matmul = L * (4 * C * C + 2 * 4 * C * C) + V * C  # qkv, proj, fc, fc2; tied head
pad = ((V + 127) // 128) * 128  # the model pads its vocabulary to a multiple of 128
for l in prof:
    ms = {k.split(".", 1)[1]: v for k, v in l.items() if k.startswith("timer_ms.")}
    step, gap = l["timer_step_ms"], ms.pop("gap")
    covered = sum(ms.values())
    if abs(covered + gap - step) > 1e-6 * step:
        fail.append(f"iter {l['iter']}: kinds {covered} + gap {gap} != step {step}")
    if not (0 <= gap <= 0.10 * step):
        fail.append(f"iter {l['iter']}: gap {gap:.3f} ms of a {step:.3f} ms step (> 10 %)")
    flops = {k.split(".", 1)[1]: v for k, v in l.items() if k.startswith("timer_flops.")}
    calls = {k.split(".", 1)[1]: v for k, v in l.items() if k.startswith("timer_calls.")}
    for part in ("gemm_fwd", "gemm_dgrad", "gemm_wgrad"):
        for vocab in (V, pad):
            want = 2 * (n_matmul - V * C + vocab * C) * tokens
            if abs(flops.get(part, 0) - want) <= 1e-9 * want:
                break
        else:
            fail.append(f"iter {l['iter']}: {part} {flops.get(part)} FLOPs per step, expected "
                        f"2 x {n_matmul} x {tokens} (or with the padded vocabulary)")
        if calls.get(part) != (6 * L + 1) * micro:
            fail.append(f"iter {l['iter']}: {part} {calls.get(part)} calls, expected {(6 * L + 1) * micro}")
    attn = L * micro * 4 * B * T * C * T * 0.5
    for part, want in (("attn_fwd", attn), ("attn_bwd", 2.5 * attn)):
        if abs(flops.get(part, 0) - want) > 1e-9 * want:
            fail.append(f"iter {l['iter']}: {part} {flops.get(part)} FLOPs, expected {want}")
    units = [l.get(f"timer_unit_ms.{u}", 0) for u in range(L + 2)]
    if not all(u > 0 for u in units[:L + 1]) or units[L + 1] != 0:
        fail.append(f"iter {l['iter']}: per-layer times {units}, expected {L + 1} positive")
    # every timed call is in one layer or outside them (data, norm, optimizer)
    if abs(sum(units) + l["timer_outside_ms"] - covered) > 1e-6 * step or not l["timer_outside_ms"] > 0:
        fail.append(f"iter {l['iter']}: layers {sum(units)} + outside {l['timer_outside_ms']} != {covered}")
    if not (l["ceiling_gemm_tflops"] > 0 and l["ceiling_copy_gbps"] > 0):
        fail.append("no measured ceilings")
if fail:
    print("\n".join(fail))
    sys.exit(1)
print(f"profile of {len(prof)} log lines checked; last: step {prof[-1]['timer_step_ms']:.2f} ms, "
      f"gap {prof[-1]['timer_ms.gap']:.3f} ms")
PY
