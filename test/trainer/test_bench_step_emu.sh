#!/usr/bin/env bash
# Smoke test of the training-step benchmark (dev/bench_step.cu) built through the emulator: on a tiny
# model it runs whole GPUModel steps (its own PASS/FAIL lines: finite losses, the loss going down) and
# every op class at the step's shapes, and prints the table. Checked here: it exits 0, the table has
# a row for every op class and the sum/whole-step/difference rows, and the result line is there.
# (The times are the emulator's; the benchmark's figures come from the nvcc build on a GPU.)
set -u
bench="${BUILD:-build}/dev/bench_step_emu"
if [ ! -x "$bench" ]; then
  echo "FAIL bench_step_emu: $bench was not built"
  exit 1
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$bench" --model custom:L2:C64:H2:T64:V512 -b 2 -t 64 --warmup 1 --steps 2 >"$out" 2>&1
rc=$?
cat "$out"
[ $rc -eq 0 ] || { echo "FAIL bench_step_emu: exit status $rc"; exit 1; }
missing=()
for row in "GEMMs" "attention" "LayerNorm + residual" "GELU" "classifier" "encoder" "AdamW + global norm" \
           "memsets + copies" "sum of the classes" "whole step" "difference"; do
  grep -q "^$row" "$out" || missing+=("$row")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "FAIL bench_step_emu table: no row for ${missing[*]}"
  exit 1
fi
echo "PASS bench_step_emu table: every op class, the sum and the whole step"
if grep -qE '^bench_step_result B=2 T=64 median_ms=[0-9.]+ tokens_per_s=[0-9]+' "$out"; then
  echo "PASS bench_step_emu result line"
else
  echo "FAIL bench_step_emu: no bench_step_result line"
  exit 1
fi
# Flags are checked: a bad value is one error line and exit status 1.
if "$bench" -b 0 >"$out" 2>&1 || ! grep -q '^error: -b' "$out"; then
  echo "FAIL bench_step_emu: -b 0 was not refused with an error line"; cat "$out"; exit 1
fi
echo "PASS bench_step_emu refuses a bad flag"
