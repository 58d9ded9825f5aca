#!/usr/bin/env bash
# Builds wedge with AddressSanitizer (LeakSanitizer included) and UndefinedBehaviorSanitizer
# and runs the test suite under them: any report - an out-of-bounds access, a use after
# free, a leak, a signed overflow, a null pointer passed to memcmp - fails the run.
#
#   tools/sanitize.sh                  # configure, build and test in build-asan/
#   BUILD_DIR=out tools/sanitize.sh    # another build folder
#   tools/sanitize.sh -R '^engine$'    # further arguments go to ctest (here: one room only)
#   tools/sanitize.sh --help
#
# The build: GCC (g++, or CXX when set), the engine at -O2 as in Release (some compiler
# behaviour shows only when optimising) and the test files at -O1 (assertions, compiled in
# about half the time; the CUDA kernels' host emulation keeps -O2), CUDA off
# (WEDGE_CUDA=OFF: the sanitizers see host code only), and
# the sanitizer flags from CMakeLists.txt's WEDGE_SANITIZE option (-fsanitize=address,
# undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer). Benchmarks are not
# built: they are not run here.
#
# What runs: every room's suite (engine, ops, kernels, data, models, tools) in full, and
# the install-and-build check of the examples, as many tests at a time as there are cores
# (the MPI tests alone). Nothing is left out: under the sanitizers the suite takes about
# twice its normal time (the figures are in tools/README.md).
#
# Run-time options (set them in the environment to override):
#   ASAN_OPTIONS   halt_on_error=1, detect_leaks=1 (LeakSanitizer at exit),
#                  check_initialization_order=1 (the kernel tables register themselves from
#                  static initialisers), strict_string_checks=1
#   UBSAN_OPTIONS  halt_on_error=1, print_stacktrace=1
set -euo pipefail

cd "$(dirname "$0")/.."

if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi

BUILD_DIR="${BUILD_DIR:-build-asan}"
export CXX="${CXX:-g++}"

echo "sanitize: configuring ${BUILD_DIR}/ (${CXX}, ASan + UBSan, -O2, CUDA off)"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DWEDGE_SANITIZE=ON -DWEDGE_CUDA=OFF \
  -DWEDGE_BUILD_BENCH=OFF
echo "sanitize: building"
cmake --build "$BUILD_DIR" -j "$(nproc)"

export ASAN_OPTIONS="${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:check_initialization_order=1:strict_string_checks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

echo "sanitize: running the tests under the sanitizers, $(nproc) at a time"
ctest --test-dir "$BUILD_DIR" -j "$(nproc)" --output-on-failure "$@"
echo "sanitize: no sanitizer reports"
