#!/usr/bin/env bash
# The README's first command: install what is missing, build, prepare the built-in dataset (Jane
# Austen's six novels, GPT-2 tokens) and train a small GPT-2 on the CPU for a few minutes.
# Extra arguments go to train_gpt_cpu (e.g. -x 50 for a shorter run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
make -j"$(nproc)" train_gpt_cpu data/prepare
data/prepare janeausten
./train_gpt_cpu -o out/quickstart "$@"
scripts/plot_metrics.sh out/quickstart/metrics.jsonl && echo "chart: out/quickstart/metrics.png"
