#!/usr/bin/env bash
# The trainer's end-to-end tests (test/train/test_train_cpu.cpp) that concern the model behind the
# shared loop, run against train_gpt.cu and the GPU model (gpu/) built through the emulator, in bf16 and fp32: help, overfitting
# one batch, bitwise resume, checkpoint pruning, bad input failing cleanly, SIGTERM stopping with a
# checkpoint, HellaSwag (single-sequence forwards and logits_at), -lg's telemetry (n/a on the emulated
# device), checkpoints copied from the device into reused host arrays, and (bf16) a run on the Hopper
# attention kernels (--attention-kernel hopper). (The loop's other behaviour, the
# same code for both trainers, is tested on train_gpt_cpu.)
# The sanitized build (BUILD=build-san) runs the bf16 trainer only: the fp32 one is the same code.
# It leaves out single_batch_overfits (13 s there): whether 50 steps memorise a batch is no concern of
# the sanitizers, and the same training path runs under them in sigterm_stops_with_a_checkpoint and
# resume_continues_bitwise (and overfitting in hopper_attention_training_overfits).
set -u
tests="${BUILD:-build}/test/train/test_train_cpu"
trainers="train_gpt_emu train_gpt_emu_fp32"
selected="trainer_help_exits_cleanly single_batch_overfits resume_continues_bitwise
          checkpoints_are_pruned_to_the_newest bad_input_fails_cleanly sigterm_stops_with_a_checkpoint
          hellaswag_picks_the_memorised_completions gpu_telemetry_every_n_steps
          checkpoints_taken_into_reused_host_arrays_are_unchanged"
case "${BUILD:-build}" in *san*) trainers="train_gpt_emu" selected="${selected/single_batch_overfits /}" ;; esac
status=0
for trainer in $trainers; do
  if [ ! -x "${BIN:-.}/$trainer" ]; then
    echo "FAIL $trainer: ${BIN:-.}/$trainer was not built"
    status=1
    continue
  fi
  names="$selected"
  # The Hopper attention path (bf16 only), end to end.
  [ "$trainer" = train_gpt_emu ] && names="$names hopper_attention_training_overfits"
  for name in $names; do  # test_train_cpu runs the tests whose names contain its argument
    TRAINER=$trainer "$tests" "$name" | sed "s/^\(PASS\|FAIL\|SKIPPED\) /\1 $trainer: /"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
done
exit $status
