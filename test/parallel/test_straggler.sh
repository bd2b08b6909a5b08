#!/usr/bin/env bash
# A slow rank among three: rank 2 of a 3-rank run (the emulated trainer under mpirun, -z 1) is stopped
# with SIGSTOP for a second, three times, each in the middle of a step. The phase timers (--timers 2)
# must name it: at the steps it was stopped, the table's largest compute phase is rank 2's and
# exceeds that phase's fastest rank by most of a second, while the other ranks show that second as
# communication wait (they wait for rank 2 in the next collective); and the straggler line names
# rank 2. The same run writes a timeline of steps 2..3 whose every rank appears and nests.
set -u
name=a_rank_stopped_mid_step_is_named_the_straggler
trainer="${BIN:-.}/train_gpt_emu"
source "$(dirname "$0")/tiny_mpi_run.sh"
export EMU_STREAMS=1
steps=9
log="$work/run.log"
timeout 300 mpirun --oversubscribe -np 3 "$trainer" -e custom:L2:C32:H1:V64:T16 -i "$work/train.bin" -b 2 -t 16 \
  -v 0 -s 0 -x $steps -z 1 --timers 2 --profile-steps 2:3 -o "$work/out" >"$log" 2>&1 &
job=$!
# Rank 2's process: the trainer whose environment says it is world rank 2.
rank2=""
for _ in $(seq 1 600); do
  for pid in $(pgrep -f "^$trainer -e custom:L2:C32:H1:V64:T16"); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=2' && rank2=$pid
  done
  [ -n "$rank2" ] && break
  sleep 0.1
done
# Three stops of one second, each once a new step has begun (its line printed) and a little into it.
for step in 4 6 8; do
  for _ in $(seq 1 1200); do grep -q "^step $step/" "$log" && break; sleep 0.05; done
  sleep 0.3
  [ -n "$rank2" ] && kill -STOP "$rank2" && sleep 1 && kill -CONT "$rank2"
done
wait $job
status=$?
if [ $status -ne 0 ] || [ -z "$rank2" ]; then
  echo "FAIL $name: exit status $status, rank 2's process '${rank2}'"; tail -5 "$log" | sed 's/^/   | /'; exit 1
fi
# The tables: for each step, the largest compute phase spread (max - min, ms) with its slow rank, and the
# largest comm wait of the ranks other than that one.
tables=$(awk '
  /^phases of step/ { step = $4 }
  /^  (forward|loss|backward|optimizer) / {
    gsub(/[()]/, ""); spread = $(NF-1) - $(NF-3)
    if (spread > best[step]) { best[step] = spread; slow[step] = $NF } }
  /^  comm wait / { gsub(/[()]/, ""); wait[step] = $(NF-1); waiter[step] = $NF }
  END { for (s in best) printf "%d %.0f %d %.0f %d\n", s, best[s], slow[s], wait[s], waiter[s] }' "$log" | sort -n)
stalled=$(echo "$tables" | awk '$2 > 600 && $3 == 2 && $4 > 600 && $5 != 2' | wc -l)
named=$(grep -c '^straggler: rank 2 ' "$log")
others=$(grep '^straggler: ' "$log" | grep -vc '^straggler: rank 2 ')
trace=$(python3 "$(dirname "$0")/../train/check_trace.py" "$work/out/trace.json" 3 2 3 "$work/out/metrics.jsonl" 2>&1)
trace_status=$?
if [ "$stalled" -lt 2 ] || [ "$named" -lt 1 ] || [ "$others" -ne 0 ] || [ $trace_status -ne 0 ]; then
  echo "FAIL $name: $stalled steps with rank 2's compute slow and another rank waiting (need 2); straggler lines" \
       "naming rank 2: $named, other ranks: $others; $trace"
  echo "$tables" | sed 's/^/   | step, compute spread ms, slow rank, comm wait ms, its rank: /'
  grep '^straggler' "$log" | sed 's/^/   | /'
  exit 1
fi
echo "PASS $name ($stalled steps show rank 2's compute slow by >0.6 s and another rank waiting; $(grep '^straggler: rank 2 ' "$log" | head -1 | cut -c1-100)...; $trace)"
