#!/usr/bin/env bash
# Failures of a multi-rank run end every rank, with a clear error, within 60 s, never a hang:
#   - ranks started with different command lines (here: another learning rate on rank 1);
#   - an error on one rank only (here: rank 1's training data is missing), which would leave the
#     others waiting in a collective;
#   - a rank killed (SIGKILL) in the middle of training.
# Each with all-reduce (-z 0), fully sharded (-z 3, where every forward gathers weights from every
# rank) and as a pipeline of two stages (-pp 2, where each rank waits for the other's activations).
# Uses the emulated trainer (train_gpt_emu) as 2 MPI ranks.
set -u
trainer="${BIN:-.}/train_gpt_emu" name=rank_failures
source "$(dirname "$0")/tiny_mpi_run.sh"
flags=(-e custom:L2:C64:H2:V64:T16 -i "$work/train.bin" -b 2 -t 16 -v 0 -s 0)
status=0

# expect NAME WORDS... -- COMMAND...: the command must fail within 60 s, its output naming every word.
expect_failure() {
  local name="$1"; shift
  local words=()
  while [ "$1" != "--" ]; do words+=("$1"); shift; done
  shift
  local start=$SECONDS
  timeout 90 "$@" >"$work/out" 2>&1
  local rc=$? took=$((SECONDS - start))
  if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ $took -gt 60 ]; then
    echo "FAIL $name: exit status $rc after ${took}s (expected a failure within 60 s)"
    sed 's/^/   | /' "$work/out" | tail -5
    status=1
    return
  fi
  for w in "${words[@]}"; do
    if ! grep -q -- "$w" "$work/out"; then
      echo "FAIL $name: the output lacks '$w'"
      sed 's/^/   | /' "$work/out" | tail -5
      status=1
      return
    fi
  done
  echo "PASS $name (${took}s)"
}

for mode in "-z 0" "-z 3" "-pp 2"; do
  z=${mode//[- ]/}  # the tests' names: z0, z3, pp2
  expect_failure "ranks_with_different_command_lines_$z" "error: the 2 ranks disagree on the command line" -- \
    mpirun --oversubscribe -np 1 "$trainer" "${flags[@]}" $mode -x 5 -l 1e-3 : -np 1 "$trainer" "${flags[@]}" $mode -x 5 -l 2e-3
  # Rank 1 looks for its data in a folder that exists only for rank 0: an error on one rank only.
  mkdir -p "$work/rank0" && cp -f "$work/train.bin" "$work/rank0/"
  expect_failure "error_on_one_rank_ends_all_$z" "error: -i (--train-data)" "no file matches" -- \
    mpirun --oversubscribe -np 2 bash -c 'cd "$0" && [ "$OMPI_COMM_WORLD_RANK" = 0 ] || cd /; exec "$@"' \
    "$work/rank0" "$(realpath "$trainer")" -e custom:L2:C64:H2:V64:T16 -i rank0/train.bin -b 2 -t 16 -v 0 -s 0 $mode -x 5

  # A rank killed mid-run: mpirun must end the job.
  start=$SECONDS
  timeout 90 mpirun --oversubscribe -np 2 "$trainer" "${flags[@]}" $mode -x 100000 >"$work/kill.out" 2>&1 &
  job=$!
  for _ in $(seq 1 120); do grep -q '^step 2/' "$work/kill.out" && break; sleep 0.5; done
  victim=""  # a loaded machine may not list the ranks' processes at the first look: look again
  for _ in $(seq 1 20); do
    victim=$(pgrep -n -f "^$trainer -e custom:L2:C64") && break
    sleep 0.5
  done
  [ -n "$victim" ] || ps -eo pid,args | grep -F "$trainer" | grep -v grep | sed 's/^/   | process: /'
  kill -KILL "$victim" 2>/dev/null
  killed_at=$SECONDS
  wait $job
  rc=$?
  took=$((SECONDS - killed_at))
  if [ -z "$victim" ] || [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ $took -gt 60 ]; then
    echo "FAIL rank_killed_ends_the_job_$z: exit status $rc, ${took}s after the kill (victim '${victim}')"
    tail -5 "$work/kill.out" | sed 's/^/   | /'
    status=1
  else
    echo "PASS rank_killed_ends_the_job_$z (ended ${took}s after the kill, status $rc)"
  fi
done
exit $status
