# shellcheck shell=bash disable=SC2154
# The serving rows of tools/gpu-check (issue 34), sourced by it: they use its $B, $work, $out,
# record, gpu_row, left, value, json_field and bench_sets.
#
# serve_rows NAME RECIPE [--set ...]: an untrained checkpoint of RECIPE's model (one step on
# the GPU: decoding's speed does not depend on the weights' values), `loom serve` on it with
# continuous batching (64 slots, 256 tokens a sequence), and tools/bench/serve_load.py
# streaming at 1, 16 and 64 concurrent clients for LOOM_SERVE_SECONDS (default 8) each:
# prompts of 12 random token ids, 64 new tokens, top-k 50; generated tokens/s and the time to
# first token. Then transformers' batched generate on the same shape and dtype at batch 1, 16
# and 64 (tools/bench/hf_generate.py, the same prompt and new lengths) and Loom's ratio of
# tokens/s at each. The recipes' null tokenizer reads prompts as decimal token ids.
serve_rows() {
  local name=$1 recipe=$B/recipes/$2.toml ck log port pid c f rc tps k family
  shift 2
  for k in ${skips[@]+"${skips[@]}"}; do
    [ "$k" = "serve-$name" ] && { record "serve $name" "skipped (--skip)"; return; }
  done
  gpu_row "serve $name" 150 || return
  ck=$work/serve-$name log=$work/serve-$name.log
  echo "-- serve $name"
  (cd "$work" && timeout 150 "$B/bin/loom" run "$recipe" --set train.iters=1 \
    --set train.eval_interval=0 --set train.metrics= --set "checkpoint.save=$ck" "$@" \
    ${bench_sets[@]+"${bench_sets[@]}"}) >"$log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] || [ ! -f "$ck/latest_checkpointed_iteration.txt" ]; then
    record "serve $name" "FAIL (the checkpoint: exit $rc: $(grep -m1 -i error "$log" | cut -c1-100))"
    cat "$log" >>"$out/bench.log"
    return
  fi
  python3 -c 'import random, sys
r = random.Random(0); v = int(sys.argv[1])
for _ in range(256): print(" ".join(str(r.randrange(v)) for _ in range(12)))' \
    "$(value vocab_size 50256 "$recipe")" >"$work/serve-prompts.txt"
  rm -f "$work/serve-port"
  "$B/bin/loom" serve --checkpoint "$ck" --port 0 --port-file "$work/serve-port" --max-batch 64 \
    --max-queue 64 --max-len 256 2>>"$log" &
  pid=$!
  for _ in $(seq 1200); do
    [ -s "$work/serve-port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ ! -s "$work/serve-port" ]; then
    kill "$pid" 2>/dev/null
    record "serve $name" "FAIL (loom serve did not listen: $(grep -m1 -i error "$log" | cut -c1-100))"
    cat "$log" >>"$out/bench.log"
    return
  fi
  port=$(cat "$work/serve-port")
  declare -A serve_tps=()
  for c in 1 16 64; do
    fits 30 || { record "serve $name c$c" "skipped (time budget)"; continue; }
    f=$work/serve-$name-c$c.json
    timeout 120 python3 "$B/tools/bench/serve_load.py" "$port" "$c" "${LOOM_SERVE_SECONDS:-8}" 64 \
      "$work/serve-prompts.txt" --stream >"$f" 2>>"$log"
    rc=$?
    tps=$(json_field tokens_per_s "$f")
    if [ $rc -ne 0 ] || [ -z "$tps" ] || [ "$(json_field requests "$f")" = 0 ]; then
      record "serve $name c$c" "FAIL (exit $rc: $(head -c 120 "$f"))"
      continue
    fi
    serve_tps[$c]=$tps
    record "serve $name c$c" "$(printf '%.0f' "$tps") tok/s, TTFT p50 $(ms ttft_p50_s "$f") p99 $(ms ttft_p99_s "$f"), latency p50 $(ms latency_p50_s "$f"), $(json_field requests "$f") requests, $(json_field errors "$f") errors"
  done
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  { echo "==== serve $name"; cat "$log" "$work/serve-$name"-c*.json; } >>"$out/bench.log"

  gpu_row "transformers generate $name" 60 || return
  family=gpt2
  [ "$(value norm layernorm "$recipe")" = rmsnorm ] && family=llama
  f=$work/hf-$name.jsonl
  timeout "$(($(left) - 10))" python3 "$B/tools/bench/hf_generate.py" --family "$family" \
    --n_layer "$(value n_layer 12 "$recipe")" --n_head "$(value n_head 12 "$recipe")" \
    --n_kv_head "$(value n_kv_head 0 "$recipe")" --n_embd "$(value n_embd 768 "$recipe")" \
    --ffn "$(value ffn_hidden 0 "$recipe")" --vocab $(($(value vocab_size 50256 "$recipe") + 1)) \
    --rope_theta "$(value rope_theta 10000.0 "$recipe")" --tie "$(value tie_embeddings true "$recipe")" \
    --max_len "$(value max_seq_len 1024 "$recipe")" --dtype "$(value dtype bf16 "$recipe")" \
    --batches 1,16,64 --prompt 12 --new 64 >"$f" 2>"$work/hf-$name.err"
  rc=$?
  { echo "==== transformers generate $name (exit $rc)"; cat "$f" "$work/hf-$name.err"; } >>"$out/bench.log"
  if [ $rc -ne 0 ] || [ ! -s "$f" ]; then
    record "transformers generate $name" "FAIL (exit $rc: $(grep -v '^ ' "$work/hf-$name.err" | tail -1 | cut -c1-120))"
    return
  fi
  local ratios=""
  while IFS= read -r line; do
    local b hf
    b=$(json_field batch <(echo "$line")) hf=$(json_field tokens_per_s <(echo "$line"))
    record "transformers generate $name b$b" "$(printf '%.0f' "$hf") tok/s, TTFT $(ms ttft_s <(echo "$line")), decode $(printf '%.0f' "$(json_field decode_tokens_per_s <(echo "$line"))") tok/s"
    [ -n "${serve_tps[$b]:-}" ] &&
      ratios+="${ratios:+, }$b: $(awk -v a="${serve_tps[$b]}" -v h="$hf" 'BEGIN {printf "%.2f", a / h}')"
  done <"$f"
  record "loom serve / transformers $name" "${ratios:-n/a} (tokens/s at 1, 16, 64 clients against batch 1, 16, 64)"
}

# ms KEY FILE: a seconds field in milliseconds.
ms() { awk -v s="$(json_field "$1" "$2")" 'BEGIN {if (s == "" || s == "NaN") print "n/a"; else printf "%.1f ms", 1000 * s}'; }
