#!/usr/bin/env bash
# The README's first command: install what is missing, build, prepare the built-in dataset (Jane
# Austen's six novels, GPT-2 tokens) and train a small GPT-2: on the GPU with ./train_gpt when this
# machine has one (and nvcc), otherwise on the CPU with ./train_gpt_cpu, for a few minutes.
# Extra arguments go to the trainer (e.g. -x 50 for a shorter run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
trainer=train_gpt_cpu
if nvidia-smi -L >/dev/null 2>&1 && { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; }; then
  trainer=train_gpt
fi
make -j"$(nproc)" "$trainer" data/prepare
data/prepare janeausten
# The same small job on either: the CPU trainer's defaults (a 7M-parameter model, 600 steps).
./"$trainer" -e custom:L4:C128:H4:T256 -b 8 -t 128 -x 600 -l 1e-3 -u 20 -q 0.1 -c 0.1 -v 100 -m 10 \
  -s 200 -g 64 -o out/quickstart "$@"
scripts/plot_metrics.sh out/quickstart/metrics.jsonl && echo "chart: out/quickstart/metrics.png"
