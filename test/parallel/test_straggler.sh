#!/usr/bin/env bash
# A slow rank among three: rank 2 of a 3-rank run (the emulated trainer under mpirun, -z 1, steps of
# about 0.1 s here) is stopped with SIGSTOP for a second just after a step began, again 2 steps later.
# The phase timers (--timers 2) must name it: at a step where the stop fell in its compute, the table's
# largest compute phase is rank 2's and exceeds that phase's fastest rank by most of a second, while
# another rank shows that second as communication wait (waiting for rank 2 at the next meeting of the
# ranks); and the straggler line names rank 2 and no other (at --straggler-threshold 4, five times the
# median: three emulated ranks sharing two cores differ by 2x now and then without being stopped; a
# stop of a second makes a step of about 0.07 s of compute 15 times as long). A stop that falls while rank 2 itself
# waits, or between its steps, shows otherwise, so the test stops it again (at most 8 times) until
# both were seen. The same run writes a timeline of steps 4..5 (after the first steps, which time the
# GEMMs and capture the CUDA graphs while the emulated device waits) whose every rank appears and nests.
set -u
name=a_rank_stopped_mid_step_is_named_the_straggler
trainer="${BIN:-.}/train_gpt_emu"
source "$(dirname "$0")/tiny_mpi_run.sh"
export EMU_STREAMS=1
steps=60
log="$work/run.log"
timeout 300 mpirun --oversubscribe -np 3 "$trainer" -e custom:L2:C32:H1:V64:T16 -i "$work/train.bin" -b 2 -t 16 \
  -v 0 -s 0 -x $steps -z 1 --timers 2 \
  --straggler-threshold 4 --profile-steps 4:5 -o "$work/out" >"$log" 2>&1 &
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
# Stops of one second, each just after a step began, 2 steps apart (4 fit in the detector's window of 8
# logged steps), until a stop has fallen in rank 2's compute (rather than while it waited, or between steps)
# and the straggler line has named it: at most 8.
stalled_steps() {  # steps where rank 2's compute is slower by > 0.6 s and another rank waits as long
  awk '/^phases of step/ { step = $4 }
    /^  (forward|loss|backward|optimizer) / { gsub(/[()]/, ""); d = $(NF-1) - $(NF-3); if (d > best[step]) { best[step] = d; slow[step] = $NF } }
    /^  comm wait / { gsub(/[()]/, ""); wait[step] = $(NF-1); waiter[step] = $NF }
    END { for (s in best) if (best[s] > 600 && slow[s] == 2 &&
                              ((wait[s] > 600 && waiter[s] != 2) || (wait[s + 1] > 600 && waiter[s + 1] != 2))) n++
          print n + 0 }' "$log"
}
stops=0
for attempt in 1 2 3 4 5 6 7 8; do
  now=$(grep -c '^step ' "$log")
  for _ in $(seq 1 2400); do [ "$(grep -c '^step ' "$log")" -gt "$now" ] && break; sleep 0.02; done
  sleep 0.04  # into the step's forward or backward pass
  [ -n "$rank2" ] && kill -STOP "$rank2" && sleep 1 && kill -CONT "$rank2" && stops=$((stops + 1))
  for _ in $(seq 1 2400); do [ "$(grep -c '^step ' "$log")" -ge $((now + 2)) ] && break; sleep 0.02; done
  [ "$(stalled_steps)" -ge 1 ] && grep -q '^straggler: rank 2 ' "$log" && break
done
wait $job
status=$?
if [ $status -ne 0 ] || [ -z "$rank2" ]; then
  echo "FAIL $name: exit status $status, rank 2's process '${rank2}'"; tail -5 "$log" | sed 's/^/   | /'; exit 1
fi
stalled=$(stalled_steps)
named=$(grep -c '^straggler: rank 2 ' "$log")
others=$(grep '^straggler: ' "$log" | grep -vc '^straggler: rank 2 ')
trace=$(python3 "$(dirname "$0")/../train/check_trace.py" "$work/out/trace.json" 3 4 5 "$work/out/metrics.jsonl" 2>&1)
trace_status=$?
if [ "$stalled" -lt 1 ] || [ "$named" -lt 1 ] || [ "$others" -ne 0 ] || [ $trace_status -ne 0 ]; then
  echo "FAIL $name: after $stops stops, $stalled steps with rank 2's compute slow and another rank waiting; straggler lines" \
       "naming rank 2: $named, other ranks: $others; $trace"
  grep -B1 -A8 '^phases of step' "$log" | grep -B3 -A5 '[0-9]\{4\}\.[0-9][0-9] (' | head -40 | sed 's/^/   | /'
  grep '^straggler' "$log" | sed 's/^/   | /'
  exit 1
fi
echo "PASS $name ($stops stops; $stalled steps show rank 2's compute slow by >0.6 s and another rank waiting; $(grep '^straggler: rank 2 ' "$log" | head -1 | cut -c1-100)...; $trace)"
