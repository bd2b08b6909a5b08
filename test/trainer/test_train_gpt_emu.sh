#!/usr/bin/env bash
# The trainer's end-to-end tests (test/host/test_train_cpu.cpp: overfitting, bitwise resume, pruning,
# bad input failing cleanly) run against train_gpt.cu built through the emulator, in bf16 and fp32.
# The sanitized build (BUILD=build-san) runs the bf16 trainer only: the fp32 one is the same code.
set -u
tests="${BUILD:-build}/test/host/test_train_cpu"
trainers="train_gpt_emu train_gpt_emu_fp32"
case "${BUILD:-build}" in *san*) trainers="train_gpt_emu" ;; esac
status=0
for trainer in $trainers; do
  if [ ! -x "${BIN:-.}/$trainer" ]; then
    echo "FAIL $trainer: ${BIN:-.}/$trainer was not built"
    status=1
    continue
  fi
  TRAINER=$trainer "$tests" | sed "s/^\(PASS\|FAIL\|SKIPPED\) /\1 $trainer: /"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
exit $status
