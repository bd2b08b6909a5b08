#!/usr/bin/env bash
# Renders a trainer's metrics log (metrics.jsonl: one JSON object per step, see train/metrics_log.h)
# into a PNG chart with four panels: train and val loss, learning rate, gradient norm, tokens/s,
# titled with the run (its folder, and the model and steps from its run.json when there is one).
#   usage: scripts/plot_metrics.sh RUN_DIR | RUN_DIR/metrics.jsonl [chart.png]
#          (default chart: metrics.png beside the log)
# Needs gnuplot (Debian's gnuplot-nox, installed by scripts/install_deps.sh). awk pulls the numbers
# out of the log's flat objects; gnuplot draws them.
set -euo pipefail
usage="usage: $0 RUN_DIR | RUN_DIR/metrics.jsonl [chart.png]   (RUN_DIR: a trainer's -o folder)"
case "${1:-}" in
  -h|--help) echo "$usage"; exit 0 ;;
  "") echo "$usage" >&2; exit 2 ;;
esac
[ $# -le 2 ] || { echo "$usage" >&2; exit 2; }
log="$1"
[ -d "$log" ] && log="${log%/}/metrics.jsonl"
png="${2:-$(dirname "$log")/metrics.png}"
[ -r "$log" ] || { echo "error: $log: cannot read the metrics log ($usage)" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "error: gnuplot is not installed (bash scripts/install_deps.sh)" >&2; exit 1; }

# The chart's title: the run's folder, with its model and steps when run.json says them.
run_dir=$(cd "$(dirname "$log")" && pwd)
title="run $run_dir"
if [ -r "$run_dir/run.json" ]; then
  setting() { sed -n "s/^ *\"$1\": \"\(.*\)\",\{0,1\}\$/\1/p" "$run_dir/run.json" | head -n1; }
  model=$(setting --model) config=$(setting model_config) steps=$(setting --max-steps)
  title="$title: $model ($config), $steps steps"
fi
title=${title//\'/}  # quotes would end gnuplot's string

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# One table per series: "step value". A key that is missing or null on a line is skipped.
extract() {
  awk -v key="\"$1\":" '{
      step = $0; sub(/.*"step":/, "", step); sub(/[,}].*/, "", step)
      at = index($0, key); if (at == 0) next
      value = substr($0, at + length(key)); sub(/[,}].*/, "", value)
      if (value != "null") print step, value
  }' "$log" > "$work/$1.dat"
}
for key in loss val_loss lr norm tok_per_s; do extract "$key"; done
[ -s "$work/loss.dat" ] || [ -s "$work/val_loss.dat" ] || { echo "error: $log: no loss values in the log" >&2; exit 1; }

# A series with no points is drawn as an empty panel rather than failing gnuplot.
plot_or_empty() {  # file, title, style
  if [ -s "$work/$1.dat" ]; then echo "'$work/$1.dat' using 1:2 with $3 title '$2'"; else echo "NaN title '$2 (none)'"; fi
}
tmp_png="$png.tmp.$$"
gnuplot <<GNUPLOT
set terminal png size 1200,900
set output '$tmp_png'
set multiplot layout 2,2 title '$title'
set grid
set xlabel 'step'
set title 'loss'
plot $(plot_or_empty loss 'train' 'lines lw 1'), $(plot_or_empty val_loss 'val' 'linespoints pt 7 lw 2')
set title 'learning rate'
set format y '%.1e'
plot $(plot_or_empty lr 'lr' 'lines lw 2')
set format y '%g'
set title 'gradient norm'
plot $(plot_or_empty norm 'norm' 'lines')
set title 'throughput (tokens/s)'
plot $(plot_or_empty tok_per_s 'tok/s' 'lines')
unset multiplot
GNUPLOT
mv "$tmp_png" "$png"
echo "wrote $png: $title"
