#!/usr/bin/env bash
# Large batches with AdamW and with LAMB: the same small model trained on the same tokens at 1×, 8× and
# 32× a base batch, each optimizer with its learning rate scaled by the square root of the batch
# (--lr-scaling sqrt --base-batch), validation loss against tokens seen. Writes one run folder per
# (optimizer, batch), a table of the final validation losses (standard output, for dev/RESULTS.md) and
# a chart (large_batch.png) of validation loss against tokens.
#
# Runs on the fp32 CPU trainer (./train_gpt_cpu: the reference every other path is tested against),
# so it needs no GPU; the trainer's --optimizer, --lr-scaling and --base-batch are the same on a GPU.
#
# Usage: bash dev/large_batch.sh [OUT_DIR]      (default out/large_batch)
# Environment: TOKENS (the token budget of every run, default 393216), MODEL (default a 4-layer,
# 64-channel GPT-2 on 32-token sequences), ADAMW_LR and LAMB_LR (the base batch's rates, defaults 1e-3 and 4e-3).
# Needs ./train_gpt_cpu (make train_gpt_cpu), the built-in data (data/janeausten) and gnuplot.
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
out=${1:-out/large_batch}
tokens=${TOKENS:-393216}
model=${MODEL:-custom:L4:C64:H4:V50304:T32}
adamw_lr=${ADAMW_LR:-1e-3}
lamb_lr=${LAMB_LR:-4e-3}
B=4 T=32
base=$((B * T))  # tokens per step at 1×: one batch of B sequences of T
[ -x ./train_gpt_cpu ] || { echo "error: ./train_gpt_cpu is missing (make train_gpt_cpu)" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "error: gnuplot is not installed (bash scripts/install_deps.sh)" >&2; exit 1; }
mkdir -p "$out"

# One run: optimizer, batch multiple. Validation every 1/16 of the budget, on 8 batches; warmup the
# first 1/20 of the steps; cosine decay to 10% over the budget.
run() {
    local optimizer=$1 multiple=$2 lr=$3
    local per_step=$((base * multiple))
    local steps=$((tokens / per_step))
    local dir="$out/${optimizer}_${multiple}x"
    rm -rf "$dir"
    ./train_gpt_cpu -e "$model" -b $B -t $T -d $per_step -x $steps -l "$lr" --optimizer "$optimizer" \
        --lr-scaling sqrt --base-batch $base -u $((steps / 20 > 0 ? steps / 20 : 1)) -q 0.1 -c 0.1 \
        -v $((steps / 16 > 0 ? steps / 16 : 1)) -m 8 -s 0 --seed 1 -o "$dir" >"$dir.log" 2>&1 ||
        { echo "error: the $optimizer run at ${multiple}x failed; see $dir.log" >&2; exit 1; }
    # tokens seen and validation loss, one line per validation
    awk -v per_step=$per_step '/"val_loss":/ {
            step = $0; sub(/.*"step":/, "", step); sub(/[,}].*/, "", step)
            loss = $0; sub(/.*"val_loss":/, "", loss); sub(/[,}].*/, "", loss)
            print step * per_step, loss }' "$dir/metrics.jsonl" >"$dir/val.dat"
}

printf '%-8s %6s %12s %10s %14s %10s\n' optimizer batch tokens/step steps "peak lr" "val loss"
for optimizer in adamw lamb; do
    lr=$adamw_lr
    [ "$optimizer" = lamb ] && lr=$lamb_lr
    for multiple in 1 8 32; do
        run "$optimizer" "$multiple" "$lr"
        dir="$out/${optimizer}_${multiple}x"
        peak=$(awk '/"lr":/ { v = $0; sub(/.*"lr":/, "", v); sub(/[,}].*/, "", v); if (v + 0 > max) max = v + 0 }
                    END { printf "%.3e", max }' "$dir/metrics.jsonl")
        printf '%-8s %5sx %12d %10d %14s %10s\n' "$optimizer" "$multiple" $((base * multiple)) \
            $((tokens / (base * multiple))) "$peak" "$(tail -n1 "$dir/val.dat" | cut -d' ' -f2)"
    done
done

series=""
for optimizer in adamw lamb; do
    for multiple in 1 8 32; do
        series+="${series:+, }'$out/${optimizer}_${multiple}x/val.dat' using 1:2 with lines lw 2 title '$optimizer ${multiple}x'"
    done
done
gnuplot <<GNUPLOT
set terminal png size 1100,650
set output '$out/large_batch.png'
set title 'validation loss: $model, base batch $base tokens, learning rates scaled by sqrt(batch)' noenhanced
set xlabel 'tokens seen'
set ylabel 'validation loss'
set grid
set key top right
plot $series
GNUPLOT
echo "wrote $out/large_batch.png"
