#!/usr/bin/env bash
# Keeps a training run going until it is done: runs the trainer command given after the options, and
# when it dies (killed, a node lost, a CUDA or NCCL failure) runs it again, resuming from the newest
# complete checkpoint, until the run's final checkpoint marker DONE_<steps> exists in its output folder.
#   usage: scripts/supervise.sh [--max-restarts N] [--wait SECONDS] [--] TRAINER FLAGS...
# The command must name its output folder (-o DIR), its steps (-x N) and resume (-y 1), so that every
# restart continues the same run. A trainer that exits with status 1 has refused its input (one
# "error:" line): that repeats on every restart, so the supervisor stops there; one stopped by Ctrl-C
# (status 130) is not restarted either. Exit status: 0 when the run is done, 1 when it gave up, 130
# after Ctrl-C.
set -u
max_restarts=10 wait_s=5
while [ $# -gt 0 ]; do
  case "$1" in
    --max-restarts) max_restarts="$2"; shift 2 ;;
    --wait) wait_s="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "supervise.sh: no trainer command given (see --help)" >&2; exit 1; }

# The output folder, the step count and -y from the trainer's own flags (short or long forms).
out_dir="" steps="" resume=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    -o|--output-dir) out_dir="${args[i+1]:-}" ;;
    --output-dir=*) out_dir="${args[i]#*=}" ;;
    -x|--max-steps) steps="${args[i+1]:-}" ;;
    --max-steps=*) steps="${args[i]#*=}" ;;
    -y|--resume) resume="${args[i+1]:-}" ;;
    --resume=*) resume="${args[i]#*=}" ;;
  esac
done
[ -n "$out_dir" ] || { echo "supervise.sh: the trainer command needs an output folder (-o DIR)" >&2; exit 1; }
[[ "$steps" =~ ^[1-9][0-9]*$ ]] || { echo "supervise.sh: the trainer command needs a step count (-x N, N > 0)" >&2; exit 1; }
[ "$resume" = 1 ] || { echo "supervise.sh: the trainer command needs -y 1, so that restarts resume" >&2; exit 1; }
done_marker="$out_dir/$(printf 'DONE_%08d' "$steps")"

restarts=0
while true; do
  "$@"
  status=$?
  if [ -e "$done_marker" ]; then
    echo "supervise.sh: run done ($done_marker) after $restarts restart(s)"
    exit 0
  fi
  if [ $status -eq 1 ]; then
    echo "supervise.sh: the trainer refused its input (exit status 1); not restarting" >&2
    exit 1
  fi
  # 130: Ctrl-C. The trainer finished its step, saved a checkpoint and exited on purpose; this shell
  # got the same SIGINT, but bash goes on when its child exits by itself, so stop here.
  if [ $status -eq 130 ]; then
    echo "supervise.sh: the trainer was interrupted (Ctrl-C) and saved its checkpoint; not restarting (the same command resumes)" >&2
    exit 130
  fi
  if [ $status -eq 0 ]; then
    echo "supervise.sh: the trainer exited cleanly before step $steps (--stop-at?); not restarting"
    exit 0
  fi
  if [ "$restarts" -ge "$max_restarts" ]; then
    echo "supervise.sh: giving up after $restarts restart(s); the last exit status was $status" >&2
    exit 1
  fi
  restarts=$((restarts + 1))
  echo "supervise.sh: the trainer died (exit status $status); restart $restarts of at most $max_restarts in ${wait_s}s" >&2
  sleep "$wait_s"
done
