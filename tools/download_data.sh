#!/usr/bin/env bash
# Downloads the datasets wedge uses and checks every file against its published sha256 sum.
#
#   tools/download_data.sh DIR            download what is missing into DIR, then verify
#   tools/download_data.sh --verify DIR   only verify the files already in DIR (no network)
#
# Layout written (the one `--data-dir` expects):
#   DIR/bert-base-uncased-vocab.txt                     BERT-uncased WordPiece vocabulary (Apache-2.0)
#   DIR/wikitext-2/wiki.{train,valid,test}.tokens       WikiText-2, tokenized release (CC BY-SA 3.0)
#   DIR/wikitext-2-raw/wiki.{train,valid,test}.raw      WikiText-2, raw release (CC BY-SA 3.0)
#   DIR/snli/snli_1.0_{train,dev,test}.{jsonl,txt}      SNLI 1.0 (CC BY-SA 4.0)
# then: wedge data stats --data wikitext2 --data-dir DIR
#       wedge data stats --data snli --data-dir DIR/snli
#
# The original WikiText download links are gone; the files come from public repositories
# that carry byte-identical copies (same git blob ids as the official files). SNLI comes
# from Stanford's site. Needs curl or wget, sha256sum and unzip.
set -euo pipefail

usage() {
  sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

verify_only=0
if [[ "${1:-}" == "--verify" ]]; then
  verify_only=1
  shift
fi
[[ $# -eq 1 ]] || usage
dir=$1

# path inside DIR | sha256 | URL ("" = comes out of the SNLI zip)
files=(
  "bert-base-uncased-vocab.txt|07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3|https://huggingface.co/bert-base-uncased/resolve/main/vocab.txt"
  "wikitext-2/wiki.train.tokens|9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f|https://raw.githubusercontent.com/reichenbch/Word-Level-Language-Model/95f4549b9e94447e21da9d1de23c222614030964/data/wikitext-2/wiki.train.tokens"
  "wikitext-2/wiki.valid.tokens|f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8|https://raw.githubusercontent.com/reichenbch/Word-Level-Language-Model/95f4549b9e94447e21da9d1de23c222614030964/data/wikitext-2/wiki.valid.tokens"
  "wikitext-2/wiki.test.tokens|d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0|https://raw.githubusercontent.com/reichenbch/Word-Level-Language-Model/95f4549b9e94447e21da9d1de23c222614030964/data/wikitext-2/wiki.test.tokens"
  "wikitext-2-raw/wiki.train.raw|6707892fa3788b5ab9ed78ab5ff37d9fe825f6011a2ad4fcd6a6d467f0e7da57|https://raw.githubusercontent.com/wyshi/sdp_transformers/67f51dacb983f17926a3376ec10b374c0ef0588a/data/wikitext-2-raw/train.txt"
  "wikitext-2-raw/wiki.valid.raw|4cd0f6876d07a413aa911261ff6d363c72d757d47f0fdd6015702014c89cb9c7|https://raw.githubusercontent.com/wyshi/sdp_transformers/67f51dacb983f17926a3376ec10b374c0ef0588a/data/wikitext-2-raw/valid.txt"
  "wikitext-2-raw/wiki.test.raw|173c87a53759e0201f33e0ccf978e510c2042d7f2cb78229d9a50d79b9e7dd08|https://raw.githubusercontent.com/wyshi/sdp_transformers/67f51dacb983f17926a3376ec10b374c0ef0588a/data/wikitext-2-raw/test.txt"
  "snli/snli_1.0_dev.jsonl|9c03faff70182ef086ebfeed2cffbabb5fcc6a84a8b3314decbbb5b01f07f4bf|"
  "snli/snli_1.0_test.jsonl|1147550151ca8b16ddb31d8dc0e739a670a65f7c3e64aac5951eaeff103fb220|"
)
snli_zip_url="https://nlp.stanford.edu/projects/snli/snli_1.0.zip"
snli_zip_sha256="afb3d70a5af5d8de0d9d81e2637e0fb8c22d1235c2749d83125ca43dab0dbd3e"

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

fetch() {  # URL DEST
  local tmp="$2.part"
  mkdir -p "$(dirname "$2")"
  if command -v curl >/dev/null; then
    curl -fL --retry 3 -o "$tmp" "$1"
  elif command -v wget >/dev/null; then
    wget -q -O "$tmp" "$1"
  else
    echo "error: neither curl nor wget is installed" >&2
    exit 1
  fi
  mv "$tmp" "$2"
}

if [[ $verify_only -eq 0 ]]; then
  mkdir -p "$dir"
  for entry in "${files[@]}"; do
    IFS='|' read -r path sum url <<<"$entry"
    [[ -n "$url" && ! -f "$dir/$path" ]] || continue
    echo "downloading $path"
    fetch "$url" "$dir/$path"
  done
  if [[ ! -f "$dir/snli/snli_1.0_dev.jsonl" || ! -f "$dir/snli/snli_1.0_train.jsonl" ]]; then
    zip="$dir/snli/snli_1.0.zip"
    [[ -f "$zip" ]] || { echo "downloading snli_1.0.zip (90 MB)"; fetch "$snli_zip_url" "$zip"; }
    if [[ "$(sha256_of "$zip")" != "$snli_zip_sha256" ]]; then
      echo "error: $zip has the wrong sha256 sum (expected $snli_zip_sha256); delete it and run again" >&2
      exit 1
    fi
    unzip -q -o -j "$zip" 'snli_1.0/snli_1.0_*' -d "$dir/snli"
    rm -f "$zip"
  fi
fi

status=0
for entry in "${files[@]}"; do
  IFS='|' read -r path sum url <<<"$entry"
  if [[ ! -f "$dir/$path" ]]; then
    echo "MISSING  $path"
    status=1
  elif [[ "$(sha256_of "$dir/$path")" == "$sum" ]]; then
    echo "ok       $path"
  else
    echo "BAD SUM  $path (expected $sum)"
    status=1
  fi
done
# The SNLI train split has no published per-file sum; it came out of the checked zip.
if [[ -f "$dir/snli/snli_1.0_train.jsonl" ]]; then
  echo "present  snli/snli_1.0_train.jsonl ($(wc -l <"$dir/snli/snli_1.0_train.jsonl") rows, from the checked zip)"
else
  echo "absent   snli/snli_1.0_train.jsonl"
fi
exit $status
