#!/usr/bin/env bash
# Elastic training under scripts/supervise.sh --ranks 2:4 (the fp32 emulated trainer as MPI ranks on
# this machine, a tiny model, --snapshot-every 1, a checkpoint every 4 steps written in the background):
# one run that loses a rank three times. The first time a random rank is SIGKILLed at a random step;
# the second time the killed rank's snapshot is deleted before the restart (a node lost with its
# memory), so its part must come from the next rank's copy; the third kill falls at a checkpoint step,
# and before the restart the test leaves the folder as a kill in the middle of writing that checkpoint
# would (no DONE marker, a state file cut short under its temporary name: the model is too small for
# the test to catch its few-millisecond write reliably). The run goes on on 3, then 2 ranks, regrows to 4 after
# --regrow-after steps, and finishes. Against an uninterrupted 4-rank run of the same flags:
#   - every step's loss within 1e-5 relative (the same tokens in every step: -d stays 384 tokens, the
#     accumulation 3, 4 or 6 micro-steps; only the order of the additions differs);
#   - each failure lost at most one logged step (the newest step logged before it, against the step
#     the next launch resumed from; each kill comes as its step is logged, when that step's snapshot
#     may still be being written and the one before must still be there);
#   - the launches and their reasons in launches.log; no partial (temporary) file left in the run
#     folder, no snapshot left in memory.
# Then --elastic-batch scale; the supervisor's choices through stand-in launchers (lost hosts left out,
# a rank lost during a regrow stop counted as a failure); its one-line errors for impossible --ranks
# and -d.
set -u
trainer="${BIN:-.}/train_gpt_emu_fp32"
name=elastic_run_shrinks_and_regrows_and_matches_the_uninterrupted_run
source "$(dirname "$0")/tiny_mpi_run.sh"
# 40000 tokens below 64 (the rule of tiny_mpi_run.sh's train.bin, longer): one epoch holds more steps
# than the run takes, on every rank count.
python3 -c 'import struct, sys
n = 40000
header = struct.pack("<3i", 20240520, 1, n) + bytes(1012)
tokens = struct.pack("<%dH" % n, *[(i * 37 + i // 7 + i // 101) % 64 for i in range(n)])
sys.stdout.buffer.write(header + tokens)' >"$work/train.bin"
steps=32
flags=(-e custom:L1:C32:H2:V64:T16 -i "$work/train.bin" -b 2 -t 16 -d 384 -x $steps -l 3e-3 -u 2 -v 0 -s 0
       -n 4 -y 1)
snapshots="$work/shm"
ok=1
fail() { echo "FAIL $1: $2"; ok=0; }

timeout 300 mpirun --oversubscribe -np 4 "$trainer" "${flags[@]}" -o "$work/straight" >"$work/straight.log" 2>&1 ||
  { echo "FAIL $name: the uninterrupted 4-rank run failed"; tail -5 "$work/straight.log"; exit 1; }

out="$work/elastic"
timeout 600 bash scripts/supervise.sh --ranks 2:4 --regrow-after 7 --wait 1 --launcher "mpirun --oversubscribe -np {n}" -- \
  "$trainer" "${flags[@]}" --snapshot-every 1 --snapshot-dir "$snapshots" -o "$out" >"$work/elastic.log" 2>&1 &
supervisor=$!
# kill_at STEP RANK: SIGKILLs world rank RANK of the current launch as soon as the run has logged STEP,
# waits until every rank of that launch has exited, and prints the killed process and the step logged
# when it was killed. Status 1 if the supervisor ended first, 2 if the rank had no process at STEP.
# One Python process does it all: it finds the rank before the step comes, then reads metrics.jsonl
# every 10 ms, so the kill follows the step within milliseconds. (A shell loop forking grep and pgrep
# at every look lagged 0.3 to 1 s on 2 busy cores, 2 to 4 steps of this model: more than a launch on
# fewer ranks has before its regrow stop, and the kill fell into the stop or the next launch.)
kill_at() {
  python3 - "$out" "$1" "$2" "$trainer" "$supervisor" <<'EOF'
import os, re, signal, sys, time
out, step, rank, trainer, supervisor = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
def ranks():  # {pid: its environment} of the trainer processes writing to `out`
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            if argv[0] == trainer.encode() and out.encode() in argv:
                found[int(pid)] = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            pass  # exited meanwhile
    return found
def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
def logged():  # the newest step in metrics.jsonl (whole lines: the file is rewritten on resume)
    try:
        text = open(f"{out}/metrics.jsonl", "rb").read()
    except FileNotFoundError:
        return 0
    steps = re.findall(rb'"step": *(\d+), *"loss"', text[:text.rfind(b"\n") + 1])
    return int(steps[-1]) if steps else 0
victim = None
for look in range(15000):  # 150 s
    if victim is None and look % 10 == 0:
        victim = next((p for p, env in ranks().items() if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env), None)
    if logged() >= step:
        if victim is None or not alive(victim):
            sys.exit(2)
        os.kill(victim, signal.SIGKILL)
        seen = logged()
        for _ in range(1000):  # the other ranks end with it (mpirun ends the job)
            if not ranks():
                break
            time.sleep(0.01)
        print(victim, seen)
        sys.exit(0)
    if not alive(supervisor):
        sys.exit(1)
    time.sleep(0.01)
sys.exit(1)
EOF
}
launches() { grep -c ' launch ' "$out/launches.log" 2>/dev/null || echo 0; }
seed=${ELASTIC_SEED:-$(date +%s)}  # printed with the outcome: ELASTIC_SEED=N repeats a run's choices
RANDOM=$seed
draw() { drawn=$(( (RANDOM * 32768 + RANDOM) % $1 )); }  # 0..$1-1 (bash's low bits alone repeat)
killed=()
# 1: a random rank of 4 at a random step; 2: a rank of 3, its snapshot deleted before the restart;
# 3: a rank of 2, just after a checkpoint began. Kills 2 and 3 count from the step the launch
# restarted after (launches.log's "after step N"): the supervisor stops that launch to regrow once
# the run has logged step N + 7, so each kill comes 2 to 5 steps after N.
for failure in 1 2 3; do
  ranks=$((5 - failure))
  if [ $failure != 1 ]; then
    launch=$(tail -1 "$out/launches.log")
    [[ "$launch" == *" on $ranks ranks, "*"after a failure"* ]] ||
      { fail "$name" "before kill $failure, the newest launch is not on $ranks ranks after a failure: $launch"; break; }
    from=$(echo "$launch" | grep -o 'after step [0-9]*$' | grep -o '[0-9]*')
  fi
  case $failure in
    1) draw 4; at=$((2 + drawn)) ;;
    # (2 or 3 past a checkpoint step (-n 4), so that the newest snapshot is newer than the newest
    # checkpoint and the restart needs the snapshot)
    2) draw 2; at=$((from + 2)); while [ $((at % 4)) -lt 2 ]; do at=$((at + 1)); done
       [ $((at % 4)) = 2 ] && at=$((at + drawn)) ;;
    3) at=$(( (from + 5) / 4 * 4 )) ;;  # a checkpoint step (-n 4)
  esac
  draw $ranks; victim=$drawn
  result=$(kill_at "$at" $victim)
  case $? in
    1) break ;;  # the supervisor ended: the checks below say how
    2) fail "$name" "no process of rank $victim at step $at"; break ;;
  esac
  read -r pid seen <<<"$result"
  killed+=("rank $victim of $ranks at step $seen,")
  # (the launch's ranks have all exited; the supervisor restarts 1 s after)
  if [ $failure = 2 ]; then  # the node's memory is gone with it: its own snapshot folder
    rm -rf "$snapshots"/gpt_snapshots_*/"held_by_$(printf %05d $victim)"
  fi
  if [ $failure = 3 ]; then  # as a kill in the middle of writing checkpoint $at leaves the folder
    state="$out/state_$(printf %08d "$at")_00001.bin"
    rm -f "$out/DONE_$(printf %08d "$at")"
    head -c 100 /dev/zero >"$state.tmp.$pid"
    rm -f "$state"
  fi
  # (failure N's restart is launch N + 1)
  for _ in $(seq 1 400); do [ "$(launches)" -gt $failure ] && break; sleep 0.05; done
done
wait $supervisor
status=$?
details() {  # what it takes to repeat and diagnose a failed run
  echo "   seed $seed (ELASTIC_SEED=$seed repeats its choices); kills: ${killed[*]:-none}; launches.log:"
  sed 's/^/   | /' "$out/launches.log"
}
if [ $status -ne 0 ] || [ ! -e "$out/DONE_$(printf %08d $steps)" ]; then
  echo "FAIL $name: supervisor status $status"
  details
  tail -15 "$work/elastic.log" | sed 's/^/   | /'
  exit 1
fi

# The launches: 4, 3, 2 ranks after the failures, 4 again after regrowing.
sequence=$(grep -o 'on [0-9]* ranks' "$out/launches.log" | awk '{printf "%s ", $2}')
case "$sequence" in
  "4 3 2 "*"4 ") ;;
  *) fail "$name" "launches on ranks: $sequence (expected 4 3 2 ... 4)" ;;
esac
grep -q 'regrowing after 7 steps' "$out/launches.log" || fail "$name" "no regrowing launch in launches.log"
[ "$(grep -c 'after a failure' "$out/launches.log")" -eq 3 ] ||
  fail "$name" "launches.log does not name 3 failures"

# The losses, step by step, against the uninterrupted run; the tokens of every step.
python3 - "$work/straight/metrics.jsonl" "$out/metrics.jsonl" <<'EOF' || ok=0
import json, sys
def losses(path):
    return {m["step"]: m["loss"] for m in map(json.loads, open(path)) if "loss" in m}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max((abs(b[s] - a[s]) / abs(a[s]), s) for s in a if s in b) if a else (1, 0)
if sorted(a) != sorted(b) or worst[0] > 1e-5:
    print(f"FAIL losses_match_the_uninterrupted_run: steps {len(b)} of {len(a)}, largest relative difference "
          f"{worst[0]:.2e} at step {worst[1]}")
    sys.exit(1)
print(f"PASS losses_match_the_uninterrupted_run ({len(a)} steps, largest relative difference {worst[0]:.1e})")
EOF
batches=$(grep -o '[0-9]* tokens per step' "$work/elastic.log" | sort -u)
[ "$batches" = "384 tokens per step" ] || fail "tokens_per_step_unchanged" "$(echo $batches)"

# Work lost per failure: the newest step logged before it against the step the next launch resumed from.
lost_ok=1
while read -r last resumed; do
  [ $((last - resumed)) -le 1 ] || { lost_ok=0; fail "at_most_one_step_lost_per_failure" "logged step $last, resumed from $resumed"; }
done < <(paste <(grep 'after a failure' "$out/launches.log" | grep -o 'after step [0-9]*' | awk '{print $3}') \
               <(grep -o 'resumed from step [0-9]*' "$work/elastic.log" | awk '{print $4}' | head -3))
neighbour=$(grep -o 'snapshot: step [0-9]* brought from node memory.*' "$work/elastic.log" | grep -v ' 0 of them' | head -1)
[ -n "$neighbour" ] || fail "lost_snapshot_recovered_from_the_next_rank" "no recovery used a neighbour's copy"
partial=$(find "$out" -name '*.tmp.*' | wc -l)
[ "$partial" -eq 0 ] || fail "no_partial_files" "$partial temporary files in the run folder"
# (the run's own folder in --snapshot-dir goes; --snapshot-dir itself stays)
[ -z "$(ls -A "$snapshots" 2>/dev/null)" ] || fail "snapshots_removed_at_the_end" "$(find "$snapshots" | head -3)"
if [ $ok = 1 ] && [ $lost_ok = 1 ]; then
  echo "PASS $name (seed $seed; kills: ${killed[*]} the last one's checkpoint left half written; launches on $sequence ranks; ${neighbour:0:60}...)"
else
  details
fi

# --elastic-batch scale: on 2 ranks of 3 the batch is 2/3 of -d (the same 2 micro-steps) and so is the
# peak learning rate; back on 3 ranks both are whole again.
scaled="$work/scaled"
timeout 300 bash scripts/supervise.sh --ranks 2:3 --regrow-after 4 --wait 0 --elastic-batch scale \
  --launcher "mpirun --oversubscribe -np {n}" -- "$trainer" -e custom:L1:C32:H2:V64:T16 -i "$work/train.bin" \
  -b 2 -t 16 -d 192 -x 40 -l 3e-3 -v 0 -s 0 --snapshot-every 1 --snapshot-dir "$work/shm2" -y 1 -o "$scaled" \
  >"$work/scaled.log" 2>&1 &
supervisor=$!
out="$scaled"
kill_at 6 1 >/dev/null
wait $supervisor
status=$?
if [ $status -ne 0 ] || ! grep -q 'launch 2 on 2 ranks, -d 128 tokens (2 micro-steps), peak learning rate x 2/3' "$scaled/launches.log" ||
   ! grep -q 'lr scaling: linear, 128 tokens per step / --base-batch 192: peak lr 2.000e-03' "$work/scaled.log" ||
   ! grep -q 'launch 3 on 3 ranks, -d 192 tokens' "$scaled/launches.log" || [ ! -e "$scaled/DONE_00000040" ]; then
  fail "elastic_batch_scale_scales_the_batch_and_the_learning_rate" "status $status"
  cat "$scaled/launches.log" 2>/dev/null | sed 's/^/   | /'
else
  echo "PASS elastic_batch_scale_scales_the_batch_and_the_learning_rate (3 ranks: 192 tokens, 2 ranks: 128 tokens and 2/3 of the peak rate)"
fi

# The supervisor's choices without a trainer: a stand-in launcher records each launch (its rank count
# and the hostfile it was given), and its first launch fails as mpirun reports a rank lost on node02.
# -d 128 of B·T = 32 keeps 4 ranks and 2, not 3: the second launch runs on 2, without node02.
cat >"$work/launcher.sh" <<'LAUNCHER'
n=$1; shift
hosts=""; out=""
while [ $# -gt 0 ]; do
  case "$1" in --hostfile) hosts=$(awk '{print $1}' "$2" | tr '\n' ' '); shift ;; -o) out=$2; shift ;; esac
  shift
done
echo "$n ranks on: $hosts" >>"$out.launches"
if [ "$(wc -l <"$out.launches")" -eq 1 ]; then
  echo "mpirun noticed that process rank 1 with PID 0 on node node02 exited on signal 9 (Killed)."; exit 137
fi
mkdir -p "$out" && touch "$out/DONE_00000005"
LAUNCHER
printf 'node01 slots=2\nnode02 slots=2\nnode03 slots=2\n' >"$work/hosts.txt"
bash scripts/supervise.sh --ranks 2:4 --wait 0 --hostfile "$work/hosts.txt" --launcher "bash $work/launcher.sh {n}" -- \
  "$trainer" -o "$work/fake" -x 5 -y 1 -b 2 -t 16 -d 128 >"$work/fake.log" 2>&1
launched=$(cat "$work/fake.launches" 2>/dev/null | tr '\n' '|')
if [ "$launched" = "4 ranks on: node01 node02 node03 |2 ranks on: node01 node03 |" ] &&
   grep -q '3 ranks cannot keep -d 128; using 2' "$work/fake.log"; then
  echo "PASS supervisor_leaves_out_lost_hosts_and_rank_counts_that_cannot_keep_the_batch ($launched)"
else
  fail "supervisor_leaves_out_lost_hosts_and_rank_counts_that_cannot_keep_the_batch" "launches: $launched"
  sed 's/^/   | /' "$work/fake.log"
fi

# A rank lost while the job stops to regrow is a failure, not a clean stop. The stand-in launcher's
# first launch (3 ranks) fails; its second (2 ranks) logs steps until the STOP file comes, then loses a
# rank before the checkpoint of its last step is written; its third (2 ranks again) stops cleanly, with
# that checkpoint; its fourth, regrown to 3 ranks, finishes the run.
cat >"$work/stopper.sh" <<'LAUNCHER'
while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done
mkdir -p "$out" && echo >>"$out.launches"
launch=$(wc -l <"$out.launches")
lost() { echo "mpirun noticed that process rank $1 with PID 0 on node node01 exited on signal 9 (Killed)."; exit 137; }
logs_until_stop() {  # logs steps $1..$2, then waits for the supervisor's STOP file
  for ((s = $1; s <= $2; s++)); do echo "{\"step\": $s, \"loss\": 1.0}" >>"$out/metrics.jsonl"; done
  for _ in $(seq 1 100); do [ -e "$out/STOP" ] && return; sleep 0.1; done
  exit 2
}
case $launch in
  1) lost 2 ;;
  2) logs_until_stop 1 4; lost 1 ;;
  3) logs_until_stop 5 8; touch "$out/DONE_00000008"; exit 143 ;;
  4) touch "$out/DONE_00000010" ;;
esac
LAUNCHER
bash scripts/supervise.sh --ranks 2:3 --regrow-after 3 --wait 0 --launcher "bash $work/stopper.sh" -- \
  "$trainer" -o "$work/stopped" -x 10 -y 1 -b 2 -t 16 -d 192 >"$work/stopped.log" 2>&1
launched=$(sed -n 's/.* on \([0-9]*\) ranks, [^;]*; \([a-z]*\).*/\1 \2/p' "$work/stopped/launches.log" | tr '\n' '|')
if [ "$launched" = "3 start|2 after|2 after|3 regrowing|" ] && [ -e "$work/stopped/DONE_00000010" ]; then
  echo "PASS supervisor_counts_a_rank_lost_during_a_regrow_stop_as_a_failure ($launched)"
else
  fail "supervisor_counts_a_rank_lost_during_a_regrow_stop_as_a_failure" "launches (ranks, reason): $launched"
  sed 's/^/   | /' "$work/stopped.log"
fi

# The supervisor's refusals, one line each.
for bad in "--ranks 0:4" "--ranks 4:2" "--ranks 2:4 --elastic-batch double"; do
  msg=$(bash scripts/supervise.sh $bad -- "$trainer" -o "$work/bad" -x 5 -y 1 -b 2 -t 16 -d 384 2>&1)
  [ $? -ne 0 ] && [ "$(echo "$msg" | wc -l)" -eq 1 ] && [[ "$msg" == supervise.sh:* ]] ||
    fail "bad_elastic_flags_fail_in_one_line" "'$bad': $msg"
done
msg=$(bash scripts/supervise.sh --ranks 3:4 -- "$trainer" -o "$work/bad" -x 5 -y 1 -b 2 -t 16 -d 160 2>&1)
[ $? -ne 0 ] && [[ "$msg" == *"no rank count in 3..4"* ]] || fail "bad_elastic_flags_fail_in_one_line" "-d 160: $msg"
[ $ok = 1 ] && echo "PASS bad_elastic_flags_fail_in_one_line"
[ $ok = 1 ]
