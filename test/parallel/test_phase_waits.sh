#!/usr/bin/env bash
# The phases that only model parallelism has, timed on 2 emulated ranks: under -pp 2 a
# stage waits for its neighbour (the bubble), under -tp 2 the compute stream runs the tensor group's
# collectives (the tensor wait). Each must appear in the --timers 2 table with a time on both ranks,
# the collectives in the timeline carry their kind (send/receive; all-gather or all-reduce), and the
# timeline of both ranks parses, nests and sums to each step (test/train/check_trace.py).
# The -tp 2 run issues its work unqueued: queued streams run only when the host synchronises, so the
# device's first mark of a step would come after the host had issued the whole forward (about 5% of
# these tiny steps on no phase), which on a GPU runs as it is issued.
set -u
name=model_parallel_waits_are_timed
trainer="${BIN:-.}/train_gpt_emu"
source "$(dirname "$0")/tiny_mpi_run.sh"
failures=0
# One try of a mesh: the run, its table row, its timeline; sets row, trace, status, ok.
try_mesh() {
  row="" trace="" status=1 ok=0
  rm -rf "$out"  # a second try starts a new run, not a continuation of the first
  # shellcheck disable=SC2086 # the mesh's flags are words
  if ! EMU_STREAMS=$queued timeout 300 mpirun --oversubscribe -np 2 "$trainer" -e custom:L2:C32:H2:V64:T16 -i "$work/train.bin" -b 2 \
        -t 16 -d 64 -v 0 -s 0 -x 3 $flags --timers 2 --profile-steps 2:3 -o "$out" >"$out.log" 2>&1; then
    return 1
  fi
  row=$(grep "^  $phase  " "$out.log" | tail -1)
  min=$(echo "$row" | awk '{ gsub(/[()]/, ""); print $(NF-3) }')
  trace=$(python3 "$(dirname "$0")/../train/check_trace.py" "$out/trace.json" 2 2 3 "$out/metrics.jsonl" 2>&1)
  status=$?
  if [ -n "$row" ] && awk -v m="$min" 'BEGIN { exit !(m > 0) }' && [ $status -eq 0 ] &&
     grep -q "\"name\":\"$collective" "$out/trace.json"; then
    ok=1
  fi
  return 0
}
for mesh in "-pp 2:bubble:send/receive:1" "-tp 2:tensor wait:all-:"; do
  IFS=: read -r flags phase collective queued <<<"$mesh"
  out="$work/${flags// /}"
  if ! try_mesh; then
    echo "FAIL ${name}_${flags// /}: the run failed"; tail -3 "$out.log" | sed 's/^/   | /'; failures=$((failures + 1)); continue
  fi
  # A second try where only the steps' sums missed: on a loaded machine the host can be descheduled
  # for a few milliseconds between two phases of a 40 ms step. A gap the trainer leaves fails both.
  again=""
  if [ $ok -eq 0 ] && [[ $trace == *"phases sum to"* ]]; then
    again=", on a second try (the first: $trace)"
    try_mesh || true
  fi
  if [ $ok -eq 1 ]; then
    echo "PASS ${name}_${flags// /} ($phase: $(echo "$row" | tr -s ' ' | cut -c2-); $trace$again)"
  else
    echo "FAIL ${name}_${flags// /}: '$phase' row '${row}'; $trace$again; $(grep -c "\"name\":\"$collective" "$out/trace.json") '$collective' collectives in the timeline"
    grep -A9 '^phases of step 3' "$out.log" | sed 's/^/   | /'
    failures=$((failures + 1))
  fi
done
exit $((failures > 0))
