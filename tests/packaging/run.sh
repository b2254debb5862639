#!/usr/bin/env bash
# The out-of-tree plugin workflow, end to end (see docs/writing-a-plugin.md):
#   1 install-sdk   cmake --install <build> --component sdk into a temp prefix
#   2 build         configure + build the example against that prefix only (Ninja)
#   3 exports       the .so exports exactly one symbol: loom_plugin_entry
#   4 probe         the descriptor, and optimizer steps on a test backend, through the ABI
#   5 pack          loom pack <folder> -o <pkg>.tar.gz          } only when <build>/bin/loom
#   6 install       loom install <pkg>.tar.gz --dir <plugins>   } exists and has these
#   7 list          LOOM_PLUGIN_PATH=<plugins> loom plugins     } commands
#                   (and loom plugins describe optimizer/signsgd)
#   8 run           LOOM_PLUGIN_PATH=<plugins> loom run recipe.toml (also needs backend/cpu
#                   and model/gpt built)
# Steps 1-4 always run; a failing step fails the test. The last line lists ran/skipped steps.
set -euo pipefail

CMAKE=cmake NINJA=ninja CXX=c++ BUILD= EXAMPLE= PROBE= LOOM= NAME=optimizer/signsgd
while [ $# -gt 0 ]; do
  case "$1" in
    --cmake) CMAKE=$2 ;;
    --ninja) NINJA=$2 ;;
    --cxx) CXX=$2 ;;
    --build-dir) BUILD=$2 ;;
    --example) EXAMPLE=$2 ;;
    --probe) PROBE=$2 ;;
    --loom) LOOM=$2 ;;
    --name) NAME=$2 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done
[ -n "$BUILD" ] && [ -n "$EXAMPLE" ] || { echo "run.sh: --build-dir and --example are required" >&2; exit 2; }
BUILD=$(cd "$BUILD" && pwd) EXAMPLE=$(cd "$EXAMPLE" && pwd)
[ -n "$LOOM" ] || LOOM=$BUILD/bin/loom

TMP=$(mktemp -d "${TMPDIR:-/tmp}/loom-sdk-package.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
PREFIX=$TMP/prefix
ran=() skipped=()
step() { echo; echo "=== step $1: ${*:2}"; }
fail() { echo "FAILED: $*" >&2; echo "steps ran: ${ran[*]:-none}" >&2; exit 1; }

# 1 -------------------------------------------------------------------------------------
step 1 "install the SDK component into $PREFIX"
"$CMAKE" --install "$BUILD" --prefix "$PREFIX" --component sdk
for f in include/loom/loom.h include/loom/cpp/plugin.hpp; do
  [ -f "$PREFIX/$f" ] || fail "$f was not installed"
done
config=$(find "$PREFIX" -name LoomSDKConfig.cmake | head -n1)
[ -n "$config" ] || fail "LoomSDKConfig.cmake was not installed"
ran+=(install-sdk)

# 2 -------------------------------------------------------------------------------------
step 2 "build $EXAMPLE out of tree"
# Only the temp prefix may provide LoomSDK: no package registry, no source-tree paths.
"$CMAKE" -S "$EXAMPLE" -B "$TMP/build" -G Ninja \
  -DCMAKE_MAKE_PROGRAM="$NINJA" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-Werror \
  -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
"$CMAKE" --build "$TMP/build"
sdk_dir=$(sed -n 's/^LoomSDK_DIR:PATH=//p' "$TMP/build/CMakeCache.txt")
case "$sdk_dir" in
  "$PREFIX"/*) echo "LoomSDK found at $sdk_dir" ;;
  *) fail "LoomSDK came from '$sdk_dir', not from the installed prefix" ;;
esac
so=$(find "$TMP/build" -maxdepth 2 -name 'loom-*.so' | head -n1)
[ -n "$so" ] || fail "the build produced no loom-*.so"
echo "built $(basename "$so")"
ran+=(build)

# 3 -------------------------------------------------------------------------------------
step 3 "exported symbols"
exports=$(nm -D --defined-only "$so" | awk '{print $NF}' | sort -u)
echo "$exports"
[ "$exports" = "loom_plugin_entry" ] || fail "$(basename "$so") must export exactly loom_plugin_entry"
ran+=(exports)

# 4 -------------------------------------------------------------------------------------
if [ -n "$PROBE" ]; then
  step 4 "probe the plugin through the ABI"
  LOOM_EXAMPLE_PLUGIN=$so "$PROBE"
  ran+=(probe)
else
  skipped+=("probe(no --probe)")
fi

# 5-8 -----------------------------------------------------------------------------------
loom_help=
[ -x "$LOOM" ] && loom_help=$("$LOOM" --help 2>&1 || true)
has_cmd() { grep -Eq "(^|[[:space:]])$1([[:space:]]|$)" <<<"$loom_help"; }
if [ ! -x "$LOOM" ]; then
  skipped+=("pack,install,list,run(no $LOOM)")
elif ! has_cmd pack || ! has_cmd install || ! has_cmd plugins; then
  skipped+=("pack,install,list,run($LOOM lacks pack/install/plugins)")
else
  name=$(basename "$so" .so)
  step 5 "loom pack"
  mkdir -p "$TMP/pkg"
  cp "$so" "$TMP/pkg/"
  cp "$EXAMPLE/LICENSE" "$EXAMPLE/README.md" "$TMP/pkg/"
  "$LOOM" pack "$TMP/pkg" -o "$TMP/$name.tar.gz"
  [ -s "$TMP/$name.tar.gz" ] || fail "loom pack wrote no $name.tar.gz"
  ran+=(pack)

  step 6 "loom install"
  "$LOOM" install "$TMP/$name.tar.gz" --dir "$TMP/plugins"
  ran+=(install)

  step 7 "loom plugins"
  listing=$(LOOM_PLUGIN_PATH="$TMP/plugins" "$LOOM" plugins)
  echo "$listing"
  # A here-string, not `echo | grep -q`: grep -q leaves at its first match, and under pipefail an
  # echo of a listing longer than one 4 KiB write then fails with SIGPIPE (it did, once).
  grep -q "${NAME#*/}" <<< "$listing" || fail "loom plugins does not list $NAME"
  # the identity LOOM_PLUGIN took from loom_add_plugin's VERSION, VENDOR and LICENSE
  grep -qE "^${NAME%/*} +${NAME#*/} +1\.0\.0 +[0-9.]+ +Example Corp " <<< "$listing" ||
    fail "loom plugins does not show $NAME as version 1.0.0 by Example Corp"
  LOOM_PLUGIN_PATH="$TMP/plugins" "$LOOM" plugins describe "$NAME" ||
    fail "loom plugins describe $NAME failed"
  ran+=(list)

  plugdir=$BUILD/plugins
  if ! has_cmd run; then
    skipped+=("run($LOOM lacks run)")
  elif [ ! -f "$plugdir/loom-backend-cpu.so" ] || [ ! -f "$plugdir/loom-model-gpt.so" ]; then
    skipped+=("run(backend/cpu or model/gpt not built in $plugdir)")
  else
    step 8 "loom run $EXAMPLE/recipe.toml"
    (cd "$TMP" && LOOM_PLUGIN_PATH="$TMP/plugins" "$LOOM" run "$EXAMPLE/recipe.toml")
    ran+=(run)
  fi
fi

echo
echo "sdk_package: ran: ${ran[*]}; skipped: ${skipped[*]:-none}"
