#!/usr/bin/env bash
# The plans for 1024 GPUs (issue 37: DeepSeek-V3 671B, Qwen3-30B-A3B) pass `loom validate
# --world 1024 --memory` with every rank's estimated peak (backend/meta's walk through one
# step) within an 80 GiB H100. (test_engine's "every shipped recipe validates" checks every
# recipe at its smallest world.)
#   recipes_validate.sh LOOM [PLANS]   (PLANS: 1; the sanitizer build passes 0 and skips the
#   plans' walk-throughs, 30 s of arithmetic in Release)
set -euo pipefail
loom=$1 with_plans=${2:-1}
. "$(dirname "$0")/../support/lib.sh"
scratch
recipes=$(cd "$tests_dir/../recipes" && pwd)
[ "$with_plans" = 1 ] || { echo "the 1024-GPU plans skipped (sanitizer build)"; exit 0; }
# 4 micro-batches a step on each data-parallel rank instead of the recipes' 32 and 8 (global
# batches of 128 over DeepSeek-V3's 32 data-parallel ranks, 512 over Qwen3's 128): a 1F1B
# pipeline of 4 stages holds 4 in flight either way, so the peaks are the same and the
# walk-throughs shorter.
for plan in deepseek-v3-671b:128 qwen3-30b-a3b:512; do
  name=${plan%:*}
  "$loom" validate "$recipes/$name.toml" --world 1024 --memory \
    --set train.global_batch_size=${plan#*:} > $name.log 2>&1 ||
    { tail -20 $name.log; fail "$name: validate --world 1024 --memory failed"; }
  python3 - "$name" <<'PY'
import re, sys
name = sys.argv[1]
rows = [l.split() for l in open(name + ".log") if re.match(r"^\s+\d+( \(\w+\))?\s+[\d.]+", l)]
assert rows, f"{name}: no memory table"
peaks = [float(r[-1]) for r in rows]
worst = max(peaks)
assert worst < 80 * 1024, f"{name}: a rank's peak is {worst:.0f} MiB, over 80 GiB"
print(f"{name}: world 1024, {len(rows)} rank kinds, largest peak {worst / 1024:.1f} GiB (< 80)")
PY
done
