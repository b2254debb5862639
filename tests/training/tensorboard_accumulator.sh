#!/usr/bin/env bash
# train.tensorboard read by TensorBoard itself: its EventAccumulator loads the events of a
# short run, and every scalar equals the metrics file's (as f32). The GPU machine's python3
# has `tensorboard` (this needs no GPU); elsewhere it skips with exit 77.
#   tensorboard_accumulator.sh LOOM
set -euo pipefail
loom=$1
. "$(dirname "$0")/../support/lib.sh"
python_has tensorboard "from tensorboard.backend.event_processing import event_accumulator"
scratch
{
  toml_section train iters=6 micro_batch_size=2 seq_len=16 eval_interval=3 eval_iters=1 \
    metrics=m.jsonl tensorboard=tb
  gpt_sections threads= n_head=2
} > r.toml
"$loom" run r.toml 2> log || { tail -20 log; exit 1; }
python3 - <<'PY'
import json, struct
from tensorboard.backend.event_processing import event_accumulator as ea
acc = ea.EventAccumulator("tb", size_guidance={ea.SCALARS: 0})
acc.Reload()
tags = acc.Tags()["scalars"]
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
got = {t: {e.step: e.value for e in acc.Scalars(t)} for t in tags}
n = 0
for line in open("m.jsonl"):
    m = json.loads(line)
    pairs = [("lm loss validation", "eval_loss")] if "eval_loss" in m else \
        [("lm loss", "loss"), ("learning-rate", "lr"), ("grad-norm", "grad_norm"),
         ("throughput/mfu", "mfu"), ("memory/peak-bytes", "mem_bytes")]
    for tag, key in pairs:
        assert got[tag][m["iter"]] == f32(m[key]), (tag, m["iter"], got[tag][m["iter"]], m[key])
        n += 1
print(f"TensorBoard's EventAccumulator: {len(tags)} scalar tags, {n} values equal the metrics file")
PY
