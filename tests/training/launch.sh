#!/usr/bin/env bash
# Starting ranks with mpirun (issue 35), through the real `loom` executable:
#  1. Ranks started with different recipes (MPMD `mpirun -np 1 loom run r.toml : -np 1 loom
#     run r.toml --set ...`: another lr, seed, micro-batch or model size) exit 2 promptly, each
#     differing rank naming its first differing key; comm.plugin = "single" on rank 1 only says
#     why; two recipe files with the same content, or another backend.threads, still train.
#  2. backend.threads defaults to the node's cores shared by its ranks (1 per rank for two
#     ranks on two cores), logged once; OMP_NUM_THREADS or backend.threads win.
#  3. Only rank 0 logs set-up lines; the other ranks' warnings still print; LOOM_LOG_LEVEL
#     applies to every rank.
#   launch.sh LOOM MPIEXEC
set -uo pipefail
loom=$1 mpiexec=$2
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=launch_lib.sh
. "$here/launch_lib.sh"
launch_recipe r.toml
cp r.toml same.toml
mpmd() {  # mpmd "ARGS": rank 0 runs `loom run r.toml`, rank 1 `loom run ARGS`; sets took
  local t0 rc
  t0=$(now)
  # shellcheck disable=SC2086
  timeout -s KILL 60 "$mpiexec" -np 1 "$loom" run r.toml --set backend.threads=1 : \
    -np 1 "$loom" run $1 > out.txt 2>&1
  rc=$?
  took=$(since "$t0")
  return $rc
}

# 1. different recipes
for case in "lr.max=0.002|lr.max: rank 0 has 0.001, rank 1 has 0.002" \
  "train.seed=12|train.seed: rank 0 has 11, rank 1 has 12" \
  "train.micro_batch_size=4|train.micro_batch_size: rank 0 has 2, rank 1 has 4" \
  "model.n_embd=64|model.n_embd: rank 0 has 32, rank 1 has 64"; do
  set_arg=${case%%|*} want=${case#*|}
  mpmd "r.toml --set backend.threads=1 --set $set_arg"
  rc=$?
  echo "rank 1 with --set $set_arg: exit $rc after $took s"
  [ "$rc" = 2 ] || fail "--set $set_arg on rank 1: exit $rc, expected 2"
  grep -q "loom: error: rank 1: this rank's recipe differs from rank 0's at $want (1 key differs)" \
    out.txt || fail "--set $set_arg: rank 1 does not name '$want'"
  grep -q "loom: error: the ranks of this job resolved different recipes: 1 of 2 ranks" out.txt ||
    fail "--set $set_arg: no summary from rank 0"
  grep -q "MPI_ERR\|MPI_ABORT" out.txt && fail "--set $set_arg: MPI errors"
  below "$took" 20 || fail "took $took s"
done
grep -c "differs from rank 0's" out.txt | grep -qx 1 || fail "rank 0 named a key too"

mpmd "r.toml --set backend.threads=1 --set comm.plugin=single"
rc=$?
echo "comm.plugin = single on rank 1 only: exit $rc"
[ "$rc" = 2 ] || fail "comm.plugin = single on rank 1: exit $rc, expected 2"
grep -q "loom: error: rank 1: started as 2 ranks by a launcher (mpirun, srun), but the recipe says \
comm.plugin = \"single\"" out.txt || fail "comm.plugin = single on rank 1: no message"

mpmd "same.toml --set backend.threads=2" || fail "the same recipe in two files failed"
grep -q "\[r0\] iter      3/3" out.txt || fail "the same recipe in two files did not train"
echo "the same recipe from two files, another backend.threads: trains"

# 2. threads per rank; 3. only rank 0 logs set-up lines
unset OMP_NUM_THREADS
"$mpiexec" -np 2 "$loom" run r.toml > out.txt 2>&1 || fail "mpirun -np 2 failed"
line=$(grep "backend threads:" out.txt)
echo "$line"
[ "$(grep -c "backend threads:" out.txt)" = 1 ] || fail "the threads line is not printed once"
n=$(echo "$line" | sed -E 's/.*backend threads: ([0-9]+) per rank.*/\1/')
cores=$(nproc --all)
[ "$n" -ge 1 ] && [ $((n * 2)) -le "$((cores > 2 ? cores : 2))" ] ||
  fail "$n threads per rank for 2 ranks on $cores cores"
[ "$cores" != 2 ] || [ "$n" = 1 ] || fail "2 ranks on 2 cores: $n threads each"
grep -q "\[r0\] backend/cpu: OpenBLAS .*, $n threads" out.txt || fail "backend/cpu does not use $n"
grep -q "\[r0\] model: " out.txt || fail "rank 0 logs no set-up line"
grep "^\[r1\]" out.txt | grep -v "warning: \|error: " && fail "rank 1 logged info lines"
# not bound to cores by mpirun: the node's cores shared by its ranks
"$mpiexec" --bind-to none -np 2 "$loom" run r.toml > out.txt 2>&1 || fail "--bind-to none failed"
line=$(grep "backend threads:" out.txt)
echo "$line"
want="$((cores / 2 > 1 ? cores / 2 : 1)) per rank ($cores cores / 2 ranks on this node, from \
OMPI_COMM_WORLD_LOCAL_SIZE)"
[[ "$line" == *"backend threads: $want"* ]] || fail "--bind-to none: expected '$want'"
OMP_NUM_THREADS=2 "$mpiexec" -np 2 "$loom" run r.toml > out.txt 2>&1 || fail "OMP_NUM_THREADS=2"
grep -q "backend threads:" out.txt && fail "OMP_NUM_THREADS=2: the engine chose anyway"
grep -q "\[r0\] backend/cpu: OpenBLAS .*, 2 threads" out.txt || fail "OMP_NUM_THREADS=2 not used"
LOOM_LOG_LEVEL=info "$mpiexec" -np 2 "$loom" run r.toml --set backend.threads=2 > out.txt 2>&1 ||
  fail "backend.threads=2"
grep -q "backend threads:" out.txt && fail "backend.threads=2: the engine chose anyway"
grep -q "\[r1\] backend/cpu: OpenBLAS .*, 2 threads" out.txt ||
  fail "LOOM_LOG_LEVEL=info: rank 1's set-up lines missing, or backend.threads=2 not used"
echo "threads: $n per rank by default; OMP_NUM_THREADS and backend.threads win; rank 1 logs only warnings by default"
echo "launch: ok"
