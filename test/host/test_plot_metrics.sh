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
exit $failed
