#!/usr/bin/env bash
# The phase timers and the timeline (--timers, --profile-steps) through the trainers:
#   - timers on or off train the same bits (the CPU trainer, and the emulated CUDA trainer with its
#     CUDA graphs, whose micro-steps get graphs of their own while timing);
#   - a timeline of steps 2..4 parses, nests, and its phases sum to each step's logged time within 5%
#     (test/train/check_trace.py); metrics.jsonl carries the phases;
#   - what the timers cost a step of the CPU trainer, measured in the run (its marks at what a mark
#     costs there, and the loop's own timing work), is under 1% of the step time; the same model's
#     fastest step with the timers off is printed beside it, not asserted: two runs' times differ by
#     far more than 1% on a machine running other work (the suite runs tests side by side);
#   - bad --profile-steps values stop with one error line;
#   - the CUDA build (train_gpt, where built) has NVTX compiled in.
set -u
BIN="${BIN:-.}"
failures=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; failures=$((failures + 1)); }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A token shard of its own: 4000 tokens below 64 after a 1024-byte header (magic 20240520, version 1,
# the count).
python3 -c 'import struct, sys
n = 4000
tokens = struct.pack("<%dH" % n, *[(i * 37 + i // 7) % 64 for i in range(n)])
sys.stdout.buffer.write(struct.pack("<3i", 20240520, 1, n) + bytes(1012) + tokens)' >"$work/train.bin"
tiny=(-e custom:L2:C32:H2:T32 -i "$work/train.bin" -b 2 -t 32 -x 5 -v 0 -s 0 --seed 7)

for trainer in train_gpt_cpu train_gpt_emu; do
  [ -x "$BIN/$trainer" ] || { echo "SKIPPED timers_through_$trainer (not built)"; continue; }
  "$BIN/$trainer" "${tiny[@]}" --timers 0 -o "$work/$trainer.off" >"$work/off.log" 2>&1 &&
  "$BIN/$trainer" "${tiny[@]}" --timers 2 --profile-steps 2:4 -o "$work/$trainer.on" >"$work/on.log" 2>&1
  if [ $? -ne 0 ]; then
    fail "timers_train_the_same_bits_$trainer" "a run failed: $(tail -n 2 "$work/off.log" "$work/on.log" | tr '\n' ' ')"
    continue
  fi
  if cmp -s "$work/$trainer.off/model_00000005.bin" "$work/$trainer.on/model_00000005.bin" &&
     cmp -s "$work/$trainer.off/state_00000005_00000.bin" "$work/$trainer.on/state_00000005_00000.bin"; then
    pass "timers_train_the_same_bits_$trainer"
  else
    fail "timers_train_the_same_bits_$trainer" "the model or state files differ with --timers 2"
  fi
  if ! command -v python3 >/dev/null; then
    echo "SKIPPED timeline_parses_nests_and_sums_to_the_step_$trainer (needs python3)"
  elif out=$(python3 "$(dirname "$0")/check_trace.py" "$work/$trainer.on/trace.json" 1 2 4 \
               "$work/$trainer.on/metrics.jsonl" 2>&1) &&
       [ "$(grep -c '"phases":{"data"' "$work/$trainer.on/metrics.jsonl")" -eq 5 ] &&
       grep -q '^phases of step 3 ' "$work/on.log" && grep -q '^step 3/5 .* | phases: .*forward=[0-9]' "$work/on.log"; then
    pass "timeline_parses_nests_and_sums_to_the_step_$trainer ($out)"
  else
    fail "timeline_parses_nests_and_sums_to_the_step_$trainer" "$out; $(grep -c phases "$work/$trainer.on/metrics.jsonl") metrics lines with phases"
  fi
done

# The timers' cost on the CPU trainer (a 4-layer model, steps of about 100 ms here). A time, so in the
# plain build only: under the sanitizers it would measure their instrumentation.
case "${BUILD:-build}" in *san*) echo "SKIPPED timers_cost_under_1_percent_of_a_cpu_step (a time: the plain build measures it)" ;; esac
if [ -x "$BIN/train_gpt_cpu" ] && [[ "${BUILD:-build}" != *san* ]]; then
  sized=(-e custom:L4:C128:H4:T128 -i "$work/train.bin" -b 4 -t 128 -x 8 -v 0 -s 0)
  "$BIN/train_gpt_cpu" "${sized[@]}" --timers 1 -o "$work/cost.on" >"$work/cost.log" 2>&1
  "$BIN/train_gpt_cpu" "${sized[@]}" --timers 0 -o "$work/cost.off" >/dev/null 2>&1
  share=$(sed -n 's/^timers: .*, \([0-9.]*\)% of the step time$/\1/p' "$work/cost.log")
  fastest() { awk -F'"ms":' 'NF > 1 { split($2, v, ","); if (min == "" || v[1] < min) min = v[1] } END { print min }' "$1"; }
  on=$(fastest "$work/cost.on/metrics.jsonl") off=$(fastest "$work/cost.off/metrics.jsonl")
  if [ -n "$share" ] && awk -v s="$share" 'BEGIN { exit !(s < 1) }'; then
    pass "timers_cost_under_1_percent_of_a_cpu_step ($(grep '^timers: ' "$work/cost.log"); fastest step $on ms with timers, $off ms without)"
  else
    fail timers_cost_under_1_percent_of_a_cpu_step "measured '${share}'%; fastest step $on ms with timers, $off ms without; $(tail -n 2 "$work/cost.log")"
  fi
fi

# Bad values: one error line naming the flag, exit status 1, nothing trained.
bad() {  # test name, expected words, flags...
  local test=$1 words=$2
  shift 2
  if out=$("$BIN/train_gpt_cpu" "${tiny[@]}" "$@" 2>&1); then
    fail "$test" "exit 0"
  elif [ "$(echo "$out" | grep -c '^error: ')" -eq 1 ] && echo "$out" | grep -q "$words" &&
       ! echo "$out" | grep -q '^step '; then
    pass "$test"
  else
    fail "$test" "$out"
  fi
}
if [ -x "$BIN/train_gpt_cpu" ]; then
  bad profile_steps_backwards_is_refused "error: --profile-steps: 5:2 ends before it starts" --profile-steps 5:2 -o "$work/b1"
  bad profile_steps_past_the_run_are_refused "error: --profile-steps: step 9 is past the last step 5" --profile-steps 2:9 -o "$work/b2"
  bad profile_steps_past_stop_at_are_refused "error: --profile-steps: step 4 is past the run's last step 3" --profile-steps 2:4 --stop-at 3 -o "$work/b3"
  bad profile_steps_need_an_output_folder "error: --profile-steps: the timeline is written to the output folder" --profile-steps 1:2
  bad profile_steps_must_be_a_range "error: --profile-steps: 'two' is not A:B" --profile-steps two -o "$work/b4"
  bad profile_steps_need_the_timers "error: --profile-steps: the timeline needs the timers" --profile-steps 1:2 --timers 0 -o "$work/b5"
  bad timers_take_0_1_or_2 "error: --timers: 3 is out of range" --timers 3
fi

# NVTX in the CUDA build: the header-only library's injection hook and the range names are in the binary.
if [ -x "$BIN/train_gpt" ]; then
  if strings "$BIN/train_gpt" | grep -q NVTX_INJECTION64_PATH && strings "$BIN/train_gpt" | grep -qx 'tensor wait'; then
    pass train_gpt_has_nvtx_ranges
  else
    fail train_gpt_has_nvtx_ranges "no NVTX injection hook or range names in $BIN/train_gpt"
  fi
else
  echo "SKIPPED train_gpt_has_nvtx_ranges (train_gpt not built)"
fi
exit $((failures > 0))
