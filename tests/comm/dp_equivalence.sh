#!/usr/bin/env bash
# Data parallelism trains the same model: a tiny GPT run on 1 rank and under
# `mpirun -np 2` with comm/mpi and the same global batch must log the same loss, grad norm
# and eval loss at every iteration (float tolerance: the all-reduce sums in another order).
#   dp_equivalence.sh LOOM MPIEXEC
set -euo pipefail
loom=$1 mpiexec=$2
. "$(dirname "$0")/../support/lib.sh"
scratch
{
  toml_section train seed=5 iters=12 micro_batch_size=2 global_batch_size=8 seq_len=16 \
    log_interval=4 eval_interval=6 eval_iters=2
  toml_section lr max=1e-2 warmup_iters=2
  toml_section model plugin=gpt n_layer=2 n_head=2 n_embd=32 max_seq_len=16
  toml_section tokenizer plugin=byte
  toml_section data plugin=mock num_documents=200 doc_length=64
} > tiny.toml
"$loom" run tiny.toml --set train.metrics=one.jsonl 2> one.log
mpi_ranks 2 "$loom" run tiny.toml --set comm.plugin=mpi --set train.metrics=two.jsonl 2> two.log
PYTHONPATH=$tests_dir/support python3 - <<'PY'
from metrics import compare, rows
one, two = rows("one.jsonl"), rows("two.jsonl")
assert len(one) == len(two) == 14, (len(one), len(two))
keys = lambda a: [k for k in ("loss", "grad_norm", "eval_loss", "lr") if k in a]
worst = compare(one, two, keys, 1e-5, "", "1 rank", "2 ranks")
print(f"1 rank == 2 data-parallel ranks over {len(one)} metrics lines; worst relative difference {worst:.2e}")
PY
