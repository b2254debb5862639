#!/usr/bin/env bash
# train.tensorboard: a short run writes TensorBoard events, and a reader independent of the
# writer (below: TFRecord framing, a bitwise CRC-32C checked against the standard's check
# value, and the protobuf wire format decoded by hand; the writer uses Boost.CRC and
# libprotobuf) finds every scalar of every iteration equal to the metrics file's (as f32),
# and the eval loss; a file with one flipped byte is refused by the reader. The log lines
# carry elapsed time and an ETA.
#   tensorboard.sh LOOM
set -euo pipefail
loom=$1
. "$(dirname "$0")/../support/lib.sh"
scratch
{
  toml_section train iters=12 micro_batch_size=2 seq_len=16 log_interval=4 eval_interval=6 \
    eval_iters=2 metrics=m.jsonl tensorboard=tb
  gpt_sections threads= n_head=2
} > r.toml
"$loom" run r.toml 2> log || { tail -20 log; exit 1; }
grep -E "iter +12/12 .*\| elapsed [0-9hms]+ \| eta 0s" log ||
  { echo "no elapsed/eta on the last log line:"; grep "iter " log; exit 1; }
python3 - <<'PY'
import glob, json, struct, sys

def crc32c(data):  # bit by bit, reflected Castagnoli polynomial
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF

assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value

def masked(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

def records(raw):
    i = 0
    while i < len(raw):
        head = raw[i:i + 8]
        (n,) = struct.unpack("<Q", head)
        (hc,) = struct.unpack("<I", raw[i + 8:i + 12])
        if masked(crc32c(head)) != hc:
            raise ValueError(f"length CRC mismatch at byte {i}")
        data = raw[i + 12:i + 12 + n]
        (dc,) = struct.unpack("<I", raw[i + 12 + n:i + 16 + n])
        if len(data) != n or masked(crc32c(data)) != dc:
            raise ValueError(f"data CRC mismatch at byte {i}")
        yield data
        i += 16 + n

def fields(buf):  # protobuf wire format: (field number, wire type, value)
    i = 0
    def varint():
        nonlocal i
        v = s = 0
        while True:
            b = buf[i]; i += 1
            v |= (b & 0x7F) << s; s += 7
            if not b & 0x80:
                return v
    while i < len(buf):
        key = varint()
        f, wt = key >> 3, key & 7
        if wt == 0: yield f, wt, varint()
        elif wt == 1: yield f, wt, buf[i:i + 8]; i += 8
        elif wt == 5: yield f, wt, buf[i:i + 4]; i += 4
        elif wt == 2:
            n = varint(); yield f, wt, buf[i:i + n]; i += n
        else: raise ValueError(f"wire type {wt}")

def events(raw):
    out = []
    for rec in records(raw):
        ev = {"summary": [], "step": 0}  # proto3 leaves out a step of 0
        for f, wt, v in fields(rec):
            if f == 1: ev["wall_time"] = struct.unpack("<d", v)[0]
            elif f == 2: ev["step"] = v
            elif f == 3: ev["file_version"] = v.decode()
            elif f == 5:
                for sf, _, sv in fields(v):
                    if sf == 1:
                        val = dict((vf, vv) for vf, _, vv in fields(sv))
                        # simple_value sits in a oneof: present even when 0.0
                        ev["summary"].append((val[1].decode(), struct.unpack("<f", val[2])[0]))
        out.append(ev)
    return out

files = glob.glob("tb/events.out.tfevents.*")
assert len(files) == 1, files
raw = open(files[0], "rb").read()
evs = events(raw)
assert evs[0].get("file_version") == "brain.Event:2", evs[0]
tb = {}
for ev in evs[1:]:
    for tag, value in ev["summary"]:
        tb[(tag, ev["step"])] = value
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
want = {"lm loss": "loss", "learning-rate": "lr", "grad-norm": "grad_norm",
        "loss-scale": "loss_scale", "throughput/tokens-per-second": "tokens_per_s",
        "throughput/mfu": "mfu", "memory/peak-bytes": "mem_bytes", "iteration-time": "step_s"}
n = evals = 0
for line in open("m.jsonl"):
    m = json.loads(line)
    if "eval_loss" in m:
        assert tb[("lm loss validation", m["iter"])] == f32(m["eval_loss"]), m
        evals += 1
        continue
    for tag, key in want.items():
        assert tb[(tag, m["iter"])] == f32(m[key]), (tag, m["iter"], tb[(tag, m["iter"])], m[key])
        n += 1
assert n == 12 * len(want) and evals == 2, (n, evals)
bad = bytearray(raw)
bad[len(bad) // 2] ^= 0x01
try:
    events(bytes(bad))
    sys.exit("a file with a flipped byte was read without complaint")
except (ValueError, KeyError, IndexError, struct.error) as e:
    refused = str(e)
print(f"{len(evs)} events, CRCs good; {n} scalars of 12 iterations and {evals} eval losses "
      f"equal the metrics file; a flipped byte is refused ({refused})")
PY
