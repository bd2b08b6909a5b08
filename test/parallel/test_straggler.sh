#!/usr/bin/env bash
# A slow rank among three: rank 2 of a 3-rank run (the emulated trainer under mpirun, -z 1, steps of
# about 0.06 s here) is throttled for 3 seconds, as a GPU that throttles or shares its node with another
# job is: stopped with SIGSTOP for 100 ms of every 104, so it runs at a 25th of its speed wherever
# its step happens to be. The phase timers (--timers 2) must name it: at a throttled step, the table's
# largest compute phase is rank 2's and at least 4 times that phase's fastest rank (and 50 ms slower),
# while another rank shows the difference as communication wait (waiting for rank 2 at the next meeting
# of the ranks), and the straggler line names rank 2 and no other (at --straggler-threshold 4, five
# times the median: three emulated ranks sharing two cores differ by 2x now and then without being
# throttled; throttled, rank 2 computes about 25 times as long). Throttling wherever the step is, rather
# than one long stop, makes the test independent of where the stop falls: a single stop that falls
# while rank 2 waits in a collective holds every rank up alike and names nobody. Where a loaded machine
# keeps the throttled steps too few, the test throttles again (at most 3 times). The same run writes a
# timeline of steps 4..5 (after the first steps, which time the GEMMs and capture the CUDA graphs while
# the emulated device waits) whose every rank appears and nests.
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
# Throttling (after step 8, so that the timeline's steps run unthrottled) until the detector's window of
# 8 logged steps has held two throttled ones and the straggler line has named rank 2.
stalled_steps() {  # steps where rank 2's largest compute phase is >= 4x the fastest rank's and 50 ms
                   # slower, and another rank waits at least as long in this step or the next
  awk '/^phases of step/ { step = $4 }
    /^  (forward|loss|backward|optimizer) / { gsub(/[()]/, ""); d = $(NF-1) - $(NF-3)
      if (d > best[step]) { best[step] = d; slow[step] = $NF; ratio[step] = $(NF-3) > 0 ? $(NF-1) / $(NF-3) : 99 } }
    /^  comm wait / { gsub(/[()]/, ""); wait[step] = $(NF-1); waiter[step] = $NF }
    END { for (s in best) if (best[s] > 50 && ratio[s] >= 4 && slow[s] == 2 &&
                              ((wait[s] > best[s] && waiter[s] != 2) || (wait[s + 1] > best[s] && waiter[s + 1] != 2))) n++
          print n + 0 }' "$log"
}
throttle() {  # $1 seconds of rank 2 stopped 100 ms in every 104 (a loop without forks, to keep the 4 ms short)
  python3 -c 'import os, signal, sys, time
pid, end = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    os.kill(pid, signal.SIGSTOP); time.sleep(0.1); os.kill(pid, signal.SIGCONT); time.sleep(0.004)' "$rank2" "$1"
}
throttles=0
for _ in $(seq 1 3000); do [ "$(grep -c '^step ' "$log")" -ge 8 ] && break; sleep 0.02; done
for attempt in 1 2 3; do
  [ -n "$rank2" ] || break
  throttle 3 && throttles=$((throttles + 1))
  now=$(grep -c '^step ' "$log")
  for _ in $(seq 1 500); do [ "$(grep -c '^step ' "$log")" -ge $((now + 2)) ] && break; sleep 0.02; done
  [ "$(stalled_steps)" -ge 2 ] && grep -q '^straggler: rank 2 ' "$log" && break
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
if [ "$stalled" -lt 2 ] || [ "$named" -lt 1 ] || [ "$others" -ne 0 ] || [ $trace_status -ne 0 ]; then
  echo "FAIL $name: after $throttles throttles, $stalled steps with rank 2's compute slow and another rank waiting; straggler lines" \
       "naming rank 2: $named, other ranks: $others; $trace"
  grep -A8 '^phases of step' "$log" | sed -n '/^phases of step 9 /,$p' | head -60 | sed 's/^/   | /'
  grep '^straggler' "$log" | sed 's/^/   | /'
  exit 1
fi
echo "PASS $name ($throttles throttles of 3 s; $stalled steps show rank 2's largest compute phase 4x the fastest rank's and another rank waiting; $(grep '^straggler: rank 2 ' "$log" | head -1 | cut -c1-100)...; $trace)"
