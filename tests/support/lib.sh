# Shell helpers the tests' scripts source (`. "$here/../support/lib.sh"`), so that each
# script keeps only what it checks. $loom and $mpiexec are the sourcing script's.
# shellcheck shell=bash disable=SC2154

# tests/, absolute: where helpers below find the tests' data after a script changed folder.
tests_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Open MPI's settings for every rank a script starts, itself or through `loom parity` and
# `loom launch` (support/mpi.env says why each; loom_mpi_env gives CMake's tests the same).
while IFS= read -r _line; do
  case $_line in [A-Z]*=*) export "${_line?}" ;; esac
done < "$tests_dir/support/mpi.env"
unset _line

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

# scratch: a fresh folder, $dir, made the current one; it is removed when the script exits.
scratch() {
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
  mpi_session_in "$dir"
  cd "$dir" || exit 1
}

# mpi_session_in DIR: Open MPI's session folders (ompi.<host>.<uid>/pid.<pid>) under DIR, the
# script's own, rather than in /tmp, where the mpiruns of two tests raced: one removed the
# shared folder as empty as it ended while the other was making its own in it (mpirun:
# "orte_session_dir failed", layouts.bert.tp2sp once in a suite run). scratch and
# parity_scratch call it; a script with a folder of its own calls it with that.
mpi_session_in() {
  export OMPI_MCA_orte_tmpdir_base=$1
}

# fail MESSAGE: "FAIL: MESSAGE" and the last 20 lines of out.txt (where the scripts that use
# it send the output of the command under test), then exit 1.
fail() {
  echo "FAIL: $*"
  [ -f out.txt ] && tail -20 out.txt
  exit 1
}

# python_has WHAT IMPORT: unless python3 runs IMPORT, "skipped: python3 has no WHAT" and exit
# 77 (ctest's Skipped), for a test of what only some machines' python3 has.
python_has() {
  python3 -c "$2" 2> /dev/null || { echo "skipped: python3 has no $1"; exit 77; }
}

# parity_scratch: $dir, a temporary folder removed at exit, holding docs.jsonl: the small
# local corpus of the `loom parity` tests (the quick start's fortunes may not be installed):
# tests/training/parity-corpus.jsonl.gz, every paragraph of docs/*.md as of 2026-11-28 (commit
# 8117ec4), frozen. These tests read docs/ itself until then, so every edit of the docs changed
# their data, and the fp32 runs of the small MoE models are sensitive to it: a near tie routed
# the other way on some data (qwen3moe's PP2 x TP2 with SP drifted to 8e-5 after a docs edit
# while fp64 stayed within 3e-16). The caller stays where it is.
parity_scratch() {
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
  mpi_session_in "$dir"
  parity_corpus > "$dir/docs.jsonl"
}
parity_corpus() {
  python3 -c 'import gzip, sys; sys.stdout.buffer.write(gzip.open(sys.argv[1]).read())' \
    "$tests_dir/training/parity-corpus.jsonl.gz"
}

# parity_layouts NAME RECIPE LAYOUTS COUNT DTYPE ARGS...: `loom parity RECIPE --layouts LAYOUTS
# --dtype DTYPE` with the caller's `small` options (its --iters $iters among them) and ARGS;
# fails unless all COUNT layouts match 1 rank over $iters iterations, else prints the table.
parity_layouts() {
  local name=$1 recipe=$2 layouts=$3 count=$4 dtype=$5
  shift 5
  "$loom" parity "$recipe" --layouts "$layouts" --dtype "$dtype" "${small[@]}" "$@" \
    > "$dir/$name-$dtype.txt" 2> "$dir/$name-$dtype.err"
  local rc=$?
  [ $rc -eq 0 ] || { cat "$dir/$name-$dtype.txt"; tail -20 "$dir/$name-$dtype.err"; \
                     fail "$name $dtype: exit $rc"; }
  local all="all $count layouts match 1 rank"
  [ "$count" = 1 ] && all="the layout matches 1 rank"
  grep -q "$all" "$dir/$name-$dtype.txt" ||
    { cat "$dir/$name-$dtype.txt"; fail "$name $dtype: not every layout passed"; }
  grep -q "$iters iterations in $dtype" "$dir/$name-$dtype.txt" ||
    { cat "$dir/$name-$dtype.txt"; fail "$name $dtype: not $iters iterations in $dtype"; }
  echo "== $name $dtype"
  sed -n '/^LAYOUT/,/^$/p' "$dir/$name-$dtype.txt"
}

# DeepSeek-V3 in miniature on a 4-layer GPT of width 32 (equivalence.sh's dsv3, resume.sh,
# reshard.sh): multi-head latent attention (query latent 12, key/value latent 16, heads of
# 8 + 4 rotated, values of 8) and its mixture of experts (the sigmoid router with the expert
# bias moving 0.01 a step, 4 experts in 2 groups, top-2 from the best group, x 2.5, the
# per-sequence balancing loss, a shared expert of one expert's size, the first layer dense).
DSV3_MODEL=(--set model.norm=rmsnorm --set model.activation=swiglu --set model.position=rope
            --set model.bias=false --set model.tie_embeddings=false
            --set model.multi_latent_attention=true --set model.q_lora_rank=12
            --set model.kv_lora_rank=16 --set model.qk_head_dim=8
            --set model.qk_pos_emb_head_dim=4 --set model.v_head_dim=8
            --set model.num_experts=4 --set model.moe_router_topk=2
            --set model.moe_ffn_hidden_size=24 --set model.moe_router_score_function=sigmoid
            --set model.moe_router_enable_expert_bias=true
            --set model.moe_router_bias_update_rate=0.01
            --set model.moe_router_num_groups=2 --set model.moe_router_group_topk=1
            --set model.moe_router_topk_scaling_factor=2.5
            --set model.moe_aux_loss_coeff=0.001
            --set model.moe_router_load_balancing_type=seq_aux_loss
            --set model.moe_shared_expert_intermediate_size=24
            --set "model.moe_layer_freq=[0]+[1]*3")

# A Nemotron-H-style hybrid in miniature on a 4-layer GPT of width 32 (equivalence.sh's
# hybrid, parity_families.sh, reshard.sh): Mamba-2, attention, MLP, Mamba-2; each mixer 8
# heads of 8 channels in 2 groups, a state of 8, 4 taps, chunks of 5 (rows of 16 end in a
# short chunk); no position encoding.
HYBRID_MODEL=(--set "model.hybrid_override_pattern=M*-M" --set model.norm=rmsnorm
              --set model.activation=swiglu --set model.position=none --set model.bias=false
              --set model.tie_embeddings=false --set model.mamba_head_dim=8
              --set model.mamba_num_groups=2 --set model.mamba_state_dim=8
              --set model.mamba_chunk_size=5)

# now: the time, for since. since T0: seconds from T0 (a `now`) to now, one decimal.
# below X LIMIT: whether X < LIMIT (decimals).
now() { date +%s.%N; }
since() { python3 -c "import time; print(f'{time.time() - $1:.1f}')"; }
below() { python3 -c "import sys; sys.exit(0 if $1 < $2 else 1)"; }

# toml_section NAME [KEY=VALUE...]: a recipe's [NAME] table, a line per KEY. A VALUE that is
# not a number, a boolean, a quoted string or an array is written as a string ("VALUE").
toml_section() {
  echo "[$1]"
  shift
  local kv value
  for kv in "$@"; do
    value=${kv#*=}
    if ! [[ $value =~ ^(-?[0-9][0-9_.eE+-]*|true|false|\".*|\[.*)$ ]]; then
      value="\"$value\""
    fi
    echo "${kv%%=*} = $value"
  done
}

# gpt_sections [KEY=VALUE...]: the [backend], [model], [tokenizer] and [data] sections of a
# small GPT over the byte tokenizer and mock data, on one thread. KEY: n_layer, n_head, n_embd
# and max_seq_len (2, 4, 32 and 16 unless given); threads (1 unless given; empty: the
# backend's default, every core); num_documents and doc_length (dataset/mock's defaults unless
# given); any other KEY is one more [model] key, after those four.
gpt_sections() {
  local n_layer=2 n_head=4 n_embd=32 max_seq_len=16 threads=1 num_documents="" doc_length=""
  local kv extra=()
  for kv in "$@"; do
    case ${kv%%=*} in
      n_layer | n_head | n_embd | max_seq_len | threads | num_documents | doc_length)
        local "$kv" ;;
      *) extra+=("$kv") ;;
    esac
  done
  toml_section backend measure_gemm=false ${threads:+"threads=$threads"}
  toml_section model "n_layer=$n_layer" "n_head=$n_head" "n_embd=$n_embd" \
    "max_seq_len=$max_seq_len" "${extra[@]}"
  toml_section tokenizer plugin=byte
  toml_section data plugin=mock ${num_documents:+"num_documents=$num_documents"} \
    ${doc_length:+"doc_length=$doc_length"}
}

# tiny_recipe FILE [ITERS]: a GPT of 2 layers, width 32, over the byte tokenizer and mock
# data, that trains ITERS (default 2) iterations in about a second on one CPU thread.
tiny_recipe() {
  { toml_section train "iters=${2:-2}" micro_batch_size=2 seq_len=16; gpt_sections; } > "$1"
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
# [lr] (and anything else) beside them. KEY=VALUE after DOCS: more [model] keys.
small_gpt_sections() {
  gpt_sections n_layer=4 "num_documents=${1:-200}" doc_length=64 "${@:2}"
}

# fp8_curves_recipe [KEY=VALUE...]: r.toml, small_gpt_sections' GPT (with those [model] keys)
# for 60 iterations of 8 samples, each logged (training.fp8, fp8_delayed and fp8_moe compare
# their curves); and run_curve NAME
# [LOOM RUN ARGS...]: one run of it (or of $curve_recipe when set; LOOM: $loom) with its
# metrics in NAME.jsonl and its log in NAME.log, failing the test when the run fails.
fp8_curves_recipe() {
  {
    toml_section train seed=5 iters=60 micro_batch_size=2 global_batch_size=8 seq_len=16 \
      log_interval=1
    toml_section lr max=3e-3 warmup_iters=5 decay_iters=60
    small_gpt_sections 400 "$@"
  } > r.toml
}
run_curve() {
  local name=$1
  shift
  "$loom" run "${curve_recipe:-r.toml}" --set "train.metrics=$name.jsonl" "$@" 2> "$name.log" ||
    { tail -5 "$name.log"; fail "$name: the run failed"; }
}

# bert_data_sections: the [tokenizer] and [data] sections of dataset/bert over the sentences
# and WordPiece vocabulary of tests/data/data/bert_masking (make_bert_reference.py), 80 % of
# the sentences to train on and 20 % to evaluate on.
bert_data_sections() {
  local data=$tests_dir/data/data/bert_masking
  toml_section tokenizer plugin=wordpiece "vocab_file=$data/vocab.txt"
  toml_section data plugin=bert "prefix=$data/sentences" split=80,20,0
}

# twenty_step_sections GLOBAL_BATCH SEQ_LEN: the [train], [lr] and [optimizer] sections of
# the runs held against each other to a tolerance (equivalence.sh: layouts; swap_attention.sh:
# attention plugins): 20 iterations of GLOBAL_BATCH samples of SEQ_LEN tokens from seed 7,
# logged every 5, 2 batches evaluated at 10 and 20, AdamW with eps = 1e-6. Why 1e-6: the
# attention's key bias has an exactly zero gradient (softmax is shift-invariant per query), so
# what backward computes for it is rounding noise (~1e-10), and any change of summation order
# changes that noise. With eps = 1e-8 AdamW turns it into steps of about lr * |g| / eps, up to
# 1% of lr, which would make the key bias differ between layouts by more than the tolerance
# while every other tensor agrees to 1e-7. eps = 1e-6 keeps that amplified noise below the
# tolerance; a real error in a gradient (>= 1e-6) still shows.
twenty_step_sections() {
  toml_section train seed=7 iters=20 micro_batch_size=2 "global_batch_size=$1" "seq_len=$2" \
    log_interval=5 eval_interval=10 eval_iters=2
  toml_section lr max=3e-3 warmup_iters=2
  toml_section optimizer plugin=adamw eps=1e-6
}

# reshard_recipe: the recipe of the tests that resume a checkpoint on other layouts (fsdp.sh,
# reshard.sh): small_gpt_sections' GPT for 12 iterations of 8 samples, on the lr schedule of
# 12 (also for the runs that stop at 6), AdamW with eps = 1e-6 (see twenty_step_sections: keeps
# the key bias's rounding noise small), no periodic checkpoints.
reshard_recipe() {
  toml_section train seed=5 iters=12 micro_batch_size=2 global_batch_size=8 seq_len=16
  toml_section lr max=3e-3 warmup_iters=2 decay_iters=12
  toml_section optimizer plugin=adamw eps=1e-6
  toml_section checkpoint interval=0
  small_gpt_sections 200
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

# sft_quickstart_model N ITERS ARGS...: recipes/sft-quickstart.toml as its header runs it, in
# run/sft/ of the current folder: N conversations of tools/sft-conversations in ChatML with
# EOD appended, then ITERS iterations on one thread with ARGS (log in train.log; a run that
# fails shows its end and exits 1).
sft_quickstart_model() {
  local n=$1 iters=$2
  shift 2
  "$tests_dir/../tools/sft-conversations" run/sft/conversations.jsonl "$n" > /dev/null
  "$loom" preprocess --input run/sft/conversations.jsonl --output-prefix run/sft/arith \
    --tokenizer byte --chat-format chatml --append-eod > /dev/null 2>&1
  "$loom" run "$tests_dir/../recipes/sft-quickstart.toml" --set train.iters="$iters" \
    --set backend.threads=1 "$@" 2> train.log || { tail -20 train.log; exit 1; }
}

# resume_half KEY RECIPE ARGS...: `loom run RECIPE ARGS` (20 iterations) straight (metrics in
# pre.jsonl), then 10 iterations of the same 20-iteration schedule saved to half/, resumed to
# 20 (resumed.jsonl); iterations 11..20 must log the straight run's loss and KEY, bitwise. Runs
# in the current folder; a run that fails shows the end of its log and exits 1.
resume_half() {
  local key=$1
  shift
  "$loom" run "$@" --set train.metrics=pre.jsonl 2> pre.log || { tail -20 pre.log; exit 1; }
  "$loom" run "$@" --set train.iters=10 --set lr.decay_iters=20 --set checkpoint.save=half \
    2> half.log || { tail -20 half.log; exit 1; }
  "$loom" run "$@" --set checkpoint.save=half --set checkpoint.load=half \
    --set train.metrics=resumed.jsonl 2> resumed.log || { tail -20 resumed.log; exit 1; }
  python3 - "$key" <<'PY'
import json, sys
key = sys.argv[1]
straight = [json.loads(l) for l in open("pre.jsonl") if '"loss"' in l]
resumed = [json.loads(l) for l in open("resumed.jsonl") if '"loss"' in l]
assert [r["iter"] for r in resumed] == list(range(11, 21)), resumed
for a, b in zip(straight[10:], resumed):
    assert a["loss"] == b["loss"] and a[key] == b[key], (a, b)
print(f"resume: iterations 11-20 equal the straight run bitwise (loss {resumed[-1]['loss']:.6f})")
PY
}

# train_style STYLE RECIPE: `loom run RECIPE` as a GPT-2-style model (STYLE gpt), a
# Llama-style one (llama: RMSNorm, SwiGLU, RoPE, 2 key/value heads, untied embeddings, no
# biases), a Qwen3-style one (qwen3: Llama's with QK-norm and a head size of 6) or a
# Qwen2-MoE-style one (qwen2moe: Llama's with q/k/v biases, 4 experts and a gated shared
# expert) or DeepSeek-V3 in miniature (dsv3: DSV3_MODEL on 4 layers; dsv3mtp: with one depth
# of multi-token prediction) or a Mamba-2 stack
# (mamba2: HYBRID_MODEL's mixers, two layers of them) or a NemotronH-style hybrid (nemotronh:
# HYBRID_MODEL with a squared-ReLU MLP), saved to the checkpoint trained-STYLE;
# a failed run shows the end of run.log and exits 1.
train_style() {
  local sets=()
  case $1 in llama | qwen3 | qwen2moe)
    sets=(--set model.norm=rmsnorm --set model.activation=swiglu --set model.position=rope
          --set model.n_kv_head=2 --set model.tie_embeddings=false --set model.bias=false) ;;
  esac
  [ "$1" = qwen3 ] && sets+=(--set model.qk_layernorm=true --set model.kv_channels=6)
  [ "$1" = dsv3 ] && sets=("${DSV3_MODEL[@]}" --set model.n_layer=4)
  [ "$1" = dsv3mtp ] && sets=("${DSV3_MODEL[@]}" --set model.n_layer=4 --set model.mtp_num_layers=1)
  [ "$1" = mamba2 ] && sets=("${HYBRID_MODEL[@]}" --set model.hybrid_override_pattern=MM
                             --set model.n_layer=2)
  [ "$1" = nemotronh ] && sets=("${HYBRID_MODEL[@]}" --set model.activation=squared_relu
                                --set model.n_layer=4)
  [ "$1" = qwen2moe ] && sets+=(--set model.add_qkv_bias=true --set model.num_experts=4
    --set model.moe_ffn_hidden_size=8 --set model.moe_shared_expert_intermediate_size=12
    --set model.moe_shared_expert_gate=true)
  "$loom" run "$2" "${sets[@]}" --set checkpoint.save="trained-$1" 2> run.log ||
    { tail -20 run.log; exit 1; }
}

# same_state A B: the two checkpoint folders hold the same tensors and state, byte for byte
# (their recipes, manifests and locks name the runs, and differ).
same_state() {
  local f n=0
  while read -r f; do
    cmp -s "$1/$f" "$2/$f" || return 1
    n=$((n + 1))
  done < <(cd "$1" && find . -type f ! -name .loom.lock ! -name recipe.toml ! -name manifest.json)
  [ "$n" -gt 1 ]
}

# same_metrics NAME A B: the metrics files A and B of two runs hold the same lines, every
# number but the clocks, memory and timers identical; prints NAME's step count and the span
# of its gradient norms, or the first difference (and returns 1).
same_metrics() {
  python3 - "$@" <<'PY'
import json, sys
name, files = sys.argv[1], sys.argv[2:]
clock = {"step_s", "tokens_per_s", "mfu", "mem_bytes", "comm_wait_s", "slowest_rank"}
def kept(k):
    return k not in clock and not k.startswith(("busy_", "timer", "ceiling_"))
runs = [[{k: v for k, v in json.loads(l).items() if kept(k)} for l in open(f)] for f in files]
if runs[0] != runs[1]:
    for a, b in zip(*runs):
        if a != b:
            sys.exit(f"{name}: first difference {a} against {b}")
    sys.exit(f"{name}: {len(runs[0])} against {len(runs[1])} lines")
steps = [r for r in runs[0] if "grad_norm" in r]
norms = [r["grad_norm"] for r in steps if r["grad_norm"] is not None]  # null: not finite
span = f"{min(norms):.4g}..{max(norms):.4g}" if norms else "none finite"
print(f"{name}: {len(steps)} steps identical; grad_norm {span}, "
      f"{len(steps) - len(norms)} not finite, skipped {sum(r.get('skipped', 0) for r in steps)}")
PY
}

# clip_acts METRICS CLIP: every step of the metrics file has a gradient norm above CLIP (so
# train.grad_clip scaled every update); fails naming the file.
clip_acts() {
  python3 -c "
import json
n = [json.loads(l)['grad_norm'] for l in open('$1') if 'grad_norm' in l]
assert n and min(n) > $2, n
" || fail "$1: the clip did not act on every step"
}

# same_both_ways KEY NAME RECIPE ARGS...: `loom run RECIPE ARGS` with KEY = true and with KEY =
# false (under the caller's ${launch[@]} when it sets one), each writing NAME.MODE.jsonl (its
# metrics), NAME.MODE.log and its final checkpoint ck_NAME.MODE; then the two runs compared
# by same_metrics and same_state. Fails naming NAME.
same_both_ways() {
  local key=$1 name=$2 recipe=$3 mode
  shift 3
  for mode in true false; do
    rm -rf "ck_$name.$mode"
    ${launch[@]+"${launch[@]}"} "$loom" run "$recipe" --set "$key=$mode" \
      --set "train.metrics=$name.$mode.jsonl" --set "checkpoint.save=ck_$name.$mode" "$@" \
      2> "$name.$mode.log" || { tail -5 "$name.$mode.log"; fail "$name: the run with $mode failed"; }
  done
  same_metrics "$name" "$name.true.jsonl" "$name.false.jsonl" || fail "$name: the two runs differ"
  same_state "ck_$name.true" "ck_$name.false" || fail "$name: the checkpoints differ"
}
