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
{ printf '\x88\xd8\x34\x01\x01\x00\x00\x00\xa0\x0f\x00\x00'; head -c 1012 /dev/zero
  for ((i = 0; i < 4000; i++)); do printf "\\x$(printf %02x $(( (i * 37 + i / 7) % 64 )))\\x00"; done
} >"$work/train.bin"
