"""A bounded load client for `loom serve` (tools/bench-serve): CLIENTS threads on loopback,
each sending /v1/completions back to back for SECONDS, every request timed. Prints one JSON
object: requests, errors, generated tokens and tokens/s, latency p50/p90/p99.

  serve_load.py PORT CLIENTS SECONDS MAX_TOKENS PROMPT_FILE
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
    lat, tokens, errors = [], [0], [0]
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client(i):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        k = i
        while time.monotonic() < deadline:
            body = {"prompt": prompts[k % len(prompts)], "max_tokens": max_tokens,
                    "temperature": 0.8, "top_k": 50, "seed": k}
            k += clients
            t0 = time.monotonic()
            try:
                c.request("POST", "/v1/completions", body=json.dumps(body).encode())
                r = c.getresponse()
                data = json.loads(r.read())
                ok = r.status == 200
            except Exception:  # noqa: BLE001
                ok, data = False, None
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            dt = time.monotonic() - t0
            with lock:
                if ok:
                    lat.append(dt)
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
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")  # noqa: E731
    print(json.dumps({"clients": clients, "seconds": round(wall, 2), "requests": len(lat),
                      "errors": errors[0], "generated_tokens": tokens[0],
                      "tokens_per_s": round(tokens[0] / wall, 1),
                      "requests_per_s": round(len(lat) / wall, 2),
                      "latency_p50_s": round(q(0.50), 3), "latency_p90_s": round(q(0.90), 3),
                      "latency_p99_s": round(q(0.99), 3)}))


if __name__ == "__main__":
    main()
