# Sourced by the launch tests (launch.sh, setup_signal.sh): a scratch folder to work in, a
# tiny GPT recipe that trains in milliseconds per step, and the helpers both use.
#   . launch_lib.sh   (sets dir and cds into it; removed on exit)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
# tiny_recipe FILE: 1 layer of width 32 on dataset/mock, comm/mpi; tests add --set overrides.
tiny_recipe() {
  cat > "$1" <<'TOML'
[train]
seed = 11
iters = 3
micro_batch_size = 2
seq_len = 16
log_interval = 1
[lr]
max = 1e-3
[backend]
measure_gemm = false
[model]
n_layer = 1
n_head = 2
n_embd = 32
max_seq_len = 16
[tokenizer]
plugin = "byte"
[data]
plugin = "mock"
num_documents = 50
doc_length = 32
[comm]
plugin = "mpi"
TOML
}
fail() { echo "FAIL: $*"; [ -f out.txt ] && tail -20 out.txt; exit 1; }
now() { date +%s.%N; }
# since T0: seconds from T0 (a `now`) to now, one decimal
since() { python3 -c "import time; print(f'{time.time() - $1:.1f}')"; }
# below X LIMIT: whether X < LIMIT
below() { python3 -c "import sys; sys.exit(0 if $1 < $2 else 1)"; }
