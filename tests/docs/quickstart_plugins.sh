#!/usr/bin/env bash
# tools/quickstart builds only the `quickstart` target (issue 35: building all ~380 targets,
# the tests too, took 12 minutes): that target must hold every plugin the quick start's run
# and `loom generate` load, and no test program. With the target's plugins alone on the
# plugin path, the quick start's recipe trains 2 iterations and samples from its checkpoint;
# and `ninja -t commands quickstart` compiles nothing under tests/.
#   quickstart_plugins.sh SOURCE_DIR BINARY_DIR LOOM PLUGIN.so...
set -euo pipefail
src=$1 bin=$2 loom=$3
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/plugins"
for so in "$@"; do ln -s "$so" "$dir/plugins/"; done
if [ -f "$bin/build.ninja" ]; then
  ninja -C "$bin" -t commands quickstart > "$dir/commands.txt"
  if grep -- ' -c ' "$dir/commands.txt" | grep -E "$src/tests/|[ /]tests/" | head -3 | grep .; then
    echo "FAIL: the quickstart target compiles test sources (above)"
    exit 1
  fi
  echo "quickstart target: $(grep -c -- ' -c ' "$dir/commands.txt") compiles (all targets:" \
    "$(ninja -C "$bin" -t commands | grep -c -- ' -c '))"
fi
cd "$dir"
mkdir -p recipes run/quickstart
cp "$src/recipes/quickstart.toml" recipes/
"$src/tools/fortunes-jsonl" run/quickstart/fortunes.jsonl
export LOOM_PLUGIN_PATH_ONLY=1 LOOM_PLUGIN_PATH=$dir/plugins
"$loom" run recipes/quickstart.toml --set train.iters=2 --set backend.measure_gemm=false \
  --set backend.threads=1 2> run.log || { cat run.log; exit 1; }
"$loom" generate --checkpoint run/quickstart/checkpoints --prompt "The meaning of life is" \
  --max-new-tokens 8 > gen.txt 2> gen.log || { cat gen.log; exit 1; }
[ -s gen.txt ] || { echo "FAIL: loom generate printed nothing"; exit 1; }
echo "ok: the quickstart target's $# plugins train and sample"
