#!/usr/bin/env bash
# Tests of scripts/plot_metrics.sh: a metrics log (with val-loss-only and null lines) becomes a PNG;
# a missing or loss-free log is one error line, a non-zero exit and no chart file.
set -u
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failed=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; failed=1; }

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
