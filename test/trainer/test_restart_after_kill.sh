#!/usr/bin/env bash
# A run SIGKILLed at random moments and restarted each time by scripts/supervise.sh ends with the same
# checkpoint, bit for bit, as the same run left alone. Uses the emulated CUDA trainer (train_gpt_emu)
# on a tiny model and the built-in dataset.
set -u
name=supervised_run_killed_three_times_ends_bitwise_identical
trainer="${BIN:-.}/train_gpt_emu"
[ -x "$trainer" ] || { echo "FAIL $name: $trainer was not built"; exit 1; }
data/prepare janeausten >/dev/null 2>&1 || { echo "FAIL $name: data/prepare janeausten failed"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
steps=24
flags=(-e custom:L1:C64:H2:T32 -b 2 -t 32 -d 128 -x $steps -n 2 -l 1e-3 -u 2 -c 0.1 -v 6 -m 2 -s 0
       --shuffle 1 --seed 5 -y 1)

"$trainer" "${flags[@]}" -o "$work/straight" >"$work/straight.log" 2>&1 ||
  { echo "FAIL $name: the uninterrupted run failed"; tail -5 "$work/straight.log"; exit 1; }

bash scripts/supervise.sh --max-restarts 10 --wait 0 -- "$trainer" "${flags[@]}" -o "$work/killed" \
  >"$work/killed.log" 2>&1 &
supervisor=$!
RANDOM=17
kills=0
for attempt in $(seq 1 40); do
  [ $kills -ge 3 ] && break
  sleep "0.$((RANDOM % 9 + 1))"
  kill -0 $supervisor 2>/dev/null || break
  # Only the trainer: its command line starts with its path (the supervisor's starts with bash).
  if pkill -KILL -f "^$trainer .*$work/killed" 2>/dev/null; then kills=$((kills + 1)); sleep 0.5; fi
done
wait $supervisor
status=$?
restarts=$(grep -c 'the trainer died' "$work/killed.log")
if [ $status -ne 0 ] || [ "$restarts" -lt 1 ]; then
  echo "FAIL $name: supervisor status $status after $restarts restart(s) ($kills kills)"
  tail -8 "$work/killed.log" | sed 's/^/   | /'
  exit 1
fi
final=$(printf '%08d' $steps)
for file in "model_$final.bin" "state_${final}_00000.bin"; do
  if ! cmp -s "$work/straight/$file" "$work/killed/$file"; then
    echo "FAIL $name: $file differs from the uninterrupted run's after $restarts restart(s)"
    exit 1
  fi
done
echo "PASS $name ($kills kills, $restarts restarts)"
