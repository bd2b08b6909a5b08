#!/usr/bin/env bash
# What a checkpoint after every step costs the CPU trainer (train_gpt_cpu): the wall time of 16 steps
# without checkpoints, with -n 1 written by the background thread (--checkpoint-async 1) and with -n 1
# written before the next step (--checkpoint-async 0), each run twice, alternating, the faster of each
# counted, and the two ratios to the run without checkpoints. The model has a small vocabulary so that
# a step's compute, not its 7 MiB of files, is what a step costs; OpenMP's idle threads sleep rather
# than spin (OMP_WAIT_POLICY=passive) so that the writer thread gets a core. Run it on an otherwise
# idle machine: the writer competes with the training threads for the cores.
#   usage: bash dev/checkpoint_overhead.sh        (after make train_gpt_cpu)
set -u
trainer="${BIN:-.}/train_gpt_cpu"
[ -x "$trainer" ] || { echo "error: $trainer is not built (make train_gpt_cpu)"; exit 1; }
source "$(dirname "$0")/../test/train/checkpoint_workload.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
# Wall time of 16 steps: without checkpoints, with one after every step (async), and synchronous.
wall_ms() {  # runs the trainer with the given extra flags; prints its wall time in ms
  local start end
  rm -rf "$work/timed"
  start=$(date +%s%N)
  "$trainer" "${flags[@]}" -x 16 -o "$work/timed" "$@" >"$work/timed.log" 2>&1 || { echo 0; return; }
  end=$(date +%s%N)
  echo $(( (end - start) / 1000000 ))
}
best() { [ "$1" -lt "$2" ] && echo "$1" || echo "$2"; }
plain=999999 async=999999 sync=999999
for _ in 1 2; do
  plain=$(best "$plain" "$(wall_ms)")
  async=$(best "$async" "$(wall_ms -n 1)")
  sync=$(best "$sync" "$(wall_ms -n 1 --checkpoint-async 0)")
done
ratio=$(awk -v a="$async" -v p="$plain" 'BEGIN { printf "%.3f", a / p }')
sync_ratio=$(awk -v a="$sync" -v p="$plain" 'BEGIN { printf "%.3f", a / p }')
if [ "$plain" -le 0 ] || [ "$async" -le 0 ] || [ "$sync" -le 0 ]; then
  echo "error: a run failed"; exit 1
fi
echo "16 steps: $plain ms without checkpoints; with one after every step: $async ms written in the background" \
     "(x$ratio), $sync ms written before the next step (x$sync_ratio)"
