#!/usr/bin/env bash
# `loom serve` under tensor parallelism: `mpiexec -n 2 loom serve --set parallel.tensor=2`
# holds half the model on each rank; rank 0 serves HTTP and the other rank repeats its
# decode steps. Concurrent greedy requests give `loom generate`'s text from one rank; the
# prompt's log-probabilities equal a float64 log-softmax of one rank's logits; SIGTERM to
# rank 0 finishes the request in flight and every rank exits 0.
#   serve_tp.sh LOOM MPIEXEC
set -euo pipefail
loom=$1
mpiexec=$2
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
mpid=""
trap '[ -n "$mpid" ] && kill -9 "$mpid" 2> /dev/null; rm -rf "$dir"' EXIT
export OMPI_MCA_orte_tmpdir_base=$dir  # mpirun's session folders (lib.sh's mpi_session_in)
cd "$dir"
"$here/make_model.sh" "$loom" ck
# LOOM_LOG_LEVEL=info: rank 1's set-up lines too (by default only rank 0 logs them)
LOOM_LOG_LEVEL=info "$mpiexec" -n 2 "$loom" serve --checkpoint ck --port 0 --port-file port --max-len 512 \
  --set comm.plugin=mpi --set parallel.tensor=2 2> serve.log &
mpid=$!
for _ in $(seq 200); do
  [ -s port ] && break
  kill -0 "$mpid" 2> /dev/null || { cat serve.log; exit 1; }
  sleep 0.1
done
[ -s port ] || { echo "no port"; cat serve.log; exit 1; }
grep -q "\[r1\].*on this rank" serve.log || { echo "rank 1 holds no shard"; cat serve.log; exit 1; }
prompts=("The meaning of life is" "once upon a" "king" "to be or not to be" "q")
for p in "${prompts[@]}"; do
  "$loom" generate --checkpoint ck --prompt "$p" --max-new-tokens 30 --temperature 0 \
    2> /dev/null > "gen-${#p}.txt"
done
"$loom" generate --checkpoint ck --prompt "${prompts[0]}" --max-new-tokens 0 \
  --logits-out logits.safetensors > /dev/null 2>&1
python3 - "$(cat port)" "${prompts[@]}" <<'PY'
import http.client, json, sys, threading
port, prompts = int(sys.argv[1]), sys.argv[2:]

def post(method, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request(method, path, body=json.dumps(body).encode())
    r = c.getresponse()
    out = json.loads(r.read())
    assert r.status == 200, (r.status, out)
    return out

got = {}
def worker(i):
    p = prompts[i % len(prompts)]
    got[i] = (p, post("POST", "/v1/completions", {"prompt": p, "max_tokens": 30, "temperature": 0})["choices"][0]["text"])
threads = [threading.Thread(target=worker, args=(i,)) for i in range(10)]
for t in threads: t.start()
for t in threads: t.join()
for p, text in got.values():
    want = open(f"gen-{len(p)}.txt", encoding="utf-8").read()[len(p):-1]
    assert text == want, (p, text, want)
print("tensor 2: 10 concurrent greedy requests = loom generate on one rank")
PY
echo "tensor 2: prompt logprobs max |2 ranks - float64 of 1 rank| = $(python3 "$here/client.py" \
  --logprobs "$(cat port)" "${prompts[0]}" logits.safetensors)"
url=http://127.0.0.1:$(cat port)
curl -s "$url/v1/completions" -d '{"prompt": "x", "max_tokens": 400, "temperature": 0}' > inflight.json &
cpid=$!
for _ in $(seq 200); do
  curl -s "$url/health" | grep -q '"running":1' && break
  sleep 0.01
done
# SIGTERM to rank 0 (mpiexec itself forwards a SIGTERM to every rank, drains the same way,
# but reports 1 for a job it was asked to end); the other ranks ignore it and follow
rank0=""
for p in $(pgrep -P "$mpid"); do
  tr '\0' '\n' < "/proc/$p/environ" | grep -qx 'OMPI_COMM_WORLD_RANK=0' && rank0=$p
done
[ -n "$rank0" ] || { echo "no rank 0 process under mpiexec"; exit 1; }
kill -TERM "$rank0"
wait "$cpid"
status=0
wait "$mpid" || status=$?
mpid=""
python3 -c 'import json; c=json.load(open("inflight.json"))["choices"][0]; assert c["finish_reason"] == "length", c'
[ "$status" = 0 ] || { echo "mpiexec exited $status after SIGTERM"; tail -5 serve.log; exit 1; }
grep -q "finishing what is in flight" serve.log || { echo "no drain"; cat serve.log; exit 1; }
echo "SIGTERM to rank 0: the request in flight finished, both ranks exited 0"
