# Sourced by the serve tests: a scratch folder with the test model, servers started on any
# free port (killed on exit), and fail.
#   source lib.sh LOOM      (sets loom, here, dir; cds into dir)
set -euo pipefail
loom=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
cd "$dir"
"$here/make_model.sh" "$loom" ck

fail() { echo "FAIL: $*"; exit 1; }

start() {  # start NAME ARGS...: a server writing its port to NAME.port, its pid to NAME.pid
  local name=$1
  shift
  "$loom" serve --checkpoint ck --port 0 --port-file "$name.port" "$@" 2> "$name.log" &
  pids+=($!)
  echo $! > "$name.pid"
  for _ in $(seq 100); do
    [ -s "$name.port" ] && return 0
    kill -0 "$(cat "$name.pid")" 2>/dev/null || { cat "$name.log"; exit 1; }
    sleep 0.1
  done
  echo "server $name did not start"; cat "$name.log"; exit 1
}
