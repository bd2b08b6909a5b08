# Sourced by the shell tests that run an emulated trainer as MPI ranks on a tiny model. Before sourcing,
# set `trainer` (its path) and `name` (the test's, for the SKIPPED line). Skips the test (exit 0) where
# mpirun or the trainer is missing; sets what mpirun needs here (root allowed, one OpenMP thread,
# OpenMPI's own leaks not reported by AddressSanitizer: see test_nccl.sh); makes $work, removed at
# exit; and writes $work/train.bin: 4000 tokens below 64, after a 1024-byte header (magic 20240520,
# version 1, the count).
if [ ! -x "$trainer" ] || ! command -v mpirun >/dev/null; then
  echo "SKIPPED $name (needs mpirun and $trainer)"
  exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -c 'import struct, sys
n = 4000
tokens = struct.pack("<%dH" % n, *[(i * 37 + i // 7) % 64 for i in range(n)])
sys.stdout.buffer.write(struct.pack("<3i", 20240520, 1, n) + bytes(1012) + tokens)' >"$work/train.bin"
