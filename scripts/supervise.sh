#!/usr/bin/env bash
# Keeps a training run going until it is done: runs the trainer command given after the options, and
# when it dies (killed, a node lost, a CUDA or NCCL failure) runs it again, resuming from the newest
# complete checkpoint (or in-memory snapshot, --snapshot-every), until the run's final checkpoint
# marker DONE_<steps> exists in its output folder.
#   usage: scripts/supervise.sh [--max-restarts N] [--wait SECONDS] [--] TRAINER FLAGS...
#          scripts/supervise.sh --ranks MIN:MAX [--regrow-after STEPS] [--hostfile FILE]
#                               [--elastic-batch keep|scale] [--launcher COMMAND] [--] TRAINER FLAGS...
# The command must name its output folder (-o DIR), its steps (-x N) and resume (-y 1), so that every
# restart continues the same run. A trainer that exits with status 1 has refused its input (one
# "error:" line): that repeats on every restart, so the supervisor stops there; one stopped by Ctrl-C
# (status 130) is not restarted either. Exit status: 0 when the run is done, 1 when it gave up, 130
# after Ctrl-C.
# Elastic runs (--ranks MIN:MAX): the supervisor launches the trainer itself on MAX ranks, through
# --launcher (default "mpirun -np {n}"; {n} becomes the rank count, {exclude} the lost hosts as srun's
# --exclude=h1,h2, e.g. "srun --kill-on-bad-exit=1 --mpi=pmix -n {n} {exclude}"). When a launch fails,
# the next one runs on the ranks that remain: one fewer for each rank mpirun or srun reports lost, the
# hosts of the lost ranks left out (of --hostfile's list for mpirun, by {exclude} for srun), never
# fewer than MIN. After --regrow-after steps (default 50) on fewer than MAX ranks it stops the job
# cleanly (a STOP file in the output folder: every rank finishes the step and a checkpoint is written)
# and launches it again on MAX ranks, every host back in; a rank lost before that checkpoint is
# complete makes the stop a failure like any other. The global batch stays -d tokens: the trainer's
# accumulation adapts to the ranks, and a rank count that cannot keep -d (B·T·ranks must divide it) is
# passed over for the next smaller one that can. --elastic-batch scale keeps the micro-steps instead:
# -d becomes B·T·ranks·(its micro-steps on MAX ranks) and the peak learning rate follows the batch by
# the linear rule (--lr-scaling linear --base-batch <-d on MAX>). Every launch and its reason go to
# launches.log in the output folder, and to this script's output.
set -u
max_restarts=10 wait_s=5
ranks_range="" regrow_after=50 hostfile="" elastic_batch=keep launcher="mpirun -np {n}"
while [ $# -gt 0 ]; do
  case "$1" in  # --option=value as --option value
    --max-restarts=*|--wait=*|--ranks=*|--regrow-after=*|--hostfile=*|--elastic-batch=*|--launcher=*)
      set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
  esac
  case "$1" in
    --max-restarts) max_restarts="$2"; shift 2 ;;
    --wait) wait_s="$2"; shift 2 ;;
    --ranks) ranks_range="$2"; shift 2 ;;
    --regrow-after) regrow_after="$2"; shift 2 ;;
    --hostfile) hostfile="$2"; shift 2 ;;
    --elastic-batch) elastic_batch="$2"; shift 2 ;;
    --launcher) launcher="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "supervise.sh: no trainer command given (see --help)" >&2; exit 1; }

# The output folder, the step count, -y and the batch from the trainer's own flags (short or long forms).
out_dir="" steps="" resume="" B=4 T=64 total_batch=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  value="${args[i+1]:-}"
  case "${args[i]}" in
    -o|--output-dir) out_dir="$value" ;;
    --output-dir=*) out_dir="${args[i]#*=}" ;;
    -x|--max-steps) steps="$value" ;;
    --max-steps=*) steps="${args[i]#*=}" ;;
    -y|--resume) resume="$value" ;;
    --resume=*) resume="${args[i]#*=}" ;;
    -b|--batch-size) B="$value" ;;
    -t|--seq-len) T="$value" ;;
    -d|--total-batch) total_batch="$value" ;;
  esac
done
[ -n "$out_dir" ] || { echo "supervise.sh: the trainer command needs an output folder (-o DIR)" >&2; exit 1; }
[[ "$steps" =~ ^[1-9][0-9]*$ ]] || { echo "supervise.sh: the trainer command needs a step count (-x N, N > 0)" >&2; exit 1; }
[ "$resume" = 1 ] || { echo "supervise.sh: the trainer command needs -y 1, so that restarts resume" >&2; exit 1; }
done_marker="$out_dir/$(printf 'DONE_%08d' "$steps")"

# ---- elastic runs: the rank counts, the batch, the hosts
min_ranks=0 max_ranks=0
if [ -n "$ranks_range" ]; then
  [[ "$ranks_range" =~ ^([0-9]+):([0-9]+)$ ]] ||
    { echo "supervise.sh: --ranks $ranks_range: expected MIN:MAX, two rank counts" >&2; exit 1; }
  min_ranks=${BASH_REMATCH[1]} max_ranks=${BASH_REMATCH[2]}
  [ "$min_ranks" -ge 1 ] || { echo "supervise.sh: --ranks $ranks_range: MIN must be at least 1" >&2; exit 1; }
  [ "$min_ranks" -le "$max_ranks" ] ||
    { echo "supervise.sh: --ranks $ranks_range: MIN $min_ranks is larger than MAX $max_ranks" >&2; exit 1; }
  [[ "$regrow_after" =~ ^[1-9][0-9]*$ ]] ||
    { echo "supervise.sh: --regrow-after $regrow_after: expected a step count > 0" >&2; exit 1; }
  [ "$elastic_batch" = keep ] || [ "$elastic_batch" = scale ] ||
    { echo "supervise.sh: --elastic-batch $elastic_batch: expected keep or scale" >&2; exit 1; }
  [[ "$B" =~ ^[1-9][0-9]*$ && "$T" =~ ^[1-9][0-9]*$ ]] ||
    { echo "supervise.sh: -b $B -t $T: expected positive integers" >&2; exit 1; }
  micro=$((B * T))
  [ -n "$total_batch" ] && [ "$total_batch" != -1 ] || total_batch=$((micro * max_ranks))
  [[ "$total_batch" =~ ^[1-9][0-9]*$ ]] || { echo "supervise.sh: -d $total_batch: expected tokens > 0" >&2; exit 1; }
  if [ "$elastic_batch" = scale ]; then
    [ $((total_batch % (micro * max_ranks))) -eq 0 ] ||
      { echo "supervise.sh: -d $total_batch is not a multiple of B·T·MAX = $micro·$max_ranks: --elastic-batch scale keeps MAX's micro-steps" >&2; exit 1; }
    micro_steps=$((total_batch / (micro * max_ranks)))
  else
    valid=0
    for ((n = max_ranks; n >= min_ranks; n--)); do [ $((total_batch % (micro * n))) -eq 0 ] && valid=1; done
    [ $valid = 1 ] ||
      { echo "supervise.sh: -d $total_batch: no rank count in $min_ranks..$max_ranks divides it into micro-batches of B·T = $micro tokens" >&2; exit 1; }
  fi
  if [ -n "$hostfile" ] && [ ! -r "$hostfile" ]; then
    echo "supervise.sh: --hostfile $hostfile: cannot read it" >&2; exit 1
  fi
fi
mkdir -p "$out_dir"
log_launch() {  # one line to launches.log and to the output
  local line
  line="$(date -u +%Y-%m-%dT%H:%M:%SZ) $*"
  echo "$line" >>"$out_dir/launches.log"
  echo "supervise.sh: $*"
}
# The largest rank count <= $1 (and >= MIN) that keeps -d; 0 if none.
valid_ranks() {
  local n
  for ((n = $1; n >= min_ranks; n--)); do
    if [ "$elastic_batch" = scale ] || [ $((total_batch % (micro * n))) -eq 0 ]; then echo $n; return; fi
  done
  echo 0
}
# The hostfile without the left-out hosts (mpirun's "host slots=N" lines), and its slots.
excluded_hosts=""
launch_hostfile="$out_dir/.hostfile.launch"
write_hostfile() {
  : >"$launch_hostfile"
  local slots=0 line host count
  while read -r line; do
    line="${line%%#*}"
    host=$(echo "$line" | awk '{print $1}')
    [ -n "$host" ] || continue
    case " $excluded_hosts " in *" $host "*) continue ;; esac
    echo "$line" >>"$launch_hostfile"
    count=$(echo "$line" | sed -n 's/.*slots=\([0-9]*\).*/\1/p')
    slots=$((slots + ${count:-1}))
  done <"$hostfile"
  echo $slots
}
last_logged_step() {  # the newest training step in metrics.jsonl (0 if none)
  local s
  s=$(grep -o '"step": *[0-9]*, *"loss"' "$out_dir/metrics.jsonl" 2>/dev/null | tail -1 | grep -o '[0-9]*' | head -1)
  echo "${s:-0}"
}
# Runs the command on $1 ranks (elastic) or as given; sets `status` and `launch_output`.
launch_output="$out_dir/.launch.out"
run_once() {
  if [ -z "$ranks_range" ]; then
    "$@"
    status=$?
    return
  fi
  local n=$1; shift
  local extra=() host_args=()
  if [ "$elastic_batch" = scale ]; then
    extra=(-d $((micro * n * micro_steps)) --lr-scaling linear --base-batch $((micro * max_ranks * micro_steps))
           --accept-changes 1)
  else
    extra=(-d "$total_batch")
  fi
  [ -n "$hostfile" ] && host_args=(--hostfile "$launch_hostfile")
  rm -f "$out_dir/STOP"
  local first_step
  first_step=$(last_logged_step)
  # The launcher is a command line of its own (word-split on purpose, {n} and {exclude} filled in); its
  # output also kept for the lost ranks mpirun or srun names.
  local exclude="" command
  [ -n "$excluded_hosts" ] && exclude="--exclude=$(echo $excluded_hosts | tr ' ' ',')"
  command="${launcher//\{n\}/$n}"
  command="${command//\{exclude\}/$exclude}"
  ( $command "${host_args[@]}" "$@" --override "${extra[@]}" 2>&1 | tee "$launch_output"; exit "${PIPESTATUS[0]}" ) &
  local job=$!
  if [ "$n" -lt "$max_ranks" ]; then  # regrow: a clean stop after --regrow-after steps on fewer ranks
    while kill -0 $job 2>/dev/null; do
      if [ "$(last_logged_step)" -ge $((first_step + regrow_after)) ] && [ ! -e "$out_dir/STOP" ]; then
        regrowing=1
        : >"$out_dir/STOP"
      fi
      sleep 0.5
    done
  fi
  wait $job
  status=$?
  rm -f "$out_dir/STOP"
}

restarts=0 launch=0
ranks=0
reason="start"
if [ -n "$ranks_range" ]; then
  ranks=$(valid_ranks "$max_ranks")
  [ "$ranks" -lt "$max_ranks" ] && echo "supervise.sh: $max_ranks ranks cannot keep -d $total_batch; starting on $ranks"
fi
while true; do
  regrowing=0
  if [ -n "$ranks_range" ]; then
    if [ -n "$hostfile" ]; then
      slots=$(write_hostfile)
      [ "$slots" -lt "$ranks" ] && ranks=$(valid_ranks "$slots")
    fi
    if [ "$ranks" -lt "$min_ranks" ] || [ "$ranks" -eq 0 ]; then
      log_launch "giving up: fewer than $min_ranks ranks remain that keep -d $total_batch"
      exit 1
    fi
    if [ "$elastic_batch" = scale ]; then
      batch_text="-d $((micro * ranks * micro_steps)) tokens ($micro_steps micro-steps), peak learning rate x $ranks/$max_ranks"
    else
      batch_text="-d $total_batch tokens ($((total_batch / (micro * ranks))) micro-steps)"
    fi
    launch=$((launch + 1))
    log_launch "launch $launch on $ranks ranks, $batch_text; $reason"
    run_once "$ranks" "$@"
  else
    run_once "$@"
  fi
  if [ -e "$done_marker" ]; then
    [ -n "$ranks_range" ] && log_launch "run done ($done_marker) after $restarts restart(s)"
    [ -z "$ranks_range" ] && echo "supervise.sh: run done ($done_marker) after $restarts restart(s)"
    rm -f "$launch_hostfile" "$launch_output"
    exit 0
  fi
  # A regrow stop ends with the checkpoint of the step the run stopped at. Without it, a rank died
  # before the stop was done (killed after the STOP file was written, or while writing that
  # checkpoint): that is a failure, counted and handled as any other, not a clean stop.
  if [ $regrowing = 1 ] && [ ! -e "$out_dir/$(printf 'DONE_%08d' "$(last_logged_step)")" ]; then
    regrowing=0
  fi
  if [ $status -eq 1 ] && [ $regrowing = 0 ]; then
    echo "supervise.sh: the trainer refused its input (exit status 1); not restarting" >&2
    exit 1
  fi
  # 130: Ctrl-C. The trainer finished its step, saved a checkpoint and exited on purpose; this shell
  # got the same SIGINT, but bash goes on when its child exits by itself, so stop here.
  if [ $status -eq 130 ]; then
    echo "supervise.sh: the trainer was interrupted (Ctrl-C) and saved its checkpoint; not restarting (the same command resumes)" >&2
    exit 130
  fi
  if [ $status -eq 0 ] && [ $regrowing = 0 ]; then
    echo "supervise.sh: the trainer exited cleanly before step $steps (--stop-at?); not restarting"
    exit 0
  fi
  if [ $regrowing = 1 ]; then  # stopped on purpose after --regrow-after steps: every host back in
    excluded_hosts=""
    ranks=$(valid_ranks "$max_ranks")
    reason="regrowing after $regrow_after steps on fewer ranks (stopped cleanly at step $(last_logged_step))"
    continue
  fi
  if [ "$restarts" -ge "$max_restarts" ]; then
    echo "supervise.sh: giving up after $restarts restart(s); the last exit status was $status" >&2
    # An abandoned run's snapshots (the folder the trainer names in snapshots.path), on this node: only
    # the files and folders the trainer makes there (train/snapshots.h), each folder once it is empty.
    snapshots=$( [ -r "$out_dir/snapshots.path" ] && head -1 "$out_dir/snapshots.path" )
    if [[ "$(basename "${snapshots:-none}")" == gpt_snapshots_* && -d "$snapshots" && ! -L "$snapshots" ]]; then
      find "$snapshots" -mindepth 3 -maxdepth 3 -type f -path '*/held_by_*/*_of_*/*' \
        \( -name 'model_*.bin*' -o -name 'state_*.bin*' \) -delete
      find "$snapshots" -depth -type d -empty -delete
    fi
    exit 1
  fi
  restarts=$((restarts + 1))
  if [ -n "$ranks_range" ]; then
    # The ranks mpirun reports lost ("process rank R with PID P on node H exited on signal S"), or srun
    # ("srun: error: H: task R: Killed"), as "rank host how" lines.
    lost=$( { grep -o 'rank [0-9]* with PID [0-9]* on node [^ ]* exited on signal [0-9]*' "$launch_output" |
                awk '{print $2, $8, "signal " $12}'
              grep -o 'srun: error: [^:]*: tasks\{0,1\} [0-9,-]*: [A-Za-z ]*' "$launch_output" |
                awk -F': ' '{print $4, $3, $5}' | sed 's/^tasks\{0,1\} //'; } 2>/dev/null | sort -u)
    lost_count=$(echo "$lost" | grep -c .)
    [ "$lost_count" -ge 1 ] || lost_count=1
    for host in $(echo "$lost" | awk 'NF {print $2}' | sort -u); do
      case " $excluded_hosts " in *" $host "*) ;; *) excluded_hosts="$excluded_hosts $host" ;; esac
    done
    what=$(echo "$lost" | awk 'NF { how = $3; for (i = 4; i <= NF; i++) how = how " " $i
                                    printf "%srank %s (node %s, %s)", sep, $1, $2, how; sep = ", " }')
    reason="after a failure (exit status $status${what:+; lost: $what}) after step $(last_logged_step)"
    next=$((ranks - lost_count))
    [ "$next" -ge "$min_ranks" ] || next=$min_ranks
    ranks=$(valid_ranks "$next")
    [ "$ranks" -lt "$next" ] && [ "$ranks" -gt 0 ] &&
      echo "supervise.sh: $next ranks cannot keep -d $total_batch; using $ranks"
  else
    echo "supervise.sh: the trainer died (exit status $status); restart $restarts of at most $max_restarts in ${wait_s}s" >&2
  fi
  sleep "$wait_s"
done
