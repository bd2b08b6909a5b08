#!/usr/bin/env bash
# Checkpoints written by a background thread (--checkpoint-async 1, the default) through the CPU
# trainer: every file bitwise equal to the synchronous writer's (--checkpoint-async 0), each
# checkpoint announced once its DONE marker is written (by the writer thread), and no temporary file
# left behind; the loop not waiting for a slow disk (every fsync 100 ms longer, slow_fsync.c), where
# the synchronous writer's loop does; and the time per step with a checkpoint after every step (-n 1)
# within 10% of the time per step without checkpoints, measured in the same test
# (dev/checkpoint_overhead.sh prints the same figures on the real disk, and the synchronous
# writer's beside them).
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

# The timed runs: the time per step from step 4 to step 24 (checkpoint_workload.sh's step_ms), the
# two newest checkpoints kept. ratio A B: A over B, 99 where a run failed.
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a < b ? a : b) }'; }
ratio() { awk -v a="$1" -v p="$2" 'BEGIN { printf "%.3f", (p > 0 && a > 0) ? a / p : 99 }'; }
within() { awk -v r="$1" -v limit="$2" 'BEGIN { exit !(r <= limit) }'; }
timed() { local dir=$1; shift; rm -rf "$dir/timed"; step_ms 4 "$trainer" "${flags[@]}" -x 24 -nk 2 -o "$dir/timed" "$@"; }
writer_line() { grep -m1 '^checkpoint cost' "$work/step_ms.log" || echo "no checkpoint cost line"; }

# The loop does not wait for the disk. A disk whose fsync takes 100 ms longer (3 files a checkpoint:
# 300 ms) and a checkpoint every 5 steps (about 420 ms of training): the synchronous writer puts
# those 300 ms in the loop (about x1.7 here), the background writer hides them. Each measurement
# takes the fastest of 3 alternating runs of each (without checkpoints, synchronous, background) and
# asks what share of the synchronous writer's cost the background writer hides:
# (synchronous - background) / (synchronous - without). It counts where the synchronous writer costs
# at least x1.3 (the disk is seen through the load) and passes at two thirds hidden; a loop that
# waits hides none. A loaded machine moves single runs by 10 to 20%, so a measurement that does not
# pass is taken again, up to 4 in all, and the test fails when none passes.
cc -O2 -shared -fPIC -o "$work/slow_fsync.so" "$(dirname "$0")/slow_fsync.c" ||
  { echo "FAIL the_loop_does_not_wait_for_a_slow_disk: slow_fsync.c does not build"; exit 1; }
slow() { LD_PRELOAD="$work/slow_fsync.so" FSYNC_DELAY_MS=100 timed "$work" "$@"; }
hidden() { awk -v p="$1" -v a="$2" -v s="$3" 'BEGIN { printf "%.2f", (s > p) ? (s - a) / (s - p) : 0 }'; }
passes() { awk -v p="$1" -v a="$2" -v s="$3" 'BEGIN { exit !(p > 0 && a > 0 && s >= 1.3 * p && s - a >= 2 * (s - p) / 3) }'; }
measured="" passed=0
for attempt in 1 2 3 4; do
  plain=1e9 async=1e9 sync=1e9
  for _ in 1 2 3; do
    plain=$(best "$plain" "$(slow)")
    sync=$(best "$sync" "$(slow -n 5 --checkpoint-async 0)")
    async=$(best "$async" "$(slow -n 5)")
  done
  measured="$measured synchronous x$(ratio "$sync" "$plain"), background x$(ratio "$async" "$plain")"
  measured="$measured ($sync, $async vs $plain ms): $(hidden "$plain" "$async" "$sync") hidden;"
  passes "$plain" "$async" "$sync" && { passed=1; break; }
done
if [ $passed = 1 ]; then
  echo "PASS the_loop_does_not_wait_for_a_slow_disk:$measured"
else
  echo "FAIL the_loop_does_not_wait_for_a_slow_disk:$measured $(writer_line)"
  ok=0
fi

# The cost of the writer's work (serialising, checksumming, writing 7.2 MiB) with a checkpoint after
# every step (-n 1): the fastest of 3 alternating runs without checkpoints and with, at most x1.10.
# Written to memory (/dev/shm, where it is a tmpfs with 48 MiB free: the two checkpoints kept and
# the one being written take 22 MiB) when it can be: how long the disk takes is the case above, this
# one is what the writer thread takes from the training threads. They share the cores, so one
# measurement follows whatever else the machine runs: a measurement over 1.10 is taken again, up to
# 5 in all, and the test fails when all 5 are (a loop that waited for its files, as synchronous
# writing to a disk does, measured x1.08 to x1.9 on the 2-core build machine).
files="$work" where="the disk"
if [ -d /dev/shm ] && [ -w /dev/shm ] && [ "$(stat -f -c %T /dev/shm)" = tmpfs ] &&
   [ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -gt 49152 ]; then
  files=$(mktemp -d -p /dev/shm) where="memory (/dev/shm)"
  trap 'rm -rf "$work" "$files"' EXIT
fi
ratios=""
for attempt in 1 2 3 4 5; do
  plain=1e9 async=1e9
  for _ in 1 2 3; do
    plain=$(best "$plain" "$(timed "$files")")
    async=$(best "$async" "$(timed "$files" -n 1)")
  done
  ratios="$ratios x$(ratio "$async" "$plain") ($async vs $plain ms)"
  within "$(ratio "$async" "$plain")" 1.10 && break
done
if within "$(ratio "$async" "$plain")" 1.10; then
  echo "PASS checkpoint_every_step_costs_at_most_10_percent (written to $where):$ratios"
else
  echo "FAIL checkpoint_every_step_costs_at_most_10_percent (written to $where): time per step with -n 1" \
       "over without:$ratios; $(writer_line)"
  ok=0
fi

[ $ok = 1 ]
