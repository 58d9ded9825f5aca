#!/usr/bin/env bash
# Builds the libFuzzer harnesses of fuzz/ (Clang, AddressSanitizer + UBSan, CUDA off) into
# build-fuzz/ and runs each for SECONDS (default 30) on a copy of its seed corpus, as many at
# a time as there are cores. Fails when a harness finds anything — a crash, a sanitizer
# report, a hang, a broken check, an exception of an unexpected type — and prints the input
# that reproduces it. Installs Clang and libFuzzer (Debian packages) when missing.
#
#   tools/fuzz.sh                       # every harness, 30 s each
#   tools/fuzz.sh 600                   # longer
#   FUZZERS="snli vocab" tools/fuzz.sh  # some of them
#   BUILD_DIR=out tools/fuzz.sh
set -euo pipefail

cd "$(dirname "$0")/.."
SECONDS_EACH="${1:-30}"
BUILD_DIR="${BUILD_DIR:-build-fuzz}"
FUZZERS="${FUZZERS:-safetensors config vocab wordpiece snli wikitext}"
JOBS="$(nproc)"

install_missing() {
  local missing=()
  for p in "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "fuzz: installing ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}

# wedge's own build dependencies (tools/setup.sh), then Clang; libFuzzer's run-time library
# is a separate package named after Clang's major version (only recommended by clang).
install_missing build-essential cmake pkg-config libopenblas-dev libfmt-dev libcli11-dev nlohmann-json3-dev \
  libutf8proc-dev clang
clang_major="$(clang++ --version | sed -n 's/.*clang version \([0-9][0-9]*\).*/\1/p' | head -n 1)"
install_missing "libclang-rt-${clang_major}-dev"

started="$(date +%s)"
echo "fuzz: configuring ${BUILD_DIR}/"
cmake -S fuzz -B "$BUILD_DIR" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release > "$BUILD_DIR.configure.log" 2>&1 ||
  { cat "$BUILD_DIR.configure.log"; exit 1; }
rm -f "$BUILD_DIR.configure.log"
echo "fuzz: building the harnesses (a few minutes on 2 cores)"
cmake --build "$BUILD_DIR" --target fuzzers -j "$JOBS" > "$BUILD_DIR/build.log" 2>&1 ||
  { grep -E "error|Error" "$BUILD_DIR/build.log" | head -n 40; echo "fuzz: build failed; see $BUILD_DIR/build.log"; exit 1; }

# One harness: a fresh copy of its corpus (and its dictionary, fuzz/NAME.dict, when there is
# one); its findings go to artifacts/.
run_one() {
  local name="$1" work="$BUILD_DIR/fuzz-run/$1"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp fuzz/corpus/"$name"/* "$work/corpus/"
  local status=0 dict=()
  if [ -f "fuzz/$name.dict" ]; then dict=(-dict="fuzz/$name.dict"); fi
  "$BUILD_DIR/fuzz_$name" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 "${dict[@]}" \
    -artifact_prefix="$work/artifacts/" "$work/corpus" > "$work/log" 2>&1 || status=$?
  echo "$status" > "$work/status"
}

built="$(date +%s)"
echo "fuzz: built in $((built - started)) s; running ${FUZZERS// /, } for ${SECONDS_EACH} s each, ${JOBS} at a time"
running=0
for name in $FUZZERS; do
  if [ ! -d "fuzz/corpus/$name" ]; then echo "fuzz: no harness '$name' (fuzz/corpus/$name is missing)"; exit 1; fi
  if [ "$running" -ge "$JOBS" ]; then
    wait -n || true  # a harness's outcome is read from its status file below
    running=$((running - 1))
  fi
  run_one "$name" &
  running=$((running + 1))
done
wait

failed=0
for name in $FUZZERS; do
  work="$BUILD_DIR/fuzz-run/$name"
  status="$(cat "$work/status" 2>/dev/null || echo "unknown (the harness did not run)")"
  runs="$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$work/log" 2>/dev/null || true)"
  findings="$(find "$work/artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) 2>/dev/null | sort || true)"
  if [ "$status" = 0 ] && [ -z "$findings" ]; then
    echo "fuzz: $name: ok (${runs:-?} inputs)"
    continue
  fi
  failed=1
  echo "fuzz: $name: FAILED (exit status $status)"
  grep -E "ERROR: |runtime error|check failed|terminate called|what\(\):" "$work/log" 2>/dev/null | head -n 5 | sed 's/^/  /' || true
  for f in $findings; do
    echo "  reproducer: $f"
    echo "  run it:     $BUILD_DIR/fuzz_$name $f"
  done
  echo "  log:        $work/log"
done
if [ "$failed" -ne 0 ]; then
  echo "fuzz: a harness found a problem (fuzz/README.md: how a crash becomes a regression test)"
  exit 1
fi
echo "fuzz: every harness ran clean ($(($(date +%s) - built)) s of fuzzing, $(($(date +%s) - started)) s in all)"
