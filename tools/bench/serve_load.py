"""A bounded load client for `loom serve` (tools/bench-serve, tools/gpu-check): CLIENTS threads
on loopback, each sending /v1/completions back to back for SECONDS, every request timed. Prints
one JSON object: requests, errors, generated tokens and tokens/s, latency p50/p90/p99. With
--stream, each request streams (server-sent events, with the usage chunk) and its time to
first token is taken when the first chunk with text arrives: ttft p50/p99 as well.

  serve_load.py PORT CLIENTS SECONDS MAX_TOKENS PROMPT_FILE [--stream]
"""
import http.client
import json
import sys
import threading
import time


def main():
    port, clients, seconds, max_tokens = (int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]),
                                          int(sys.argv[4]))
    prompts = [l.rstrip("\n") for l in open(sys.argv[5]) if l.strip()]
    stream = "--stream" in sys.argv[6:]
    lat, ttft, tokens, errors = [], [], [0], [0]
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client(i):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        k = i
        while time.monotonic() < deadline:
            body = {"prompt": prompts[k % len(prompts)], "max_tokens": max_tokens,
                    "temperature": 0.8, "top_k": 50, "seed": k}
            if stream:
                body.update(stream=True, stream_options={"include_usage": True})
            k += clients
            t0 = time.monotonic()
            first = None
            try:
                c.request("POST", "/v1/completions", body=json.dumps(body).encode())
                r = c.getresponse()
                if stream:
                    data, first = read_events(r, t0)
                    r.read()  # the chunked body's end after [DONE]: the connection is reused
                else:
                    data = json.loads(r.read())
                ok = r.status == 200 and data is not None and data.get("usage") is not None
                if r.will_close:  # an HTTP/1.0 answer ends with its connection
                    c.close()
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            except Exception:  # noqa: BLE001
                ok, data = False, None
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            dt = time.monotonic() - t0
            with lock:
                if ok:
                    lat.append(dt)
                    if first is not None:
                        ttft.append(first)
                    tokens[0] += data["usage"]["completion_tokens"]
                else:
                    errors[0] += 1
        c.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    out = {"clients": clients, "seconds": round(wall, 2), "requests": len(lat),
           "errors": errors[0], "generated_tokens": tokens[0],
           "tokens_per_s": round(tokens[0] / wall, 1), "requests_per_s": round(len(lat) / wall, 2),
           "latency_p50_s": quantile(lat, 0.50), "latency_p90_s": quantile(lat, 0.90),
           "latency_p99_s": quantile(lat, 0.99)}
    if stream:
        out.update(ttft_p50_s=quantile(ttft, 0.50), ttft_p99_s=quantile(ttft, 0.99))
    print(json.dumps(out))


def quantile(xs, p):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p * len(xs)))], 4) if xs else float("nan")


def read_events(r, t0):
    """A streamed answer's events: (the chunk that carries the usage, seconds from t0 to the
    first chunk with text)."""
    usage, first = None, None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            break
        event = json.loads(line[6:])
        if first is None and any(ch.get("text") for ch in event.get("choices") or []):
            first = time.monotonic() - t0
        if event.get("usage"):
            usage = event
    return usage, first


if __name__ == "__main__":
    main()
