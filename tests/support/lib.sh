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
