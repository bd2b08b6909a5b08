#!/usr/bin/env bash
# Muon against AdamW: the same small GPT-2 on the built-in dataset, the same tokens in the same order,
# each optimizer at its best learning rate of a small grid. AdamW's grid is run first; the Muon runs
# keep AdamW's best -l for the tensors Muon leaves to AdamW (embeddings, norms, biases) and tune
# --muon-lr. Prints one line per run (final validation loss, and the first validated step at or below
# the best AdamW run's final validation loss), the steps each best run needs to reach it, and writes a
# chart of every run's validation loss against steps (muon.png).
#
# Runs on the fp32 CPU trainer (./train_gpt_cpu), the only trainer that runs Muon so far.
#
# Usage: bash dev/muon.sh [OUT_DIR]      (default out/muon)
# Environment: STEPS (default 300), MODEL (default a 6-layer, 128-channel GPT-2 on 64-token
# sequences), ADAMW_LRS and MUON_LRS (the grids, defaults "2.5e-4 5e-4 1e-3" and "0.005 0.01 0.02").
# Needs ./train_gpt_cpu (make train_gpt_cpu), the built-in data (data/janeausten) and gnuplot.
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
out=${1:-out/muon}
steps=${STEPS:-300}
model=${MODEL:-custom:L6:C128:H4:T64}
adamw_lrs=${ADAMW_LRS:-2.5e-4 5e-4 1e-3}
muon_lrs=${MUON_LRS:-0.005 0.01 0.02}
B=8 T=64
val_every=10
[ -x ./train_gpt_cpu ] || { echo "error: ./train_gpt_cpu is missing (make train_gpt_cpu)" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "error: gnuplot is not installed (bash scripts/install_deps.sh)" >&2; exit 1; }
mkdir -p "$out"

# One run into $out/NAME: its flags after the shared ones; writes NAME/val.dat (step, validation loss).
# Warmup over the first 5% of the steps, cosine decay to 10%, no weight decay, validation every
# $val_every steps on 8 batches.
run() {
    local name=$1
    shift
    local dir="$out/$name"
    rm -rf "$dir"
    ./train_gpt_cpu -e "$model" -b $B -t $T -x "$steps" -u $((steps / 20)) -q 0.1 -c 0 -v $val_every -m 8 \
        -s 0 --seed 1 -o "$dir" "$@" >"$dir.log" 2>&1 ||
        { echo "error: run $name failed; see $dir.log" >&2; exit 1; }
    awk '/"val_loss":/ {
            step = $0; sub(/.*"step":/, "", step); sub(/[,}].*/, "", step)
            loss = $0; sub(/.*"val_loss":/, "", loss); sub(/[,}].*/, "", loss)
            print step, loss }' "$dir/metrics.jsonl" >"$dir/val.dat"
}
final_loss() { tail -n1 "$out/$1/val.dat" | cut -d' ' -f2; }
# The first validated step whose loss is at or below $2 ("-" if none).
steps_to() { awk -v target="$2" '$2 <= target { print $1; found = 1; exit } END { if (!found) print "-" }' "$out/$1/val.dat"; }
# The run among "$@" with the lowest final validation loss.
best_of() {
    local best="" best_loss=""
    for name in "$@"; do
        local loss
        loss=$(final_loss "$name")
        if [ -z "$best" ] || awk -v a="$loss" -v b="$best_loss" 'BEGIN { exit !(a < b) }'; then
            best=$name best_loss=$loss
        fi
    done
    echo "$best"
}

started=$(date +%s)
adamw_runs=() muon_runs=()
for lr in $adamw_lrs; do
    run "adamw_lr$lr" -l "$lr"
    adamw_runs+=("adamw_lr$lr")
done
best_adamw=$(best_of "${adamw_runs[@]}")
adamw_l=${best_adamw#adamw_lr}
for lr in $muon_lrs; do
    run "muon_lr$lr" --optimizer muon --muon-lr "$lr" -l "$adamw_l"
    muon_runs+=("muon_lr$lr")
done
best_muon=$(best_of "${muon_runs[@]}")
target=$(final_loss "$best_adamw")

printf 'model %s, B=%d T=%d, %d steps; target: the best AdamW run'"'"'s final validation loss %s\n' \
    "$model" $B $T "$steps" "$target"
printf '%-18s %10s %16s\n' run "val loss" "steps to target"
for name in "${adamw_runs[@]}" "${muon_runs[@]}"; do
    printf '%-18s %10s %16s\n' "$name" "$(final_loss "$name")" "$(steps_to "$name" "$target")"
done
adamw_steps=$(steps_to "$best_adamw" "$target") muon_steps=$(steps_to "$best_muon" "$target")
if [ "$muon_steps" = - ]; then
    echo "best AdamW: $best_adamw, $adamw_steps steps; best Muon: $best_muon does not reach it in $steps steps"
else
    echo "best AdamW: $best_adamw, $adamw_steps steps; best Muon: $best_muon, $muon_steps steps" \
        "($(awk -v m="$muon_steps" -v a="$adamw_steps" 'BEGIN { printf "%.2f", m / a }')x AdamW's)"
fi
echo "wall time: $(( $(date +%s) - started )) s"

series=""
for name in "${adamw_runs[@]}" "${muon_runs[@]}"; do
    width=1
    [ "$name" = "$best_adamw" ] || [ "$name" = "$best_muon" ] && width=3
    color="#1f77b4"
    [ "${name%%_*}" = muon ] && color="#d62728"
    series+="${series:+, }'$out/$name/val.dat' using 1:2 with lines lw $width lc rgb '$color' title '${name/_lr/ lr }'"
done
gnuplot <<GNUPLOT
set terminal png size 1100,650
set output '$out/muon.png'
set title 'validation loss: $model, B=$B T=$T; Muon (red) against AdamW (blue), the best of each thick' noenhanced
set xlabel 'step'
set ylabel 'validation loss'
set yrange [:$(awk -v t="$target" 'BEGIN { print t + 1.5 }')]
set grid
set key top right noenhanced
set arrow from graph 0, first $target to graph 1, first $target nohead dt 2 lc rgb '#555555'
plot $series
GNUPLOT
echo "wrote $out/muon.png"
