#!/usr/bin/env bash
# Aux-loss-free balancing (DeepSeek-V3; Megatron's --moe-router-enable-expert-bias): a GPT
# with 4 experts on a sigmoid router trains 12 iterations, saving at 6 and 12. After each
# step every layer's router.expert_bias must have moved by exactly
#   rate * sign(mean load - load of the expert)
# in float32, the loads being the step's kept choices per expert over the global batch,
# read back from the metrics (each layer's moe_load shares x batch x seq x topk). The
# recomputation (below, the standard library only) reads the checkpoint with its own
# safetensors reader. Then: the bias changes routing (the loads differ from the same run
# without it from step 2 on), and the refusals (a softmax router; expert tensor parallelism
# without experts, with a hidden size it cannot split, or of another degree than tensor).
#   expert_bias.sh LOOM
set -euo pipefail
loom=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
scratch
{
  toml_section train seed=5 iters=12 micro_batch_size=2 global_batch_size=4 seq_len=16
  toml_section lr max=3e-3
  gpt_sections num_documents=100 doc_length=64 num_experts=4 moe_router_topk=2 \
    moe_router_score_function=sigmoid moe_router_bias_update_rate=0.01
  toml_section checkpoint interval=6
} > r.toml
"$loom" run r.toml --set model.moe_router_enable_expert_bias=true --set train.metrics=bias.jsonl \
  --set checkpoint.save=ck 2> log || { cat log; exit 1; }
"$loom" run r.toml --set train.metrics=plain.jsonl 2> log || { cat log; exit 1; }
python3 - "$here/../model/hf" <<'PY'
import json, struct, sys
sys.path.insert(0, sys.argv[1])
from st import read, floats  # tests/model/hf/st.py: an independent safetensors reader

def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]

rows = [json.loads(l) for l in open("bias.jsonl")]
rows = [r for r in rows if "moe_load.h0.e0" in r]
plain = [r for r in (json.loads(l) for l in open("plain.jsonl")) if "moe_load.h0.e0" in r]
assert [r["iter"] for r in rows] == list(range(1, 13)), [r["iter"] for r in rows]
routed = 4 * 16 * 2  # global batch x seq_len x topk
bias = {l: [0.0] * 4 for l in (0, 1)}
for r in rows:
    for l in (0, 1):
        load = [r[f"moe_load.h{l}.e{e}"] * routed for e in range(4)]
        assert all(abs(x - round(x)) < 1e-6 for x in load), load
        load = [round(x) for x in load]
        assert sum(load) == routed, load  # dropless
        mean = sum(load) / 4
        for e in range(4):
            step = 0.01 * ((mean > load[e]) - (mean < load[e]))
            bias[l][e] = f32(bias[l][e] + f32(step))
    if r["iter"] in (6, 12):
        t = read(f"ck/iter_{r['iter']:07d}/model.safetensors")
        for l in (0, 1):
            dtype, shape, data = t[f"h.{l}.moe.router.expert_bias"]
            got = list(floats(dtype, data))
            assert shape == [4] and got == bias[l], (r["iter"], l, got, bias[l])
        print(f"iteration {r['iter']}: expert biases {bias[0]} and {bias[1]} as recomputed")
same = [all(r[k] == p[k] for k in r if k.startswith("moe_load")) for r, p in zip(rows, plain)]
assert same[0] and not any(same[1:]), same
print("the bias changes routing from step 2 on (step 1 routes alike with a zero bias)")
PY
expect_refusal() {  # expect_refusal MESSAGE COMMAND ARGS...
  local msg=$1
  shift
  set +e
  "$loom" "$@" > out 2>&1
  local rc=$?
  set -e
  [ $rc = 2 ] && grep -qF "$msg" out || { echo "expected exit 2 with: $msg (got $rc)"; cat out; exit 1; }
  echo "refused: $msg"
}
expect_refusal 'moe_router_enable_expert_bias biases the sigmoid scores; moe_router_score_function is "softmax"' \
  run r.toml --set model.moe_router_enable_expert_bias=true \
  --set model.moe_router_score_function=softmax
# expert tensor parallelism, named by validate: a dense model, an expert hidden size that does
# not split, a degree other than 1 or tensor
expect_refusal 'expert_tensor = 2 splits a mixture of experts, and model.num_experts is 0' \
  validate r.toml --world 2 --set model.num_experts=0 --set parallel.tensor=2 \
  --set parallel.expert_tensor=2
expect_refusal 'model.moe_ffn_hidden_size = 25 is not divisible by expert_tensor = 2' \
  validate r.toml --world 2 --set model.moe_ffn_hidden_size=25 --set parallel.tensor=2 \
  --set parallel.expert_tensor=2
expect_refusal 'expert_tensor = 2 must be 1 or tensor (4)' \
  validate r.toml --world 4 --set parallel.tensor=4 --set parallel.expert_tensor=2
# parallel folding (an expert group across tensor ranks, or a smaller expert-tensor group) is
# refused by name: TP2 x DP1 cannot hold EP2
expect_refusal "Megatron's parallel folding, an expert group across tensor ranks, is not" \
  validate r.toml --world 2 --set parallel.tensor=2 --set parallel.expert=2
expect_refusal 'parallel folding onto a smaller expert-tensor group is not implemented' \
  validate r.toml --world 4 --set parallel.tensor=4 --set parallel.expert_tensor=2
