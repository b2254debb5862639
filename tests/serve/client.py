"""`loom serve` through Python's http.client (serve.sh starts the servers).

  client.py PORT PROMPT LOGITS.safetensors GENERATE.txt
      every endpoint, every bad request, logprobs against a float64 log-softmax of
      `loom generate --logits-out`, seeded sampling, and concurrent requests (continuous
      batching) giving what each gives alone
  client.py --logprobs PORT PROMPT LOGITS.safetensors
      prints max |server - float64 reference| of the prompt's log-probabilities
  client.py --busy PORT      (a server with --max-batch 1 --max-queue 0)
      a full queue answers 503; a client that disconnects frees its sequence
"""
import http.client
import json
import math
import os
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model", "hf"))
import st  # noqa: E402  (the standard-library safetensors reader of the HF tests)


def request(port, method, path, body=None, raw=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    c.request(method, path, body=data, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    text = r.read()
    c.close()
    return r.status, json.loads(text) if text else None


def stream(port, path, body):
    """The data: events of a streamed request, parsed; [DONE] last."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", path, body=json.dumps(dict(body, stream=True)).encode())
    r = c.getresponse()
    assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream", r.status
    events = [l[6:].strip() for l in r.read().decode().split("\n") if l.startswith("data: ")]
    c.close()
    assert events[-1] == "[DONE]", events[-1]
    return [json.loads(e) for e in events[:-1]]


def prompt_logprob_error(port, prompt, logits_file):
    """max |server - float64 reference| over the prompt's log-probabilities (Megatron's
    tokens_to_generate 0), the reference a log-softmax of `loom generate --logits-out`."""
    s, a = request(port, "PUT", "/api", {"prompts": [prompt], "tokens_to_generate": 0, "logprobs": True})
    assert s == 200, a
    dtype, shape, raw = st.read(logits_file)["logits"]
    assert dtype == "F32" and shape[0] == len(prompt), shape
    vals = struct.unpack("<%df" % (shape[0] * shape[1]), raw)
    ids = list(prompt.encode())
    worst = 0.0
    for i in range(len(ids) - 1):
        row = vals[i * shape[1]:(i + 1) * shape[1]]
        mx = max(row)
        ref = row[ids[i + 1]] - mx - math.log(sum(math.exp(v - mx) for v in row))
        worst = max(worst, abs(ref - a["logprobs"][0][i]))
    assert len(a["logprobs"][0]) == len(ids) - 1 and worst < 1e-4, worst
    return worst


def check_endpoints(port, prompt, logits_file, generate_file):
    want = open(generate_file, encoding="utf-8").read()[len(prompt):-1]
    s, h = request(port, "GET", "/health")
    assert s == 200 and h["status"] == "ok", h
    s, m = request(port, "GET", "/v1/models")
    assert s == 200 and m["data"][0]["id"] == "ck", m
    s, a = request(port, "PUT", "/api", {"prompts": [prompt], "tokens_to_generate": 40, "top_k": 1})
    assert s == 200 and a["text"] == [prompt + want], a
    s, c = request(port, "POST", "/v1/completions", {"prompt": prompt, "max_tokens": 40, "temperature": 0})
    assert s == 200 and c["choices"][0]["text"] == want, c
    chunks = stream(port, "/v1/completions", {"prompt": prompt, "max_tokens": 40, "temperature": 0})
    assert "".join(x["choices"][0]["text"] for x in chunks) == want

    worst = prompt_logprob_error(port, prompt, logits_file)
    # /v1/completions logprobs: the greedy token is each step's most likely one
    s, c = request(port, "POST", "/v1/completions",
                   {"prompt": prompt, "max_tokens": 8, "temperature": 0, "logprobs": 2})
    lp = c["choices"][0]["logprobs"]
    assert "".join(lp["tokens"]) == c["choices"][0]["text"], lp
    for tok, l, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert len(top) <= 2 and abs(max(top.values()) - l) < 1e-9 and top[tok] == l, (tok, l, top)
    print(f"http.client: endpoints as curl; prompt logprobs max |server - float64 reference| = {worst:.2e}")

    # seeded sampling repeats, streamed or not; n choices
    body = {"prompt": prompt, "max_tokens": 30, "temperature": 0.9, "top_k": 20, "seed": 7}
    texts = [request(port, "POST", "/v1/completions", body)[1]["choices"][0]["text"] for _ in range(2)]
    streamed = "".join(x["choices"][0]["text"] for x in stream(port, "/v1/completions", body))
    assert texts[0] == texts[1] == streamed, (texts, streamed)
    s, c = request(port, "POST", "/v1/completions", {"prompt": prompt, "max_tokens": 10, "temperature": 0, "n": 3})
    assert [x["index"] for x in c["choices"]] == [0, 1, 2] and len({x["text"] for x in c["choices"]}) == 1
    # chat: the template by hand through /v1/completions gives the same reply
    s, ch = request(port, "POST", "/v1/chat/completions",
                    {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
                     "max_tokens": 20, "temperature": 0})
    s2, c = request(port, "POST", "/v1/completions",
                    {"prompt": "[system] be brief|[user] hi|[assistant] ", "max_tokens": 20,
                     "temperature": 0, "stop": ["|"]})
    assert ch["choices"][0]["message"]["content"] == c["choices"][0]["text"], (ch, c)
    assert ch["choices"][0]["finish_reason"] == c["choices"][0]["finish_reason"]

    # concurrent requests share the decode loop and each gets what it gets alone
    prompts = [prompt, "To be or not", "x", "Once upon a time, in a land far away", "42"]
    alone = {p: request(port, "POST", "/v1/completions", {"prompt": p, "max_tokens": 25, "temperature": 0})[1]
             ["choices"][0]["text"] for p in prompts}
    got, errors = {}, []

    def worker(i):
        p = prompts[i % len(prompts)]
        try:
            if i % 2:
                t = "".join(x["choices"][0]["text"] for x in
                            stream(port, "/v1/completions", {"prompt": p, "max_tokens": 25, "temperature": 0}))
            else:
                t = request(port, "POST", "/v1/completions",
                            {"prompt": p, "max_tokens": 25, "temperature": 0})[1]["choices"][0]["text"]
            got[i] = (p, t)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(alone[p] == t for p, t in got.values()) and len(got) == 20
    s, h = request(port, "GET", "/health")
    print(f"http.client: 20 concurrent requests = each alone ({h['decode_steps']} decode steps, "
          f"{h['generated_tokens']} tokens so far)")


def stream_raw(port, path, body):
    """Every data: event of a streamed request as sent ([DONE] last, unparsed)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", path, body=json.dumps(dict(body, stream=True)).encode())
    r = c.getresponse()
    assert r.status == 200, (r.status, r.read())
    events = [l[6:].strip() for l in r.read().decode().split("\n") if l.startswith("data: ")]
    c.close()
    return events


def check_openai_compat(port, prompt):
    """What standard OpenAI clients send beyond the basics."""
    # stream_options.include_usage: usage null on every chunk, then a last chunk with no
    # choices and the usage of the non-streamed answer
    body = {"prompt": prompt, "max_tokens": 12, "temperature": 0}
    s, whole = request(port, "POST", "/v1/completions", body)
    events = stream_raw(port, "/v1/completions", dict(body, stream_options={"include_usage": True}))
    assert events[-1] == "[DONE]", events
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["usage"] is None for c in chunks[:-1]), chunks
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"], chunks[-1]
    assert "".join(c["choices"][0]["text"] for c in chunks[:-1]) == whole["choices"][0]["text"]
    assert "usage" not in json.loads(stream_raw(port, "/v1/completions", body)[0])
    s, e = request(port, "POST", "/v1/completions", dict(body, stream_options={"include_usage": True}))
    assert s == 400 and e["error"]["param"] == "stream_options", e

    # GET /v1/models/{id}: the card, or OpenAI's 404 error
    s, card = request(port, "GET", "/v1/models/ck")
    assert s == 200 and card["id"] == "ck" and card["object"] == "model", card
    s, e = request(port, "GET", "/v1/models/gpt-4")
    assert s == 404 and e["error"]["type"] == "not_found_error" and "gpt-4" in e["error"]["message"], e

    # chat logprobs: OpenAI's {"content": [{token, logprob, bytes, top_logprobs}]}; greedy,
    # each token is its step's most likely; the stream's pieces are the same entries
    chat = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 20, "temperature": 0,
            "logprobs": True, "top_logprobs": 2}
    s, c = request(port, "POST", "/v1/chat/completions", chat)
    assert s == 200, c
    content = c["choices"][0]["logprobs"]["content"]
    assert "".join(t["token"] for t in content) == c["choices"][0]["message"]["content"], c
    for t in content:
        assert len(t["top_logprobs"]) == 2 and t["top_logprobs"][0]["token"] == t["token"], t
        assert abs(t["top_logprobs"][0]["logprob"] - t["logprob"]) < 1e-12 and t["logprob"] <= 0, t
        assert bytes(t["bytes"]).decode() == t["token"], t
    chunks = [json.loads(e) for e in stream_raw(port, "/v1/chat/completions", chat)[:-1]]
    streamed = [t for x in chunks if x["choices"][0]["logprobs"] for t in x["choices"][0]["logprobs"]["content"]]
    assert streamed == content, (streamed, content)
    s, c = request(port, "POST", "/v1/chat/completions", dict(chat, logprobs=False))
    assert s == 400 and c["error"]["param"] == "top_logprobs", c
    # and /v1/completions' logprobs streamed: the pieces add up to the non-streamed lists
    s, whole = request(port, "POST", "/v1/completions", dict(body, logprobs=2))
    chunks = [json.loads(e) for e in stream_raw(port, "/v1/completions", dict(body, logprobs=2))[:-1]]
    lps = [x["choices"][0]["logprobs"] for x in chunks if x["choices"][0]["logprobs"]]
    for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        assert sum((x[key] for x in lps), []) == whole["choices"][0]["logprobs"][key], key

    # the developer role is the system role
    msgs = lambda role: {"messages": [{"role": role, "content": "be brief"}, {"role": "user", "content": "hi"}],
                         "max_tokens": 20, "temperature": 0}
    s, dev = request(port, "POST", "/v1/chat/completions", msgs("developer"))
    s2, sys_ = request(port, "POST", "/v1/chat/completions", msgs("system"))
    assert s == s2 == 200 and dev["choices"] == sys_["choices"] and dev["usage"] == sys_["usage"], (dev, sys_)

    # token-id prompts (the byte tokenizer: ids are the bytes), one or several
    ids = list(prompt.encode())
    s, by_text = request(port, "POST", "/v1/completions", body)
    s, by_ids = request(port, "POST", "/v1/completions", dict(body, prompt=ids, echo=True))
    assert s == 200 and by_ids["choices"][0]["text"] == prompt + by_text["choices"][0]["text"], by_ids
    other = list(b"once upon")
    s, two = request(port, "POST", "/v1/completions", dict(body, prompt=[ids, other]))
    s2, alone = request(port, "POST", "/v1/completions", dict(body, prompt="once upon"))
    assert s == 200 and [x["text"] for x in two["choices"]] == [by_text["choices"][0]["text"],
                                                               alone["choices"][0]["text"]], two
    assert two["usage"]["prompt_tokens"] == len(ids) + len(other), two
    for bad, param_words in [([], "must be a string or"), ([1, "a"], "not a token id"),
                             ([[1], "a"], "mixes token-id arrays"), ([[]], "must not be an empty array"),
                             ([100000], "not a token id"), ([-1], "not a token id")]:
        s, e = request(port, "POST", "/v1/completions", dict(body, prompt=bad))
        assert s == 400 and param_words in e["error"]["message"] and e["error"]["param"] == "prompt", (bad, e)

    # a message without content: 400 naming messages[i].content
    s, e = request(port, "POST", "/v1/chat/completions",
                   {"messages": [{"role": "system", "content": "x"}, {"role": "user"}]})
    assert s == 400 and e["error"]["param"] == "messages[1].content", e
    assert "messages[1].content is required" in e["error"]["message"], e
    print("openai compat: stream_options.include_usage, /v1/models/{id}, chat logprobs (and streamed "
          "completions logprobs), the developer role, token-id prompts, messages[i].content required")


BAD = [  # status, words in the error, method, path, raw body
    (400, "malformed JSON", "POST", "/v1/completions", b'{"prompt": "a",'),
    (400, "must be a JSON object", "POST", "/v1/completions", b'["a"]'),
    (400, "'max_tokens' must be an integer", "POST", "/v1/completions", b'{"prompt": "a", "max_tokens": 2.5}'),
    (400, "'stream' must be true or false", "POST", "/v1/completions", b'{"prompt": "a", "stream": "yes"}'),
    (400, "'prompt' must be a string or", "POST", "/v1/completions", b'{"prompt": 5}'),
    (400, "did you mean 'temperature'", "PUT", "/api", b'{"prompts": ["a"], "temprature": 1}'),
    (400, "'tokens_to_generate' must be an integer from 0", "PUT", "/api",
     b'{"prompts": ["a"], "tokens_to_generate": -5}'),
    (400, "'max_tokens' must be an integer from 0", "POST", "/v1/completions",
     b'{"prompt": "a", "max_tokens": 99999999999}'),
    (400, "more than the model's context", "POST", "/v1/completions",
     json.dumps({"prompt": "y" * 5000}).encode()),
    (400, "not valid UTF-8", "PUT", "/api", b'{"prompts": ["\xc3\x28"]}'),
    (413, "larger than", "POST", "/v1/completions", b'{"prompt": "' + b"b" * 1100000 + b'"}'),
    (400, "beam search is not supported", "PUT", "/api", b'{"prompts": ["a"], "beam_width": 2}'),
    (400, "'messages' must be a non-empty array", "POST", "/v1/chat/completions", b'{"model": "ck"}'),
    (404, "no endpoint", "GET", "/nope", None),
    (405, "takes POST", "GET", "/v1/completions", None),
]


def check_bad(port):
    print("bad requests (http.client):")
    for status, words, method, path, raw in BAD:
        s, body = request(port, method, path, raw=raw)
        assert s == status, (method, path, raw[:60] if raw else None, s, body)
        assert words in body["error"]["message"], (words, body)
        print(f"  {method:4} {path:22} {(raw or b'')[:34]!r:40} -> {s} {body['error']['message'][:60]}")
    s, h = request(port, "GET", "/health")
    assert s == 200, h


def check_busy(port):
    # one slot, no queue: a running stream holds it
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/v1/completions",
              body=json.dumps({"prompt": "z", "max_tokens": 4000, "temperature": 0, "stream": True}).encode())
    r = c.getresponse()
    assert r.status == 200
    assert r.fp.readline().startswith(b"data: ") or True
    s, body = request(port, "POST", "/v1/completions", {"prompt": "a", "max_tokens": 5})
    assert s == 503 and "busy" in body["error"]["message"], (s, body)
    # the client goes away mid-stream: its sequence is cancelled and the slot freed
    c.sock.close()
    c.close()
    for _ in range(500):  # the stream may still wait in the queue: it leaves it at once
        s, h = request(port, "GET", "/health")
        if h["running"] == 0 and h["queued"] == 0:
            break
        time.sleep(0.01)
    assert h["running"] == 0 and h["queued"] == 0 and h["cancelled"] == 1, h
    assert h["generated_tokens"] < 4000, h
    # a client answered may ask again at once: its finished request no longer holds the one
    # slot, even before the decode loop's next turn (a 503 here was a CI failure once)
    for i in range(30):
        s, body = request(port, "POST", "/v1/completions", {"prompt": "a", "max_tokens": 1})
        assert s == 200, (i, body)
    s, body = request(port, "POST", "/v1/completions", {"prompt": "a", "max_tokens": 5})
    assert s == 200, body
    streamed = h["generated_tokens"]
    s, h = request(port, "GET", "/health")
    # every request answered has left: none may still count as running
    assert h["running"] == 0 and h["queued"] == 0, h
    answered = h["generated_tokens"]
    # a non-streamed request's client goes away too: the server notices the closed socket
    # while it decodes, not only when it writes the answer
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/v1/completions",
              body=json.dumps({"prompt": "z", "max_tokens": 4000, "temperature": 0}).encode())
    for _ in range(500):
        s, h = request(port, "GET", "/health")
        if h["running"] == 1 and h["generated_tokens"] > answered:  # it decodes
            break
        time.sleep(0.01)
    assert h["running"] == 1 and h["generated_tokens"] > answered, h
    c.sock.close()
    c.close()
    for _ in range(500):
        s, h = request(port, "GET", "/health")
        if h["running"] == 0:
            break
        time.sleep(0.01)
    assert h["running"] == 0 and h["cancelled"] == 2, h
    plain = h["generated_tokens"] - streamed - 30 - 5
    assert plain < 4000, h
    print(f"busy: 503 while the one slot is taken; a disconnect cancelled its sequence after "
          f"{streamed} of 4000 tokens (streamed) and {plain} of 4000 (non-streamed), freeing the slot")


if __name__ == "__main__":
    if sys.argv[1] == "--busy":
        check_busy(int(sys.argv[2]))
    elif sys.argv[1] == "--logprobs":
        print(f"{prompt_logprob_error(int(sys.argv[2]), sys.argv[3], sys.argv[4]):.1e}")
    else:
        port = int(sys.argv[1])
        check_endpoints(port, sys.argv[2], sys.argv[3], sys.argv[4])
        check_openai_compat(port, sys.argv[2])
        check_bad(port)
