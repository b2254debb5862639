"""Two runs' metrics files (train.metrics: a JSON object a line) held against each other line by
line, for the tests that train one model two ways (parallel layouts, attention plugins,
data-parallel ranks) and must log the same numbers within a tolerance. The scripts import it
with PYTHONPATH=tests/support (lib.sh's $tests_dir/support).
"""
import json
import sys


def rows(path):
    """A metrics file's lines, parsed."""
    return [json.loads(line) for line in open(path)]


def compare(a, b, keys, tol, where, a_name, b_name):
    """Every value keys(line) names in each line of a, against b's line beside it: within tol
    relative to |a's| (at least 1e-12). Exits naming the first beyond tol ("<where>iter <i>
    <key>: <a_name> <value> vs <b_name> <value>"); returns the worst relative difference."""
    worst = 0.0
    for x, y in zip(a, b):
        for k in keys(x):
            rel = abs(x[k] - y[k]) / max(abs(x[k]), 1e-12)
            worst = max(worst, rel)
            if rel > tol:
                sys.exit(f"{where}iter {x['iter']} {k}: {a_name} {x[k]!r} vs {b_name} {y[k]!r}")
    return worst
