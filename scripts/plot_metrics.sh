#!/usr/bin/env bash
# Renders a trainer's metrics log (metrics.jsonl: one JSON object per step, see train/metrics_log.h)
# into a PNG chart with four panels: train and val loss, learning rate, gradient norm, tokens/s,
# titled with the run (its folder, and the model and steps from its run.json when there is one).
# When the log's logged steps carry phase timers ("phases":{"forward":{"min_ms":..,"max_ms":..,..},..},
# see phase_metrics_json in train/step_phases.cpp), the chart is 3x2 with a fifth panel: each phase's
# slowest-rank time (max_ms) stacked per logged step; and, when lines carry "comm":{"all-reduce":
# {"bytes":..,"ms":..,"bus_gbps":..},..}, a sixth: the bus bandwidth of each collective kind.
#   usage: scripts/plot_metrics.sh RUN_DIR | RUN_DIR/metrics.jsonl [chart.png]
#          (default chart: metrics.png beside the log)
# Needs gnuplot (Debian's gnuplot-nox, installed by scripts/install_deps.sh). awk pulls the numbers
# out of the log's objects; gnuplot draws them.
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
tmp_png="$png.tmp.$$"
trap 'rm -rf "$work" "$tmp_png"' EXIT
# One table per series: "step value". A key that is missing or null on a line is skipped. Nested
# objects ("phases", "comm") are first replaced by null, so that their inner keys (a phase named
# "loss", a collective's "ms") are never taken for the line's own.
extract() {
  awk -v key="\"$1\":" '{
      while (match($0, /:[ ]*[{][^{}]*[}]/)) $0 = substr($0, 1, RSTART) "null" substr($0, RSTART + RLENGTH)
      step = $0; sub(/.*"step":/, "", step); sub(/[,}].*/, "", step)
      at = index($0, key); if (at == 0) next
      value = substr($0, at + length(key)); sub(/[,}].*/, "", value)
      if (value != "null") print step, value
  }' "$log" > "$work/$1.dat"
}
for key in loss val_loss lr norm tok_per_s; do extract "$key"; done
[ -s "$work/loss.dat" ] || [ -s "$work/val_loss.dat" ] || { echo "error: $log: no loss values in the log" >&2; exit 1; }

# The phase timers and the collectives' bandwidth, from the nested objects of the lines that have
# them (members in any order, values possibly null; a line without the object adds nothing):
#   phases.seen   there when any line has "phases" (then the chart is 3x2)
#   phases.dat    per line with a timed phase: the step, then the running sum of the phases' max_ms in
#                 phases.names' order (a phase missing or null on a line adds 0), for stacked bands
#   phases.names  the phases measured on any line, in the trainer's order (unknown ones after),
#                 with "_" back to " " ("comm_wait" is "comm wait")
#   comm_N.dat    "step bus_gbps" of the Nth collective kind of comm.names (first seen first)
awk -v dir="$work" '
  # The members of the JSON object text obj into keys[1..n] and vals[1..n] (each value as raw text:
  # a number, null, a quoted string or a nested object); returns n. Tracks strings (which may hold
  # braces, commas or escaped quotes) and nesting depth, so only the outer members are split.
  function members(obj, keys, vals,    n, i, c, depth, instr, esc, state, start) {
    n = 0; depth = 0; instr = 0; esc = 0; state = ""
    for (i = 1; i <= length(obj); i++) {
      c = substr(obj, i, 1)
      if (instr) {
        if (esc) esc = 0
        else if (c == "\\") esc = 1
        else if (c == "\"") {
          instr = 0
          if (depth == 1 && state == "inkey") { keys[n + 1] = substr(obj, start + 1, i - start - 1); state = "colon" }
        }
      } else if (c == "\"") {
        instr = 1
        if (depth == 1 && state == "key") { state = "inkey"; start = i }
      } else if (c == "{" || c == "[") {
        if (++depth == 1) state = "key"
      } else if (depth == 1 && c == ":" && state == "colon") {
        state = "value"; start = i + 1
      } else if (depth == 1 && (c == "," || c == "}") && state == "value") {
        vals[++n] = substr(obj, start, i - start); gsub(/^[ \t]+|[ \t]+$/, "", vals[n]); state = "key"
        if (c == "}") depth--
      } else if (c == "}" || c == "]") {
        depth--
      }
    }
    return n
  }
  function number(text) { return text ~ /^-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$/ }
  BEGIN {
    split("data forward loss backward comm_wait optimizer checkpoint bubble tensor_wait", known, " ")
    for (i = 1; i in known; i++) known_at[known[i]] = i
  }
  index($0, "\"phases\"") == 0 && index($0, "\"comm\"") == 0 { next }  # the common case, fast
  {
    n = members($0, key, val); step = ""; phases = ""; comm = ""
    for (i = 1; i <= n; i++) {
      if (key[i] == "step") step = val[i]
      else if (key[i] == "phases") phases = val[i]
      else if (key[i] == "comm") comm = val[i]
    }
    if (!number(step)) next
    if (substr(phases, 1, 1) == "{") {
      seen = 1; row = rows + 1; timed = 0
      np = members(phases, name, inner)
      for (j = 1; j <= np; j++) {
        phase = name[j]; gsub(/ /, "_", phase)
        if (substr(inner[j], 1, 1) != "{") continue
        nf = members(inner[j], field, value)
        for (f = 1; f <= nf; f++)
          if (field[f] == "max_ms" && number(value[f])) {
            if (!(phase in measured)) { measured[phase] = 1; if (!(phase in known_at)) extra[++extras] = phase }
            ms[row, phase] = value[f]; timed = 1
          }
      }
      if (timed) step_of[++rows] = step  # a line whose phases are all null draws no zero dip
    }
    if (substr(comm, 1, 1) == "{") {
      nk = members(comm, name, inner)
      for (j = 1; j <= nk; j++) {
        if (substr(inner[j], 1, 1) != "{") continue
        nf = members(inner[j], field, value)
        for (f = 1; f <= nf; f++)
          if (field[f] == "bus_gbps" && number(value[f])) {
            if (!(name[j] in kind_at)) { kind_at[name[j]] = ++kinds; print name[j] > (dir "/comm.names") }
            print step, value[f] > (dir "/comm_" kind_at[name[j]] ".dat")
          }
      }
    }
  }
  END {
    shown = 0
    for (i = 1; i in known; i++) if (known[i] in measured) order[++shown] = known[i]
    for (i = 1; i <= extras; i++) order[++shown] = extra[i]
    if (seen) printf "" > (dir "/phases.seen")
    for (i = 1; i <= shown; i++) { label = order[i]; gsub(/_/, " ", label); print label > (dir "/phases.names") }
    for (r = 1; r <= rows; r++) {
      line = step_of[r]; sum = 0
      for (i = 1; i <= shown; i++) { if ((r, order[i]) in ms) sum += ms[r, order[i]]; line = line " " sum }
      print line > (dir "/phases.dat")
    }
  }' "$log"
touch "$work/phases.names" "$work/phases.dat" "$work/comm.names"
has_phases=0; [ -e "$work/phases.seen" ] && has_phases=1
has_comm=0; [ -s "$work/comm.names" ] && has_comm=1

# A series with no points is drawn as an empty panel rather than failing gnuplot.
plot_or_empty() {  # file, title, style[, alone: the panel's only series]
  if [ -s "$work/$1.dat" ]; then echo "'$work/$1.dat' using 1:2 with $3 title '$2'"; elif [ -n "${4:-}" ]; then echo "[0:1] [0:1] NaN title '$2 (none)'"  # alone: ranges let gnuplot draw no points
  else echo "NaN title '$2 (none)'"; fi
}

# The fifth panel: one band per phase, from the running sum of the phases below it to its own, each
# phase in its own colour whatever the run measured (so that charts of different runs compare). A
# log with one timed step has no band to fill: its phases are stacked boxes on that step instead.
phase_colour() {
  case "$1" in
    data) echo '#8c8c8c' ;; forward) echo '#1f77b4' ;; loss) echo '#9467bd' ;; backward) echo '#2ca02c' ;;
    "comm wait") echo '#d62728' ;; optimizer) echo '#ff7f0e' ;; checkpoint) echo '#8c564b' ;;
    bubble) echo '#e6c229' ;; "tensor wait") echo '#e377c2' ;; *) echo '#17becf' ;;
  esac
}
phase_bands() {
  local column=2 lower='0' name plot="" using
  while IFS= read -r name; do
    if [ "$(wc -l < "$work/phases.dat")" -eq 1 ]; then  # x, y, x half-width, y half-width
      using="1:(($lower + \$$column) / 2):(0.4):((\$$column - $lower) / 2) with boxxyerror"
    else
      using="1:($lower):$column with filledcurves"
    fi
    plot+="${plot:+, }'$work/phases.dat' using $using fc rgb '$(phase_colour "$name")' title '${name//\'/}'"
    lower="\$$column"; column=$((column + 1))
  done < "$work/phases.names"
  echo "${plot:-[0:1] [0:1] NaN title 'no phase measured'}"  # gnuplot needs ranges to draw no points
}
# The sixth panel: a line per collective kind.
comm_lines() {
  local kind=1 name plot=""
  while IFS= read -r name; do
    plot+="${plot:+, }'$work/comm_$kind.dat' using 1:2 with linespoints pt 7 ps 0.6 title '${name//\'/}'"
    kind=$((kind + 1))
  done < "$work/comm.names"
  echo "$plot"
}
gnuplot <<GNUPLOT
set terminal png size 1200,$([ $has_phases = 1 ] && echo 1300 || echo 900)
set output '$tmp_png'
set multiplot layout $([ $has_phases = 1 ] && echo 3 || echo 2),2 title '$title'
set grid
set xlabel 'step'
set title 'loss'
plot $(plot_or_empty loss 'train' 'lines lw 1'), $(plot_or_empty val_loss 'val' 'linespoints pt 7 lw 2')
set title 'learning rate'
set format y '%.1e'
plot $(plot_or_empty lr 'lr' 'lines lw 2' alone)
set format y '%g'
set title 'gradient norm'
plot $(plot_or_empty norm 'norm' 'lines' alone)
set title 'throughput (tokens/s)'
plot $(plot_or_empty tok_per_s 'tok/s' 'lines' alone)
$(if [ $has_phases = 1 ]; then cat <<PHASES
set title 'phase breakdown (ms, slowest rank per phase)'
set style fill solid 0.85 noborder
set key top left horizontal maxrows 3 samplen 1.5 opaque
set offsets 0, 0, graph 0.3, 0
set yrange [0:*]
plot $(phase_bands)
set key default
set offsets 0, 0, 0, 0
set autoscale y
PHASES
fi)
$(if [ $has_phases = 1 ] && [ $has_comm = 1 ]; then cat <<COMM
set title 'communication bus bandwidth (GB/s)'
set key bottom right
set yrange [0:*]
plot $(comm_lines)
COMM
fi)
unset multiplot
GNUPLOT
mv "$tmp_png" "$png"
panels=""
if [ $has_phases = 1 ] && [ $has_comm = 1 ]; then panels=" (with the phase breakdown and the collectives' bus bandwidth)"
elif [ $has_phases = 1 ]; then panels=" (with the phase breakdown)"; fi
echo "wrote $png: $title$panels"
