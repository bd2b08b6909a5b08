#!/usr/bin/env bash
# Tests of scripts/plot_metrics.sh: a metrics log (with val-loss-only and null lines) becomes a 2x2
# PNG; a log whose logged steps carry phase timers and collectives' bandwidth becomes a 3x2 one; a
# missing or loss-free log is one error line, a non-zero exit and no chart file.
set -u
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failed=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; failed=1; }
# A PNG's "width height", from its header; "" when the file is not a PNG.
png_size() {
  [ "$(head -c 8 "$1" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || return 0
  echo "$((16#$(od -An -tx1 -j16 -N4 "$1" | tr -d ' \n'))) $((16#$(od -An -tx1 -j20 -N4 "$1" | tr -d ' \n')))"
}

awk 'BEGIN {
  print "{\"step\":0,\"val_loss\":10.9}"
  for (s = 1; s <= 40; s++) {
    line = sprintf("{\"step\":%d,\"loss\":%.4f,\"lr\":%.6e,\"norm\":1.5,\"ms\":100.0,\"tok_per_s\":2560.0", s, 10 - s * 0.1, 0.001 * s / 40)
    if (s % 10 == 0) line = line sprintf(",\"val_loss\":%.4f", 10 - s * 0.09)
    print line "}"
  }
  print "{\"step\":41,\"loss\":null,\"lr\":1e-3,\"norm\":null,\"ms\":1.0,\"tok_per_s\":1.0}"
}' > "$dir/metrics.jsonl"

if out=$(bash scripts/plot_metrics.sh "$dir/metrics.jsonl" "$dir/chart.png" 2>&1) &&
   [ "$(head -c 8 "$dir/chart.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] &&
   [ "$(stat -c %s "$dir/chart.png")" -gt 10000 ]; then
  pass plot_metrics_writes_a_png
else
  fail plot_metrics_writes_a_png "$out"
fi

# A log without phase timers keeps the 2x2 chart and says nothing of phases.
if [ "$(png_size "$dir/chart.png")" = "1200 900" ] && [[ "$out" == *"wrote $dir/chart.png"* ]] && [[ "$out" != *phase* ]]; then
  pass plot_metrics_without_phases_keeps_four_panels
else
  fail plot_metrics_without_phases_keeps_four_panels "size '$(png_size "$dir/chart.png")': $out"
fi

# Phase timers and collectives, as the trainer writes them on logged steps (every 5th here): step 15
# has no comm_wait, step 20 a null optimizer, step 30 a checkpoint, step 25 no phases at all, step 10
# a null all-gather bandwidth; step 5 puts the objects (with a phase named "loss") before the line's
# own keys, and its members in another order. With comm=0, the same without "comm".
phase_log() {
  awk -v with_comm="$1" 'BEGIN {
  for (s = 1; s <= 30; s++) {
    line = sprintf("\"step\":%d,\"loss\":%.4f,\"lr\":1e-3,\"norm\":1.5,\"ms\":80.0,\"tok_per_s\":%d", s, 10 - s * 0.1, 3000 + s)
    if (s % 5 == 0 && s != 25) {
      phases = "\"data\":{\"min_ms\":0.410,\"min_rank\":1,\"max_ms\":0.520,\"max_rank\":0}"
      phases = phases sprintf(",\"forward\":{\"max_rank\":3,\"max_ms\":%.3f,\"min_rank\":0,\"min_ms\":12.100}", 15 + s / 10)
      phases = phases ",\"loss\":{\"min_ms\":1.000,\"min_rank\":0,\"max_ms\":1.500,\"max_rank\":1}"
      phases = phases sprintf(",\"backward\":{\"min_ms\":25.000,\"min_rank\":0,\"max_ms\":%.3f,\"max_rank\":2}", 30 + s / 5)
      if (s != 15) phases = phases ",\"comm_wait\":{\"min_ms\":1.000,\"min_rank\":0,\"max_ms\":6.500,\"max_rank\":1}"
      phases = phases ",\"optimizer\":{\"min_ms\":2.000,\"min_rank\":0,\"max_ms\":" (s == 20 ? "null" : "3.200") ",\"max_rank\":0}"
      if (s == 30) phases = phases ",\"checkpoint\":{\"min_ms\":40.000,\"min_rank\":0,\"max_ms\":45.000,\"max_rank\":0}"
      comm = sprintf("\"all-reduce\":{\"bytes\":123456,\"ms\":1.25,\"bus_gbps\":%.1f},\"all-gather\":{\"ms\":0.5,\"bus_gbps\":%s,\"bytes\":4096}", 100 + s, s == 10 ? "null" : "40.5")
      objects = "\"phases\":{" phases "}" (with_comm ? ",\"comm\":{" comm "}" : "")
      line = s == 5 ? objects "," line : line "," objects
    }
    print "{" line "}"
  }
}'
}
phase_log 1 > "$dir/phases.jsonl"
if out=$(bash scripts/plot_metrics.sh "$dir/phases.jsonl" "$dir/phases.png" 2>&1) &&
   [ "$(png_size "$dir/phases.png")" = "1200 1300" ] && [ "$(stat -c %s "$dir/phases.png")" -gt 10000 ] &&
   [[ "$out" == *"wrote $dir/phases.png"*"with the phase breakdown and the collectives' bus bandwidth"* ]]; then
  pass plot_metrics_draws_the_phase_breakdown
else
  fail plot_metrics_draws_the_phase_breakdown "size '$(png_size "$dir/phases.png")': $out"
fi
# Phases without collectives: the fifth panel alone; phases that are all null: an empty fifth panel.
phase_log 0 > "$dir/no_comm.jsonl"
printf '%s\n' '{"step":1,"loss":2.0,"lr":1e-3,"norm":1,"tok_per_s":10,"phases":{}}' \
  '{"step":2,"loss":1.9,"lr":1e-3,"norm":1,"tok_per_s":11,"phases":{"forward":{"min_ms":null,"max_ms":null}}}' >"$dir/null_phases.jsonl"
if out=$(bash scripts/plot_metrics.sh "$dir/no_comm.jsonl" "$dir/no_comm.png" 2>&1) &&
   [ "$(png_size "$dir/no_comm.png")" = "1200 1300" ] && [[ "$out" == *"(with the phase breakdown)" ]] &&
   out2=$(bash scripts/plot_metrics.sh "$dir/null_phases.jsonl" "$dir/null_phases.png" 2>&1) &&
   [ "$(png_size "$dir/null_phases.png")" = "1200 1300" ] && [[ "$out2" == *"(with the phase breakdown)" ]]; then
  pass plot_metrics_phases_without_collectives_or_values
else
  fail plot_metrics_phases_without_collectives_or_values "$out ${out2:-}"
fi

if out=$(bash scripts/plot_metrics.sh "$dir/missing.jsonl" "$dir/none.png" 2>&1); then
  fail plot_metrics_rejects_a_missing_log "exit 0"
elif [ "$(printf '%s\n' "$out" | wc -l)" -ne 1 ] || [[ "$out" != *missing.jsonl* ]] || [ -e "$dir/none.png" ]; then
  fail plot_metrics_rejects_a_missing_log "$out"
else
  pass plot_metrics_rejects_a_missing_log
fi

echo '{"step":0}' > "$dir/empty.jsonl"
if out=$(bash scripts/plot_metrics.sh "$dir/empty.jsonl" "$dir/empty.png" 2>&1) || [ -e "$dir/empty.png" ] ||
   [[ "$out" != *"no loss values"* ]]; then
  fail plot_metrics_rejects_a_log_without_losses "$out"
else
  pass plot_metrics_rejects_a_log_without_losses
fi
# A run folder works as well as its log, and the chart is titled with the run (from its run.json).
mkdir -p "$dir/run"
cp "$dir/metrics.jsonl" "$dir/run/metrics.jsonl"
printf '{\n  "model_config": "L=2 H=2 C=64",\n  "settings": {\n    "--model": "d6",\n    "--max-steps": "40"\n  }\n}\n' >"$dir/run/run.json"
if out=$(bash scripts/plot_metrics.sh "$dir/run" 2>&1) && [ -s "$dir/run/metrics.png" ] &&
   [[ "$out" == *"run $dir/run: d6 (L=2 H=2 C=64), 40 steps"* ]]; then
  pass plot_metrics_takes_a_run_folder_and_titles_the_run
else
  fail plot_metrics_takes_a_run_folder_and_titles_the_run "$out"
fi

# A log of losses alone (no lr, norm or tok/s, as an evaluation-only log has): its empty panels are
# drawn empty, and no temporary file is left behind.
mkdir -p "$dir/losses"
printf '{"step":1,"loss":3.2}\n{"step":2,"loss":3.1}\n' >"$dir/losses/metrics.jsonl"
if out=$(bash scripts/plot_metrics.sh "$dir/losses" 2>&1) && [ -s "$dir/losses/metrics.png" ] &&
   [ "$(ls "$dir/losses")" = "$(printf 'metrics.jsonl\nmetrics.png')" ]; then
  pass plot_metrics_draws_a_log_of_losses_alone
else
  fail plot_metrics_draws_a_log_of_losses_alone "$out; $(ls "$dir/losses" | tr '\n' ' ')"
fi

# Called wrong: the usage, exit status 2, no chart; --help: the usage, status 0.
mkdir -p "$dir/empty"
usage_ok=1
for args in "" "a b c"; do
  # shellcheck disable=SC2086
  out=$(cd "$dir/empty" && bash "$OLDPWD/scripts/plot_metrics.sh" $args 2>&1)
  status=$?
  if [ $status -ne 2 ] || [[ "$out" != usage:*RUN_DIR* ]] || [ -n "$(ls -A "$dir/empty")" ]; then
    usage_ok=0
    echo "  '$args': status $status: $out"
  fi
done
out=$(bash scripts/plot_metrics.sh --help 2>&1) && [[ "$out" == usage:*RUN_DIR* ]] || usage_ok=0
[ $usage_ok = 1 ] && pass plot_metrics_usage_when_called_wrong ||
  fail plot_metrics_usage_when_called_wrong "see above; --help: $out"
exit $failed
