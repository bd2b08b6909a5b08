#!/usr/bin/env bash
# A run SIGKILLed at random moments and restarted each time by scripts/supervise.sh ends with the same
# checkpoint, bit for bit, as the same run left alone. Uses the emulated CUDA trainer (train_gpt_emu)
# on a tiny model with a vocabulary of 512 and token files written here. (With GPT-2's 50257 tokens and
# the built-in dataset a step took 2.5 s, most of it the LM head, and the test over a minute; now 64
# steps, enough for the three kills to land before the run ends, take a few seconds.)
set -u
name=supervised_run_killed_three_times_ends_bitwise_identical
trainer="${BIN:-.}/train_gpt_emu"
[ -x "$trainer" ] || { echo "FAIL $name: $trainer was not built"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# 20000 tokens below 512 for training, 2000 others for validation.
for file in train:20000:0 val:2000:7; do
  IFS=: read -r part n offset <<<"$file"
  python3 -c 'import struct, sys
n, offset = int(sys.argv[1]), int(sys.argv[2])
header = struct.pack("<3i", 20240520, 1, n) + bytes(1012)
tokens = struct.pack("<%dH" % n, *[(i * 37 + i // 7 + (i * i) % 13 + offset) % 512 for i in range(n)])
sys.stdout.buffer.write(header + tokens)' "$n" "$offset" >"$work/$part.bin"
done
steps=64
flags=(-e custom:L1:C64:H2:V512:T32 -i "$work/train.bin" -j "$work/val.bin" -b 2 -t 32 -d 128 -x $steps -n 2
       -l 1e-3 -u 2 -c 0.1 -v 6 -m 2 -s 0 --shuffle 1 --seed 5 -y 1)

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
