#!/usr/bin/env bash
# The README's first command: install what is missing, build, prepare the built-in dataset (Jane
# Austen's six novels, GPT-2 tokens) and train a small GPT-2: on the GPU with ./train_gpt when this
# machine has one (and nvcc), otherwise on the CPU with ./train_gpt_cpu, for a few minutes.
# Extra arguments go to the trainer (e.g. -x 50 for a shorter run). Each run gets a folder of its
# own: out/quickstart, or out/quickstart_2, _3, ... when an earlier run is there (the trainer never
# mixes two runs in one folder); -o DIR among the arguments picks it yourself, -o DIR -y 1 resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
trainer=train_gpt_cpu
if nvidia-smi -L >/dev/null 2>&1 && { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; }; then
  trainer=train_gpt
fi
make -j"$(nproc)" "$trainer" data/prepare
data/prepare janeausten
# The output folder: the one given with -o, else the first of out/quickstart, out/quickstart_2, ...
# that holds no run yet.
out=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    -o|--output-dir) out="${args[i+1]:-}" ;;
    --output-dir=*) out="${args[i]#*=}" ;;
  esac
done
output_flags=()
if [ -z "$out" ]; then
  out=out/quickstart
  for n in $(seq 2 1000); do
    [ -n "$(ls -A "$out" 2>/dev/null)" ] || break
    out="out/quickstart_$n"
  done
  output_flags=(-o "$out")
  echo "quickstart: training into $out"
fi
# The same small job on either: the CPU trainer's defaults (a 7M-parameter model, 600 steps).
./"$trainer" -e custom:L4:C128:H4:T256 -b 8 -t 128 -x 600 -l 1e-3 -u 20 -q 0.1 -c 0.1 -v 100 -m 10 \
  -s 200 -g 64 "${output_flags[@]}" --override "$@"
scripts/plot_metrics.sh "$out" && echo "chart: $out/metrics.png"
