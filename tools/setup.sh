#!/usr/bin/env bash
# Installs wedge's build dependencies from Debian packages (when missing), then configures
# and builds everything into build/. Safe to run again: it only installs what is absent.
#
#   tools/setup.sh                  # Release build in build/
#   BUILD_DIR=out tools/setup.sh
#   tools/setup.sh --with-pytorch   # also Debian's PyTorch and OpenMP OpenBLAS, which only
#                                   # bench/compare_pytorch.py uses (wedge never does)
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"

# Open MPI is optional to the build (without it there is no `mpirun -np N wedge train`); it
# is installed so that data-parallel training and its tests are there by default.
packages=(build-essential cmake pkg-config libopenblas-dev libfmt-dev doctest-dev
          libbenchmark-dev libcli11-dev nlohmann-json3-dev libutf8proc-dev
          openmpi-bin libopenmpi-dev)
case "${1:-}" in
  "") ;;
  --with-pytorch) packages+=(python3-torch libopenblas0-openmp) ;;
  *) echo "setup: unknown option $1 (the one option is --with-pytorch)" >&2; exit 2 ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

echo "setup: configuring ${BUILD_DIR}/"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release
echo "setup: building (this takes a few minutes on 2 cores)"
cmake --build "$BUILD_DIR" -j "$(nproc)"
echo "setup: done - the CLI is ${BUILD_DIR}/wedge"
