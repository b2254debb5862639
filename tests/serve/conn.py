"""`loom serve`'s connections through raw sockets (serve_conn.sh starts the server with
--idle-timeout 1 --header-timeout 1 --body-timeout 1 --max-connections 4 --max-batch 1
--max-queue 2):
  - idle sockets that hold every connection place are closed after --idle-timeout, and a
    real client is served again; a header or a body that stops halfway gets 408;
  - a client that half-closes its socket (shutdown(SHUT_WR)) after its request gets the
    whole answer: the full stream with [DONE] and the terminating chunk;
  - requests whose clients leave while queued behind a long one count as cancelled at once
    and free their queue places while the long one still runs.

  conn.py PORT
"""
import http.client
import json
import socket
import sys
import time

PORT = int(sys.argv[1])


def request(method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
    c.request(method, path, body=json.dumps(body).encode() if body is not None else None)
    r = c.getresponse()
    text = r.read()
    c.close()
    return r.status, json.loads(text) if text else None


def health():
    """/health's counts; {} while every connection place is taken (503)."""
    s, h = request("GET", "/health")
    return h if s == 200 else {}


def raw(data, half_close=False):
    """Sends `data` on a fresh socket; returns the socket (half-closed when asked)."""
    s = socket.create_connection(("127.0.0.1", PORT), timeout=30)
    s.sendall(data)
    if half_close:
        s.shutdown(socket.SHUT_WR)
    return s


def read_all(s):
    out = b""
    while True:
        b = s.recv(65536)
        if not b:
            return out
        out += b


def post(path, body, extra=b""):
    data = json.dumps(body).encode()
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + extra + b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)


def wait_for(what, cond, seconds=10):
    end = time.time() + seconds
    while time.time() < end:
        h = health()
        if h and cond(h):
            return h
        time.sleep(0.01)
    raise AssertionError(f"{what}: {h}")


def check_idle():
    held = [socket.create_connection(("127.0.0.1", PORT)) for _ in range(4)]
    time.sleep(0.2)
    s, body = request("GET", "/health")
    assert s == 503 and "max-connections" in body["error"]["message"], (s, body)
    t0 = time.time()
    for h in held:  # the server closes each: end of stream, no answer
        h.settimeout(10)
        assert h.recv(1) == b""
    closed = time.time() - t0
    assert 0.5 < closed + 0.2 < 5, closed
    s, body = request("POST", "/v1/completions", {"prompt": "a", "max_tokens": 3})
    assert s == 200, (s, body)
    print(f"idle: 4 silent sockets held every place (503), closed after {closed + 0.2:.1f} s; "
          "then a client is served")


def check_slow_request():
    for name, data in [("header", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"),
                       ("body", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
                                b"\r\n{\"prompt\": \"a\""),
                       ("body", post("/v1/completions", {"prompt": "a"}, b"Expect: 100-continue\r\n")
                        .split(b"\r\n\r\n")[0] + b"\r\n\r\n")]:
        t0 = time.time()
        s = raw(data)
        got = read_all(s).decode()
        took = time.time() - t0
        s.close()
        assert "HTTP/1.1 408 " in got, got
        assert f"--{name}-timeout" in got and took < 5, (got, took)
    s, body = request("POST", "/v1/completions", {"prompt": "a", "max_tokens": 3})
    assert s == 200, (s, body)
    print(f"slow requests: a header and a body that stop halfway get 408 after {took:.1f} s; "
          "the server goes on serving")


def check_half_close():
    body = {"prompt": "Once upon", "max_tokens": 40, "temperature": 0}
    s, want = request("POST", "/v1/completions", body)
    want = want["choices"][0]["text"]
    sock = raw(post("/v1/completions", dict(body, stream=True)), half_close=True)
    got = read_all(sock).decode()
    sock.close()
    assert got.endswith("\r\n0\r\n\r\n"), got[-200:]
    events = [l[6:] for l in got.split("\n") if l.startswith("data: ")]
    assert events[-1].strip() == "[DONE]", events
    text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
    assert text == want, (text, want)
    sock = raw(post("/v1/completions", body), half_close=True)
    got = read_all(sock).decode()
    sock.close()
    final = got[got.rindex("HTTP/1.1 "):]
    assert final.startswith("HTTP/1.1 200"), got
    assert json.loads(final.split("\r\n\r\n", 1)[1])["choices"][0]["text"] == want, got
    h = health()
    assert h["cancelled"] == 0, h
    print(f"half-closed clients: the stream came whole ({len(events) - 1} chunks, [DONE], the last "
          "chunk) and so did the non-streamed answer")


def check_cancel_queued():
    before = health()["cancelled"]
    long = raw(post("/v1/completions", {"prompt": "z", "max_tokens": 60000, "temperature": 0}))
    wait_for("the long request never started", lambda h: h["running"] == 1)
    queued = [raw(post("/v1/completions", {"prompt": "q", "max_tokens": 5})),
              raw(post("/v1/completions", {"prompt": "q", "max_tokens": 5, "stream": True}))]
    wait_for("the two requests never queued", lambda h: h["queued"] == 2)
    for q in queued:
        q.close()
    h = wait_for("the queued requests were not cancelled", lambda h: h["queued"] == 0, 5)
    assert h["cancelled"] == before + 2 and h["running"] == 1, h
    long.close()
    h = wait_for("the long request was not cancelled", lambda h: h["running"] == 0 and h["queued"] == 0)
    assert h["cancelled"] == before + 3, h
    print("cancel while queued: both queued requests counted as cancelled at once, while the "
          f"long one ran ({h['generated_tokens']} tokens in all)")


if __name__ == "__main__":
    check_idle()
    check_slow_request()
    check_half_close()
    check_cancel_queued()
