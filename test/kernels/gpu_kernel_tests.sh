#!/usr/bin/env bash
# On a machine with a CUDA device: runs every kernel test built by nvcc (build/test/kernels/cuda/) and
# the GPU model's tests (build/test/gpu/cuda/: the whole model against the CPU reference, and
# the one-rank NCCL paths), the same tests the emulator runs in CI, now against the real device. Without a device it says SKIPPED.
set -u
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIPPED gpu_kernel_tests (no CUDA device)"
  exit 0
fi
status=0
found=0
for t in build/test/kernels/cuda/test_* build/test/gpu/cuda/test_*; do
  [ -x "$t" ] || continue
  found=1
  timeout "${GPU_TEST_TIMEOUT:-120}" "$t" 2>&1 | sed -E "s#^(PASS|FAIL|SKIPPED) #\1 gpu:$(basename "$t"):#"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
[ $found -eq 1 ] || echo "SKIPPED gpu_kernel_tests (no nvcc-built kernel tests in build/test/kernels/cuda: run make)"
exit $status
