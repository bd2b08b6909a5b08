#!/usr/bin/env bash
# Checkpoints written by a background thread (--checkpoint-async 1, the default) through the CPU
# trainer: every file bitwise equal to the synchronous writer's (--checkpoint-async 0), each
# checkpoint announced once its DONE marker is written (by the writer thread), and no temporary file
# left behind; and the time per step with a checkpoint after every step (-n 1) within 10% of the time
# per step without checkpoints, measured in the same test (dev/checkpoint_overhead.sh prints the same
# figures, and the synchronous writer's beside them).
set -u
trainer="${BIN:-.}/train_gpt_cpu"
[ -x "$trainer" ] || { echo "SKIPPED async_checkpoints (needs $trainer)"; exit 0; }
source "$(dirname "$0")/checkpoint_workload.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
ok=1

# The same files, written in the background or not.
"$trainer" "${flags[@]}" -x 6 -n 2 -o "$work/async" >"$work/async.log" 2>&1 &&
  "$trainer" "${flags[@]}" -x 6 -n 2 --checkpoint-async 0 -o "$work/sync" >"$work/sync.log" 2>&1 ||
  { echo "FAIL async_checkpoint_files_equal_the_synchronous_ones: a run failed"; tail -3 "$work"/*.log; exit 1; }
differ=""
for f in $(cd "$work/sync" && ls model_* state_* DONE_*); do cmp -s "$work/sync/$f" "$work/async/$f" || differ="$differ $f"; done
count=$(cd "$work/sync" && ls model_* state_* DONE_* | wc -l)
announced=$(grep -c '^checkpoint: step [246] saved' "$work/async.log")
temporary=$(find "$work/async" -name '*.tmp.*' | wc -l)
if [ -n "$differ" ] || [ "$count" -ne 9 ] || [ "$announced" -ne 3 ] || [ "$temporary" -ne 0 ]; then
  echo "FAIL async_checkpoint_files_equal_the_synchronous_ones: $count files; differing:$differ;" \
       "$announced of 3 announced; $temporary temporary files"
  ok=0
else
  echo "PASS async_checkpoint_files_equal_the_synchronous_ones ($count files of checkpoints 2, 4, 6)"
fi

# The cost: the time per step from step 4 to step 24 (checkpoint_workload.sh's step_ms), without
# checkpoints and with -n 1, alternating, the fastest of 3 runs of each. The writer thread shares the
# cores with the training threads, so one measurement follows whatever else the machine runs: a
# measurement over 1.10 is taken again, up to 3 in all, and the test fails when all 3 are (a loop
# that waited for its files, as synchronous writing does, measures x1.12 to x1.9 every time).
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a < b ? a : b) }'; }
timed() { rm -rf "$work/timed"; step_ms 4 "$trainer" "${flags[@]}" -x 24 -o "$work/timed" "$@"; }
ratios=""
for attempt in 1 2 3; do
  plain=1e9 async=1e9
  for _ in 1 2 3; do
    plain=$(best "$plain" "$(timed)")
    async=$(best "$async" "$(timed -n 1)")
  done
  ratio=$(awk -v a="$async" -v p="$plain" 'BEGIN { printf "%.3f", (p > 0 && a > 0) ? a / p : 99 }')
  ratios="$ratios x$ratio ($async vs $plain ms)"
  awk -v r="$ratio" 'BEGIN { exit !(r <= 1.10) }' && break
done
if awk -v r="$ratio" 'BEGIN { exit !(r <= 1.10) }'; then
  echo "PASS checkpoint_every_step_costs_at_most_10_percent:$ratios"
else
  echo "FAIL checkpoint_every_step_costs_at_most_10_percent: time per step with -n 1 over without:$ratios"
  ok=0
fi

[ $ok = 1 ]
