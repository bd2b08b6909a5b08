#!/usr/bin/env bash
# What a checkpoint after every step costs the CPU trainer (train_gpt_cpu): its wall time per step
# without checkpoints, with -n 1 written by the background thread (--checkpoint-async 1) and with -n 1
# written before the next step (--checkpoint-async 0), and the two ratios to the time without. Each
# run trains $STEPS steps (default 24) and is timed from step 4 to its last step as the step lines
# arrive (test/train/checkpoint_workload.sh: start-up and warm-up left out); the three are run
# $REPEATS times (default 3), alternating, and the fastest of each counts. The model has a small
# vocabulary so that a step's compute, not its 7 MiB of files, is what a step costs; OpenMP's idle
# threads sleep rather than spin (OMP_WAIT_POLICY=passive) so that the writer thread gets a core. Run
# it on an otherwise idle machine: the writer competes with the training threads for the cores (on a
# shared one, as root, `nice -n -15` keeps the other work from taking them).
#   usage: bash dev/checkpoint_overhead.sh        (after make train_gpt_cpu; STEPS=N REPEATS=N BIN=DIR)
set -u
trainer="${BIN:-.}/train_gpt_cpu"
[ -x "$trainer" ] || { echo "error: $trainer is not built (make train_gpt_cpu)"; exit 1; }
source "$(dirname "$0")/../test/train/checkpoint_workload.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
steps=${STEPS:-24} repeats=${REPEATS:-3}
timed() { rm -rf "$work/timed"; step_ms 4 "$trainer" "${flags[@]}" -x "$steps" -o "$work/timed" "$@"; }
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a < b ? a : b) }'; }
plain=1e9 async=1e9 sync=1e9
for _ in $(seq "$repeats"); do
  plain=$(best "$plain" "$(timed)")
  async=$(best "$async" "$(timed -n 1)")
  sync=$(best "$sync" "$(timed -n 1 --checkpoint-async 0)")
done
if awk -v p="$plain" -v a="$async" -v s="$sync" 'BEGIN { exit !(p <= 0 || a <= 0 || s <= 0) }'; then
  echo "error: a run failed"; exit 1
fi
ratio() { awk -v a="$1" -v p="$plain" 'BEGIN { printf "%.3f", a / p }'; }
echo "per step (fastest of $repeats runs of $steps steps, OMP_NUM_THREADS=$OMP_NUM_THREADS): $plain ms without" \
     "checkpoints; with one after every step: $async ms written in the background (x$(ratio "$async")), $sync ms" \
     "written before the next step (x$(ratio "$sync"))"
