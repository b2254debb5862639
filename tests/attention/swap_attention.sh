#!/usr/bin/env bash
# Swapping the attention plugin changes speed, not the loss: a tiny GPT (GQA, so flash-cpu's
# grouped dk/dv sums are exercised) trains 20 iterations with attention/reference and with
# attention/flash-cpu from the same seed; the loss and gradient norm of every iteration (and
# the eval losses) must agree within 1e-5 relative in fp32 and 1e-10 in fp64, where what
# remains is rounding of a different summation order. The same again with packed sequences
# (data.pack_sequences: each document attends to itself only, through
# loom.attention-seqlens/1), whose loss must also differ from the unpacked run's.
#   swap_attention.sh LOOM
set -euo pipefail
loom=$1
. "$(dirname "$0")/../support/lib.sh"
scratch
{
  twenty_step_sections 4 48
  toml_section backend plugin=cpu measure_gemm=false
  toml_section model plugin=gpt n_layer=2 n_head=4 n_kv_head=2 n_embd=32 max_seq_len=48
  toml_section tokenizer plugin=byte
  toml_section data plugin=mock num_documents=200 doc_length=64
  toml_section checkpoint interval=0
} > base.toml
check() {  # check DTYPE TOL [PACK]
  local dtype=$1 tol=$2 pack=${3:-false}
  for att in reference flash-cpu; do
    "$loom" run base.toml --set attention.plugin=$att --set precision.dtype="$dtype" \
      --set data.pack_sequences=$pack --set train.metrics=$att-$dtype-$pack.jsonl 2> $att.log ||
      { cat $att.log; exit 1; }
  done
  PYTHONPATH=$tests_dir/support python3 - "$dtype packed=$pack" "$tol" \
    reference-$dtype-$pack.jsonl flash-cpu-$dtype-$pack.jsonl <<'PY'
import sys
from metrics import compare, rows
what, tol = sys.argv[1], float(sys.argv[2])
ref, fla = rows(sys.argv[3]), rows(sys.argv[4])
assert len(ref) == len(fla) == 22, (len(ref), len(fla))  # 20 steps, 2 evaluations
keys = lambda a: [k for k in ("loss", "grad_norm", "eval_loss") if k in a]
worst = compare(ref, fla, keys, tol, f"{what} ", "reference", "flash-cpu")
print(f"{what}: loss and grad norm of 20 iterations (and 2 eval losses) of flash-cpu match "
      f"reference within {tol:g}; worst relative difference {worst:.2e}; "
      f"final loss {fla[-2]['loss']:.4f}")
PY
}
check fp32 1e-5
check fp64 1e-10
check fp32 1e-5 true
check fp64 1e-10 true
python3 - reference-fp64-false.jsonl reference-fp64-true.jsonl <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
d = abs(a[-1]["eval_loss"] - b[-1]["eval_loss"])
assert d > 1e-3, f"packing changed nothing: eval loss {a[-1]['eval_loss']} vs {b[-1]['eval_loss']}"
print(f"packed sequences change the model: final eval loss {b[-1]['eval_loss']:.4f} packed vs "
      f"{a[-1]['eval_loss']:.4f} unpacked")
PY
