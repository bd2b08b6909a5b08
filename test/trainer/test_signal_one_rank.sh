#!/usr/bin/env bash
# SIGTERM to one rank of a 2-rank run (as a launcher may deliver it to one rank first): every rank
# stops after the same step, the checkpoint of that step is complete (both ranks' state files), the
# job exits non-zero saying "stopped at step N; resume with -y 1", and resuming ends with the same
# weights, bit for bit, as the run left alone. Uses the emulated trainer (fp32) as 2 MPI ranks.
set -u
name=sigterm_to_one_rank_stops_all_ranks_at_the_same_step
trainer="${BIN:-.}/train_gpt_emu_fp32"
source "$(dirname "$0")/../parallel/tiny_mpi_run.sh"
steps=20
flags=(-e custom:L1:C64:H2:V64:T16 -i "$work/train.bin" -b 2 -t 16 -v 0 -s 0 -x $steps)
run() { timeout 120 mpirun --oversubscribe -np 2 "$trainer" "${flags[@]}" "$@"; }

run -o "$work/straight" >"$work/straight.log" 2>&1 ||
  { echo "FAIL $name: the uninterrupted run failed"; tail -5 "$work/straight.log"; exit 1; }
run -o "$work/stopped" >"$work/stopped.log" 2>&1 &
job=$!
for _ in $(seq 1 600); do grep -q '^step 2/' "$work/stopped.log" && break; sleep 0.1; done
victim=$(pgrep -n -f "^$trainer -e custom:L1:C64:H2:V64:T16 -i $work/train.bin")
[ -n "$victim" ] && kill -TERM "$victim"
wait $job
status=$?
stopped=$(sed -n 's/^stopped at step \([0-9]*\); resume with -y 1.*/\1/p' "$work/stopped.log")
n=$(printf '%08d' "${stopped:-0}")
if [ -z "$victim" ] || [ $status -eq 0 ] || [ -z "$stopped" ] || [ "$stopped" -ge $steps ] ||
   [ ! -e "$work/stopped/DONE_$n" ] || [ ! -e "$work/stopped/state_${n}_00000.bin" ] ||
   [ ! -e "$work/stopped/state_${n}_00001.bin" ] || ls "$work/stopped" | grep -q '\.tmp\.'; then
  echo "FAIL $name: exit status $status, stopped at '${stopped}', files: $(ls "$work/stopped" | tr '\n' ' ')"
  tail -4 "$work/stopped.log" | sed 's/^/   | /'
  exit 1
fi
run -o "$work/stopped" -y 1 >"$work/resumed.log" 2>&1 ||
  { echo "FAIL $name: resuming failed"; tail -5 "$work/resumed.log"; exit 1; }
last=$(printf '%08d' $steps)
for file in "model_$last.bin" "state_${last}_00000.bin" "state_${last}_00001.bin"; do
  if ! cmp -s "$work/straight/$file" "$work/stopped/$file"; then
    echo "FAIL $name: $file differs from the uninterrupted run's (stopped at step $stopped)"
    exit 1
  fi
done
echo "PASS $name (stopped at step $stopped, exit status $status)"
