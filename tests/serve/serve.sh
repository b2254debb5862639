#!/usr/bin/env bash
# `loom serve` end to end on loopback, with curl here and Python's http.client (client.py):
#  - greedy text from PUT /api, /v1/completions and /v1/chat/completions equals
#    `loom generate --temperature 0` on the same prompt; streamed chunks concatenate to the
#    non-streamed text; prompt logprobs equal a float64 log-softmax of generate's logits;
#  - every bad request gets its 4xx JSON error and the server keeps serving;
#  - a full queue answers 503; a client that disconnects frees its sequence;
#  - SIGTERM finishes the request in flight, refuses new ones, and exits 0.
#   serve.sh LOOM
source "$(dirname "$0")/lib.sh" "$1"

start main --max-batch 8 --max-len 4096 \
  --set 'serve.chat_template=[{role}] {content}|' --set 'serve.chat_generation_prompt=[assistant] ' \
  --set 'serve.chat_stop=|'
url=http://127.0.0.1:$(cat main.port)
prompt="The meaning of life is"
"$loom" generate --checkpoint ck --prompt "$prompt" --max-new-tokens 40 --temperature 0 \
  --logits-out logits.safetensors > generate.txt 2> /dev/null

# ---- curl: every endpoint ----
code() { curl -s -o body.json -w '%{http_code}' "$@"; }
[ "$(code "$url/health")" = 200 ] || fail "/health"
grep -q '"status":"ok"' body.json || fail "/health body: $(cat body.json)"
[ "$(code "$url/v1/models")" = 200 ] || fail "/v1/models"
grep -q '"id":"ck"' body.json || fail "/v1/models body: $(cat body.json)"
[ "$(code -X PUT "$url/api" -H 'Content-Type: application/json' \
  -d "{\"prompts\": [\"$prompt\"], \"tokens_to_generate\": 40, \"top_k\": 1}")" = 200 ] ||
  fail "PUT /api: $(cat body.json)"
cp body.json api.json
[ "$(code "$url/v1/completions" -d "{\"prompt\": \"$prompt\", \"max_tokens\": 40, \"temperature\": 0}")" = 200 ] ||
  fail "/v1/completions: $(cat body.json)"
cp body.json completions.json
curl -sN "$url/v1/completions" \
  -d "{\"prompt\": \"$prompt\", \"max_tokens\": 40, \"temperature\": 0, \"stream\": true}" > stream.txt
[ "$(code "$url/v1/chat/completions" \
  -d '{"messages": [{"role": "user", "content": "hello"}], "max_tokens": 20, "temperature": 0}')" = 200 ] ||
  fail "/v1/chat/completions: $(cat body.json)"
cp body.json chat.json
curl -sN "$url/v1/chat/completions" \
  -d '{"messages": [{"role": "user", "content": "hello"}], "max_tokens": 20, "temperature": 0, "stream": true}' \
  > chat_stream.txt
python3 - "$prompt" <<'PY'
import json, sys
prompt = sys.argv[1]
gen = open("generate.txt", encoding="utf-8").read()[:-1]  # generate ends with a newline
assert gen.startswith(prompt), gen
want = gen[len(prompt):]
api = json.load(open("api.json"))
assert set(api) == {"text", "segments", "logprobs"}, api.keys()  # Megatron's fields
assert api["text"] == [prompt + want], (api["text"], want)
assert "".join(api["segments"][0]) == prompt + want
comp = json.load(open("completions.json"))
assert comp["choices"][0]["text"] == want, (comp, want)
assert comp["object"] == "text_completion" and comp["usage"]["prompt_tokens"] == len(prompt.encode())
events = [l[6:].rstrip("\n") for l in open("stream.txt") if l.startswith("data: ")]
assert events[-1] == "[DONE]", events[-1]
chunks = [json.loads(e) for e in events[:-1]]
assert "".join(c["choices"][0]["text"] for c in chunks) == want
assert chunks[-1]["choices"][0]["finish_reason"] == comp["choices"][0]["finish_reason"]
chat = json.load(open("chat.json"))
msg = chat["choices"][0]["message"]
assert msg["role"] == "assistant" and "|" not in msg["content"], chat
events = [l[6:].rstrip("\n") for l in open("chat_stream.txt") if l.startswith("data: ")]
assert events[-1] == "[DONE]"
chunks = [json.loads(e) for e in events[:-1]]
assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == msg["content"]
print("curl: greedy /api, /v1/completions = loom generate; streams concatenate to the text")
PY

# ---- curl: each bad request is a 4xx JSON error naming the problem ----
bad() {  # bad STATUS WORDS METHOD PATH [curl args...]
  local want=$1 words=$2 method=$3 path=$4
  shift 4
  local got
  got=$(code -X "$method" "$url$path" "$@")
  [ "$got" = "$want" ] || fail "$method $path $*: HTTP $got, not $want: $(head -c 300 body.json)"
  python3 -c 'import json,sys; e=json.load(open("body.json"))["error"]; assert sys.argv[1] in e["message"], e' \
    "$words" || fail "$method $path: the error does not say '$words': $(cat body.json)"
  printf '  %-4s %-28s %-40.40s -> %s %s\n' "$method" "$path" "$*" "$got" "$(python3 -c \
    'import json; print(json.load(open("body.json"))["error"]["message"][:70])')"
}
echo "bad requests (curl):"
bad 400 "malformed JSON" POST /v1/completions -d '{"prompt": "a",'
bad 400 "must be a JSON object" POST /v1/completions -d '["a"]'
bad 400 "'max_tokens' must be an integer" POST /v1/completions -d '{"prompt": "a", "max_tokens": "9"}'
bad 400 "'temperature' must be a number" POST /v1/completions -d '{"prompt": "a", "temperature": "hot"}'
bad 400 "did you mean 'max_tokens'" POST /v1/completions -d '{"prompt": "a", "max_token": 5}'
bad 400 "unknown field 'colour'" PUT /api -d '{"prompts": ["a"], "colour": 1}'
bad 400 "'tokens_to_generate' must be an integer from 0" PUT /api -d '{"prompts": ["a"], "tokens_to_generate": -1}'
bad 400 "'tokens_to_generate' must be an integer from 0" PUT /api -d '{"prompts": ["a"], "tokens_to_generate": 100000000}'
bad 400 "'max_tokens' must be an integer" POST /v1/completions -d '{"prompt": "a", "max_tokens": 1e30}'
bad 400 "more than the model's context" POST /v1/completions \
  -d "{\"prompt\": \"$(head -c 5000 /dev/zero | tr '\0' 'x')\", \"max_tokens\": 1}"
bad 400 "not valid UTF-8" POST /v1/completions --data-binary $'{"prompt": "\xff\xfe"}'
bad 413 "larger than" POST /v1/completions --data-binary @<(python3 -c 'print("{\"prompt\": \"" + "a" * 2000000 + "\"}")')
bad 400 "cannot set both" PUT /api -d '{"prompts": ["a"], "top_k": 5, "top_p": 0.5}'
bad 400 "empty prompts require add_BOS" PUT /api -d '{"prompts": [""]}'
bad 400 "'messages' must be" POST /v1/chat/completions -d '{"messages": []}'
bad 400 "role" POST /v1/chat/completions -d '{"messages": [{"role": "wizard", "content": "x"}]}'
bad 404 "does not exist" POST /v1/completions -d '{"prompt": "a", "model": "gpt-5"}'
bad 404 "no endpoint" GET /v2/models
bad 405 "takes PUT" POST /api -d '{"prompts": ["a"]}'
bad 400 "request body is empty" POST /v1/completions
[ "$(code "$url/health")" = 200 ] || fail "the server stopped serving after the bad requests"
# one request-log line per request, the refused ones too
grep -qE '"POST /v1/completions" 200 22 prompt \+ [0-9]+ generated tokens, [0-9.]+ ms' main.log &&
  grep -qE '"GET /v2/models" 404 0 prompt' main.log || fail "request log: $(tail -3 main.log)"

# ---- Python's http.client: the same endpoints and bad requests, logprobs ----
python3 "$here/client.py" "$(cat main.port)" "$prompt" logits.safetensors generate.txt

# ---- serve.chat_format: a family's format renders the messages and ends the reply ----
start fmt --max-batch 2 --max-len 4096 --set serve.chat_format=mistral
furl=http://127.0.0.1:$(cat fmt.port)
[ "$(code "$furl/v1/chat/completions" \
  -d '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 20, "temperature": 0}')" = 200 ] ||
  fail "chat_format mistral: $(cat body.json)"
cp body.json fmt_chat.json
[ "$(code "$furl/v1/completions" \
  -d '{"prompt": "<s>[INST] hi [/INST]", "max_tokens": 20, "temperature": 0, "stop": ["</s>"]}')" = 200 ] ||
  fail "chat_format by hand: $(cat body.json)"
python3 -c '
import json
chat, by_hand = json.load(open("fmt_chat.json")), json.load(open("body.json"))
assert chat["choices"][0]["message"]["content"] == by_hand["choices"][0]["text"], (chat, by_hand)
assert chat["usage"]["prompt_tokens"] == by_hand["usage"]["prompt_tokens"], (chat, by_hand)
print("serve.chat_format mistral: the reply of the prompt rendered by hand")'
[ "$(code "$furl/v1/chat/completions" \
  -d '{"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "hi"}]}')" = 400 ] ||
  fail "mistral accepted a system message"
grep -q "chat format mistral: Conversation roles must alternate" body.json ||
  fail "mistral's refusal: $(cat body.json)"
kill -9 "$(cat fmt.pid)"

# ---- a full queue answers 503; a client that disconnects frees its sequence ----
start small --max-batch 1 --max-queue 0 --max-len 4096
python3 "$here/client.py" --busy "$(cat small.port)"

# ---- SIGTERM: the request in flight finishes, new connections are refused, exit 0 ----
curl -s "$url/v1/completions" -d '{"prompt": "x", "max_tokens": 3000, "temperature": 0}' > inflight.json &
cpid=$!
# until the decode loop runs it: up to 30 s, since a loaded machine (ctest -j) can be slow
# to start it, and a SIGTERM before the request is in flight would test nothing
running=0
for _ in $(seq 3000); do
  curl -s "$url/health" | grep -q '"running":1' && { running=1; break; }
  sleep 0.01
done
[ "$running" = 1 ] || fail "the in-flight request never started decoding"
kill -TERM "$(cat main.pid)"
wait "$cpid"
python3 -c 'import json; c=json.load(open("inflight.json"))["choices"][0]; assert c["finish_reason"] in ("length", "stop") and c["text"], c'
status=0
wait "$(cat main.pid)" || status=$?
[ "$status" = 0 ] || fail "the server exited $status after SIGTERM: $(tail -5 main.log)"
grep -q "finishing what is in flight" main.log || fail "no drain message"
if curl -s -m 2 "$url/health" > /dev/null; then fail "still accepting after SIGTERM"; fi
echo "SIGTERM: in-flight request finished ($(python3 -c 'import json; print(json.load(open("inflight.json"))["usage"]["completion_tokens"])') tokens), exit 0"
echo "serve: all checks passed"
