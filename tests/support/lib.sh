# Shell helpers the tests' scripts source (`. "$here/../support/lib.sh"`), so that each
# script keeps only what it checks.

# expect RC TEXT CMD...: runs CMD (stdout and stderr into out.log) and fails the script
# unless it exits RC and says TEXT (a fixed string); prints the line that says it.
expect() {
  local rc=$1 text=$2
  shift 2
  set +e
  "$@" > out.log 2>&1
  local got=$?
  set -e
  if [ $got != "$rc" ] || ! grep -qF -- "$text" out.log; then
    echo "expected exit $rc and '$text' from: $*"
    echo "got exit $got:"
    cat out.log
    exit 1
  fi
  echo "ok ($rc): $(grep -m1 -F -- "$text" out.log | cut -c1-200)"
}

# tiny_recipe FILE [ITERS]: a GPT of 2 layers, width 32, over the byte tokenizer and mock
# data, that trains ITERS (default 2) iterations in about a second on one CPU thread.
tiny_recipe() {
  cat > "$1" <<TOML
[train]
iters = ${2:-2}
micro_batch_size = 2
seq_len = 16
[backend]
measure_gemm = false
threads = 1
[model]
n_layer = 2
n_head = 4
n_embd = 32
max_seq_len = 16
[tokenizer]
plugin = "byte"
[data]
plugin = "mock"
TOML
}

# mpi_ranks NP CMD...: CMD as NP ranks under $mpiexec the way every multi-rank test starts them
# (OpenMPI: oversubscribed on CI's 2 cores, allowed as root in containers, shared-memory
# transport only).
mpi_ranks() {
  local np=$1
  shift
  "$mpiexec" -np "$np" --oversubscribe --allow-run-as-root --mca btl self,vader "$@"
}

# small_gpt_sections [DOCS]: the [backend], [model], [tokenizer] and [data] sections of the
# 4-layer GPT (width 32, 16 tokens, byte tokenizer, DOCS mock documents of 64 tokens, 200 by
# default) that the checkpoint and layout tests train; each script writes its own [train] and
# [lr] (and anything else) beside them.
small_gpt_sections() {
  cat <<TOML
[backend]
measure_gemm = false
threads = 1
[model]
n_layer = 4
n_head = 4
n_embd = 32
max_seq_len = 16
[tokenizer]
plugin = "byte"
[data]
plugin = "mock"
num_documents = ${1:-200}
doc_length = 64
TOML
}

# compare_resumed TOL STRAIGHT.jsonl RESUMED.jsonl WHAT [KEY...]: iterations 7..12 of a run
# resumed at 6 (RESUMED) against the same iterations of a straight run: every KEY (default
# loss and grad_norm) within TOL relative. Prints the worst difference; exits 1 naming the
# first one beyond TOL.
compare_resumed() {
  python3 - "$@" <<'PY'
import json, sys
tol, a, b, what = float(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
keys = sys.argv[5:] or ["loss", "grad_norm"]
straight = {r["iter"]: r for r in map(json.loads, open(a)) if "loss" in r}
resumed = [r for r in map(json.loads, open(b)) if "loss" in r]
assert [r["iter"] for r in resumed] == list(range(7, 13)), [r["iter"] for r in resumed]
worst = 0.0
for r in resumed:
    for key in keys:
        x, y = straight[r["iter"]][key], r[key]
        rel = abs(x - y) / abs(x)
        worst = max(worst, rel)
        if rel > tol:
            sys.exit(f"{what} iter {r['iter']}: straight {key} {x!r}, resumed {y!r}")
print(f"{what}: {' and '.join(keys)} of iterations 7..12 within {worst:.1e} of the straight run")
PY
}
