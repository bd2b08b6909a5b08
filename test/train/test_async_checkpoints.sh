#!/usr/bin/env bash
# Checkpoints written by a background thread (--checkpoint-async 1, the default) through the CPU
# trainer: every file bitwise equal to the synchronous writer's (--checkpoint-async 0), and a run that
# checkpoints after every step (-n 1) within 10% of the wall time of the same run without checkpoints
# (each run twice, alternating, the faster of each counted; the synchronous writer's time printed
# beside them). The model has a small vocabulary so that a step's compute, not its 7 MiB of files, is
# what a step costs: the background writer keeps up, and the loop pays only the host copy. OpenMP's
# idle threads sleep rather than spin (OMP_WAIT_POLICY=passive): on a machine with as many cores as
# OpenMP threads, spinning threads would take the writer's core.
set -u
trainer="${BIN:-.}/train_gpt_cpu"
[ -x "$trainer" ] || { echo "SKIPPED async_checkpoints (needs $trainer)"; exit 0; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -c 'import struct, sys
n = 200000
header = struct.pack("<3i", 20240520, 1, n) + bytes(1012)
tokens = struct.pack("<%dH" % n, *[(i * 37 + i // 7 + i // 101) % 512 for i in range(n)])
sys.stdout.buffer.write(header + tokens)' >"$work/train.bin"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=passive
flags=(-e custom:L2:C128:H4:V512:T64 -i "$work/train.bin" -b 64 -t 64 -v 0 -s 0 -l 1e-3)
ok=1

# The same files, written in the background or not.
"$trainer" "${flags[@]}" -x 6 -n 2 -o "$work/async" >"$work/async.log" 2>&1 &&
  "$trainer" "${flags[@]}" -x 6 -n 2 --checkpoint-async 0 -o "$work/sync" >"$work/sync.log" 2>&1 ||
  { echo "FAIL async_checkpoint_files_equal_the_synchronous_ones: a run failed"; tail -3 "$work"/*.log; exit 1; }
differ=""
for f in $(cd "$work/sync" && ls model_* state_* DONE_*); do cmp -s "$work/sync/$f" "$work/async/$f" || differ="$differ $f"; done
count=$(cd "$work/sync" && ls model_* state_* DONE_* | wc -l)
if [ -n "$differ" ] || [ "$count" -ne 9 ] || [ -n "$(find "$work/async" -name '*.tmp.*')" ]; then
  echo "FAIL async_checkpoint_files_equal_the_synchronous_ones: $count files; differing:$differ"
  ok=0
else
  echo "PASS async_checkpoint_files_equal_the_synchronous_ones ($count files of checkpoints 2, 4, 6)"
fi

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
plain=999999 async=999999
for _ in 1 2; do
  plain=$(best "$plain" "$(wall_ms)")
  async=$(best "$async" "$(wall_ms -n 1)")
done
sync=$(wall_ms -n 1 --checkpoint-async 0)
ratio=$(awk -v a="$async" -v p="$plain" 'BEGIN { printf "%.3f", a / p }')
sync_ratio=$(awk -v a="$sync" -v p="$plain" 'BEGIN { printf "%.3f", a / p }')
if [ "$plain" -le 0 ] || [ "$async" -le 0 ] || awk -v r="$ratio" 'BEGIN { exit !(r > 1.10) }'; then
  echo "FAIL checkpoint_every_step_costs_under_10_percent: 16 steps in $plain ms without checkpoints, $async ms with -n 1" \
       "in the background (x$ratio), $sync ms synchronous (x$sync_ratio)"
  ok=0
else
  echo "PASS checkpoint_every_step_costs_under_10_percent (16 steps: $plain ms without checkpoints, $async ms with one" \
       "after every step written in the background (x$ratio), $sync ms written synchronously (x$sync_ratio))"
fi
[ $ok = 1 ]
