#!/usr/bin/env bash
# On a machine with a CUDA device: runs the kernel suite built by nvcc (kernels/build.mk) and the
# emulated one; both must pass the same tests, against the same host references and inputs, so the
# emulator and the device agree. Without a device it says SKIPPED.
set -u
name=kernel_suite_on_gpu_agrees_with_emulator
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIPPED $name (no CUDA device)"
  exit 0
fi
emu="${BUILD:-build}/test/emu_kernel_suite"
gpu="build/test/emu_kernel_suite_cuda"   # nvcc output lives in the plain build only
if [ ! -x "$gpu" ]; then
  echo "SKIPPED $name (no nvcc build of the suite at $gpu: run make first)"
  exit 0
fi
gpu_out=$("$gpu" 2>&1); gpu_rc=$?
emu_out=$("$emu" 2>&1); emu_rc=$?
echo "$gpu_out" | sed 's/^/gpu: /'
if [ $gpu_rc -ne 0 ] || [ $emu_rc -ne 0 ] || echo "$gpu_out$emu_out" | grep -q '^FAIL'; then
  echo "FAIL $name: the suite failed on the GPU (status $gpu_rc) or in the emulator (status $emu_rc)"
  exit 1
fi
if [ "$(echo "$gpu_out" | grep '^PASS' | sort)" != "$(echo "$emu_out" | grep '^PASS' | sort)" ]; then
  echo "FAIL $name: different tests passed on the GPU and in the emulator"
  exit 1
fi
echo "PASS $name"
