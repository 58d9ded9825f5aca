#!/usr/bin/env bash
# Builds and runs the examples against an installed wedge, as a user would:
#
#   tools/examples/check.sh PREFIX BUILD_ROOT TEXT_FILE
#
# PREFIX is where `cmake --install` put wedge, BUILD_ROOT a scratch directory for the
# examples' build trees, TEXT_FILE any text for tiny_lm to train on (and for the run that
# finetune starts from: PREFIX/bin/wedge learns a vocabulary of it and trains a small model
# on it). Fails (non-zero) if an example does not configure, build, or pass its own check.
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 PREFIX BUILD_ROOT TEXT_FILE" >&2
  exit 2
fi
examples="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
prefix="$(cd "$1" && pwd)"
mkdir -p "$2"
build_root="$(cd "$2" && pwd)"
text_file="$3"

build() {  # build NAME: configure and build tools/examples/NAME into BUILD_ROOT/NAME
  echo "== $1: configure and build"
  cmake -S "$examples/$1" -B "$build_root/$1" -DCMAKE_PREFIX_PATH="$prefix"
  cmake --build "$build_root/$1"
}

build mlp
echo "== mlp: run"
"$build_root/mlp/mlp"

build tiny_lm
echo "== tiny_lm: run on $text_file"
"$build_root/tiny_lm/tiny_lm" "$text_file"

# A file that is not there must give one `error:` line naming it, and status 1.
echo "== tiny_lm: a missing text file is reported"
missing="$build_root/no-such-file.txt"
status=0
message="$("$build_root/tiny_lm/tiny_lm" "$missing" 2>&1)" || status=$?
if [[ $status -ne 1 || "$message" != "error: "*"$missing"* ]]; then
  echo "expected status 1 and an 'error:' line naming $missing; got status $status: $message" >&2
  exit 1
fi
echo "$message"

build finetune
echo "== finetune: a run of the command line, tuned on $examples/README.md"
wedge_cli="$prefix/bin/wedge"
run="$build_root/finetune/run"
"$wedge_cli" vocab train --size 400 --out "$build_root/finetune/vocab.txt" "$text_file" > /dev/null
"$wedge_cli" train --data text --train "$text_file" --vocab "$build_root/finetune/vocab.txt" --layers 1 --d-model 32 \
  --d-ff 64 --heads 2 --block 32 --batch 8 --max-steps 40 --log-every 1000 --overwrite --out "$run" > /dev/null
"$build_root/finetune/finetune" "$run" "$examples/README.md" --steps 60

echo "== examples: all passed"
