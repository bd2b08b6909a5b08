# Sourced by test/train/test_async_checkpoints.sh and dev/checkpoint_overhead.sh: the CPU trainer's
# checkpoint workload. Sets $work (a temporary folder, removed on exit) holding train.bin, a token
# shard of 200,000 tokens below 512, and $flags, a 2-layer model with a 512-token vocabulary, so that a
# step's compute rather than its 7 MiB of files is what a step costs. OpenMP's idle threads sleep
# rather than spin (OMP_WAIT_POLICY=passive) so that the checkpoint writer thread gets a core.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -c 'import struct, sys
n = 200000
header = struct.pack("<3i", 20240520, 1, n) + bytes(1012)
tokens = struct.pack("<%dH" % n, *[(i * 37 + i // 7 + i // 101) % 512 for i in range(n)])
sys.stdout.buffer.write(header + tokens)' >"$work/train.bin"
export OMP_WAIT_POLICY=passive
flags=(-e custom:L2:C128:H4:V512:T64 -i "$work/train.bin" -b 64 -t 64 -v 0 -s 0 -l 1e-3)

# step_ms FIRST TRAINER ARGS...: runs the trainer and prints its wall time per step in ms (0 if it
# failed), timed between the step lines of step FIRST and of the last step as they arrive: start-up,
# the first steps' warm-up and the run's final checkpoint are left out; the checkpoints taken at the
# steps in between, and whatever the writer thread takes from the training threads, are in. The
# run's output is kept in $work/step_ms.log.
step_ms() {
  python3 - "$work/step_ms.log" "$@" <<'PY'
import re, subprocess, sys, time
log, first, command = open(sys.argv[1], "w"), int(sys.argv[2]), sys.argv[3:]
seen = {}  # step -> when its line arrived
with subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                      stderr=subprocess.STDOUT, text=True) as run:
    for line in run.stdout:
        log.write(line)
        match = re.match(r"step (\d+)/\d+ ", line)
        if match: seen[int(match.group(1))] = time.monotonic()
last = max(seen, default=0)
ok = run.returncode == 0 and first in seen and last > first
print("%.1f" % ((seen[last] - seen[first]) * 1000 / (last - first)) if ok else 0)
PY
}
