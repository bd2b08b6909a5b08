#!/usr/bin/env bash
# --dry-run on a machine without a GPU (a login node, a laptop): the CUDA build of the trainer
# (./train_gpt, nvcc) has no device to ask for its SM count, and must still plan the run. Checks, for
# GPT-2 and Llama 3, one rank and eight with ZeRO-3, that it exits 0, says it plans for an H100, and
# plans the same parameters, gradients, master weights and optimizer state as the emulated build's
# planner (./train_gpt_emu, the same code with an emulated device): the fields no SM count changes.
# Skipped where train_gpt was not built, or where a GPU is present (the plan then reads the device).
set -u
bin=${BIN:-.}
if [ ! -x "$bin/train_gpt" ] || [ ! -x "$bin/train_gpt_emu" ]; then
  echo "SKIPPED dry_run_without_gpu (train_gpt or train_gpt_emu not built)"
  exit 0
fi
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIPPED dry_run_without_gpu (a GPU is present)"
  exit 0
fi
status=0
# The memory line's device-independent fields.
fields() { grep '^memory:' | grep -oE '(parameters|gradients|master weights|optimizer state) [0-9.]+ MiB'; }

check() {  # NAME FLAGS...
  local name=$1; shift
  local out rc
  out=$("$bin/train_gpt" "$@" --dry-run 1 --device-memory 80 2>&1); rc=$?
  local emu
  emu=$("$bin/train_gpt_emu" "$@" --dry-run 1 --device-memory 80 2>&1)
  if [ $rc -ne 0 ]; then
    echo "FAIL dry_run_without_gpu_$name: exit status $rc"; echo "$out" | tail -3 | sed 's/^/   | /'; status=1
  elif ! grep -q "so --dry-run plans a GPU run" <<<"$out" || ! grep -q '^dry run: nothing was allocated' <<<"$out"; then
    echo "FAIL dry_run_without_gpu_$name: no plan printed"; echo "$out" | tail -3 | sed 's/^/   | /'; status=1
  elif [ "$(fields <<<"$out")" != "$(fields <<<"$emu")" ] || [ -z "$(fields <<<"$out")" ]; then
    echo "FAIL dry_run_without_gpu_$name: planned state differs from the emulated build's"
    echo "   | train_gpt:     $(fields <<<"$out" | tr '\n' ' ')"; echo "   | train_gpt_emu: $(fields <<<"$emu" | tr '\n' ' ')"
    status=1
  else
    echo "PASS dry_run_without_gpu_$name"
    grep '^memory:' <<<"$out" | sed 's/^/   /'
  fi
}
check gpt2_d12 -e d12 -b 8 -t 1024
check gpt2_d12_z3_8_ranks -e d12 -b 8 -t 1024 -z 3 --plan-ranks 8
check llama_gqa -e llama3:L4:C512:H8:KV2:T256 -b 4 -t 256 -r 1
check llama_gqa_z3_8_ranks -e llama3:L4:C512:H8:KV2:T256 -b 4 -t 256 -z 3 --plan-ranks 8

# --dry-run 0 is no dry run: the trainer falls back to the CPU and trains, as without the flag.
out=$("$bin/train_gpt" -e custom:L2:C64:H4 -b 2 -t 32 -x 1 -v 0 -s 0 --dry-run 0 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "training runs on the CPU" <<<"$out" && grep -q '^step 1/1 ' <<<"$out"; then
  echo "PASS dry_run_zero_trains_on_the_cpu"
else
  echo "FAIL dry_run_zero_trains_on_the_cpu: exit status $rc"; echo "$out" | tail -3 | sed 's/^/   | /'; status=1
fi
exit $status
