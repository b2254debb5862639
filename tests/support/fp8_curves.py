"""The FP8 training tests' checks (training.fp8, fp8_delayed, fp8_moe): loss curves of runs
with precision.fp8 against the run without it, layouts against one rank, and a resumed run
against the run it continues. The scripts import it with PYTHONPATH=tests/support (lib.sh's
$tests_dir/support).
"""
import json
import struct


def f32(x):
    """x rounded to the nearest f32, as a Python float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def losses(path):
    """The loss of every logged step of a metrics file."""
    return [json.loads(line)["loss"] for line in open(path) if '"loss"' in line]


def worst(a, b, start=5):
    """The largest relative difference of a from b, from step `start` on (after the warm-up)."""
    return max(abs(x - y) / y for x, y in zip(a[start:], b[start:]))


def check_curves(pairs, base, bound, label="", iters=60):
    """Each (run, ref) of pairs: run.jsonl against base[ref] (a loss list) for `iters` steps:
    not identical (FP8 acted), within `bound` after the warm-up, and training (at least 90 %
    of the reference's loss drop)."""
    for run, ref in pairs:
        got, want = losses(run + ".jsonl"), base[ref]
        assert len(got) == len(want) == iters, (run, len(got))
        w = worst(got, want)
        print(f"{label}{run}: worst relative loss difference against {ref} after the warm-up "
              f"{w:.2e}; loss {got[0]:.3f} -> {got[-1]:.3f}")
        assert max(abs(a - b) for a, b in zip(got, want)) > 0, f"{run}: FP8 did nothing"
        assert w <= bound, f"{run}: {w} > {bound}"
        assert got[0] - got[-1] >= 0.9 * (want[0] - want[-1]), f"{run}: {got[0]} -> {got[-1]}"


def check_layouts(one, layouts, bound, label=""):
    """Each (name, steps) of layouts: name.jsonl's first step equals one's (a loss list) within
    1e-6, relative, and every step follows it within `bound`."""
    for name, n in layouts:
        got = losses(name + ".jsonl")
        assert len(got) == n, (name, len(got))
        first, w = abs(got[0] - one[0]) / one[0], worst(got, one[:n], 0)
        print(f"{label}{name} vs 1 rank: first step {first:.2e}, worst {w:.2e}")
        assert first <= 1e-6, f"{name}'s first step: {first}"
        assert w <= bound, f"{name}: {w}"


def check_resumed(what, resumed, run, bound):
    """A checkpoint of `run` (a loss list from the step after the save) resumed elsewhere:
    `resumed`'s first step within 1e-6 of run's (the state came along), then within bound."""
    assert len(resumed) == len(run), (what, len(resumed), len(run))
    w = worst(resumed, run, 0)
    first = abs(resumed[0] - run[0]) / run[0]
    print(f"{what}: the next step {first:.2e}, worst {w:.2e}")
    assert first <= 1e-6, (what, resumed[0], run[0])
    assert w <= bound, f"{what}: {w}"
