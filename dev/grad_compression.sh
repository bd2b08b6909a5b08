#!/usr/bin/env bash
# Gradient compression against convergence: the same model trained on the same tokens, from the same
# seed, on RANKS data-parallel ranks, once per method (--grad-compression none, PowerSGD of rank 1, 4
# and 16, int8, sign), with the validation loss every VAL_EVERY steps and the bytes each step sent
# (metrics.jsonl's sent_bytes: what rank 0 sent to the others). Prints a table (the final validation
# loss, its gap to the uncompressed run, the MiB a rank sends per compressed step and in the whole
# run) for dev/RESULTS.md, and draws $OUT/grad_compression.png: validation loss against the step and
# against the MiB sent so far (log scale), one line per method.
#
# By default it runs the emulated CUDA trainer (./train_gpt_emu: the real kernels on the CPU, the NCCL
# stand-in over MPI) on a small model, so it needs no GPU. The built-in text (Jane Austen, GPT-2
# tokens) is remapped to the model's vocabulary when that is smaller than GPT-2's: the V - 1 most
# frequent training tokens keep a number of their own, every other token becomes V - 1, so that a small
# model learns in a few hundred steps. With MODEL=gpt2:d12 (GPT-2 small's shapes, GPT-2's vocabulary:
# no remapping), or any other descriptor that is not custom:, the defaults become those of a run on
# RANKS GPUs of one machine: the CUDA trainer ./train_gpt, B=8, T=1024, 100 steps.
# The defaults take roughly an hour on two CPU cores, most of it PowerSGD of rank 16 (the emulator
# runs its orthogonalisation, one block of 1024 threads per matrix, slowly); METHODS picks fewer arms.
# The bytes are those of every collective of the step (under -z 1 also the updated weights' gather).
#
# Usage: bash dev/grad_compression.sh
# Environment (defaults for the small model, then for gpt2:d12):
#   MODEL              model descriptor (custom:L2:C64:H2:V1024:T32)
#   STEPS              optimizer steps per run (240; 100)
#   B, T               sequences per rank and micro-step, and their length (4, 32; 8, 1024)
#   LR                 peak learning rate, cosine to 10% after STEPS/24 warmup steps (3e-3; 6e-4)
#   COMPRESSION_START  plain steps before compression begins (10)
#   ZERO               -z: 0 (all-reduce) or 1 (optimizer state sharded) (0)
#   RANKS              data-parallel ranks, MPI processes (4)
#   VAL_EVERY          steps between validations (STEPS/12); VAL_BATCHES batches each (8)
#   TRAINER            the trainer (./train_gpt_emu; ./train_gpt)
#   METHODS            the arms, space-separated: none, powersgd:R, int8, sign
#                      (none powersgd:1 powersgd:4 powersgd:16 int8 sign)
#   SEED               initial weights and data order (1)
#   OUT                output folder: a run folder and log per arm, the chart (out/grad_compression)
#   REUSE              1: keep the arms OUT already holds (their val.dat and bytes.dat), run the rest (0)
# Needs the trainer (make train_gpt_emu, or make train_gpt on a GPU machine), mpirun, python3 (the
# remapping of the tokens) and gnuplot (bash scripts/install_deps.sh).
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"

model=${MODEL:-custom:L2:C64:H2:V1024:T32}
# The vocabulary the model's descriptor names (GPT-2's unless a custom model says V).
vocab=50257
if [[ $model =~ ^custom:.*:V([0-9]+)(:|$) ]]; then vocab=${BASH_REMATCH[1]}; fi
if [[ $model == custom:* ]]; then  # a small model, emulated
  steps=${STEPS:-240} B=${B:-4} T=${T:-32} lr=${LR:-3e-3} trainer=${TRAINER:-./train_gpt_emu}
else                              # GPT-2's (or GPT-3's) shapes, on GPUs
  steps=${STEPS:-100} B=${B:-8} T=${T:-1024} lr=${LR:-6e-4} trainer=${TRAINER:-./train_gpt}
fi
start=${COMPRESSION_START:-10}
zero=${ZERO:-0}
ranks=${RANKS:-4}
val_every=${VAL_EVERY:-$((steps / 12 > 0 ? steps / 12 : 1))}
val_batches=${VAL_BATCHES:-8}
methods=${METHODS:-none powersgd:1 powersgd:4 powersgd:16 int8 sign}
seed=${SEED:-1}
out=${OUT:-out/grad_compression}
warmup=$((steps / 24 > 0 ? steps / 24 : 1))

fail() { echo "error: $*" >&2; exit 1; }
[ -x "$trainer" ] || fail "$trainer is missing (make $(basename "$trainer"))"
command -v mpirun >/dev/null || fail "mpirun is not installed (bash scripts/install_deps.sh)"
command -v gnuplot >/dev/null || fail "gnuplot is not installed (bash scripts/install_deps.sh)"
help=$("$trainer" --help 2>&1 || true)
for arm in $methods; do
  case $arm in
    none | int8 | sign) ;;
    powersgd:[1-9] | powersgd:[1-9][0-9]) ;;
    *) fail "METHODS: unknown arm '$arm' (none, powersgd:R, int8, sign)" ;;
  esac
  [ "$arm" = none ] || [[ $help == *--grad-compression* ]] || fail "$trainer has no --grad-compression flag (rebuild it)"
done
mkdir -p "$out"

# The built-in text, remapped to the model's vocabulary where it is smaller than GPT-2's.
train=data/janeausten/janeausten_train.bin val=data/janeausten/janeausten_val.bin
[ -r "$train" ] && [ -r "$val" ] || data/prepare janeausten >/dev/null ||
  fail "could not prepare the built-in text (data/prepare janeausten)"
if [ "$vocab" -lt 50257 ]; then
  command -v python3 >/dev/null || fail "python3 is needed to remap the tokens to $vocab"
  python3 - "$vocab" "$train" "$val" "$out/train.bin" "$out/val.bin" <<'PYTHON'
# A token shard: a 1024-byte header (256 int32: magic, version, token count, ...), then uint16 tokens.
import array, collections, sys
vocab = int(sys.argv[1])
def read(path):
    data = open(path, "rb").read()
    return data[:1024], array.array("H", data[1024:])
train_header, train = read(sys.argv[2])
val_header, val = read(sys.argv[3])
counts = collections.Counter(train)
# the most frequent first; ties by token number, so the mapping is the same on every machine
kept = sorted(counts, key=lambda t: (-counts[t], t))[:vocab - 1]
mapping = {t: i for i, t in enumerate(kept)}
for header, tokens, path in ((train_header, train, sys.argv[4]), (val_header, val, sys.argv[5])):
    with open(path, "wb") as f:
        f.write(header)
        f.write(array.array("H", (mapping.get(t, vocab - 1) for t in tokens)).tobytes())
PYTHON
  train=$out/train.bin val=$out/val.bin
fi

# The folder name of an arm ("powersgd:4" -> powersgd_r4), and its name in the table and the chart.
arm_name() { case $1 in powersgd:*) echo "powersgd_r${1#powersgd:}" ;; *) echo "$1" ;; esac; }
arm_label() { case $1 in powersgd:*) echo "powersgd r=${1#powersgd:}" ;; *) echo "$1" ;; esac; }

# One arm: the training run, then val.dat ("step val_loss MiB-sent-so-far", one line per validation)
# and bytes.dat ("MiB per compressed step" "MiB in all", or "- -" where the log has no sent_bytes).
run_arm() {
  local arm=$1 dir="$out/$(arm_name "$1")" flags=()
  case $arm in
    none) ;;  # the plain exchange: no compression flag at all, so any build of the trainer runs it
    powersgd:*) flags=(--grad-compression powersgd --powersgd-rank "${arm#powersgd:}" --compression-start "$start") ;;
    *) flags=(--grad-compression "$arm" --compression-start "$start") ;;
  esac
  if [ "${REUSE:-0}" = 1 ] && [ -s "$dir/val.dat" ] && [ -s "$dir/bytes.dat" ]; then
    echo "  $arm: kept from $dir" >&2
    return
  fi
  rm -rf "$dir"
  local began=$SECONDS
  OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun --oversubscribe -np "$ranks" "$trainer" -e "$model" -i "$train" -j "$val" -b "$B" -t "$T" \
    -d $((B * T * ranks)) -x "$steps" -l "$lr" -u "$warmup" -q 0.1 -c 0.1 -v "$val_every" -m "$val_batches" \
    -s 0 --seed "$seed" -z "$zero" -o "$dir" "${flags[@]}" >"$dir.log" 2>&1 ||
    fail "the $arm run failed; see $dir.log"
  echo "  $arm: $((SECONDS - began)) s" >&2
  # (nested objects, the phase timers', are replaced by null first: their keys are not the line's)
  awk -v start="$start" '
    function field(key,    v) {
      if (index($0, "\"" key "\":") == 0) return ""
      v = $0; sub(".*\"" key "\":", "", v); sub(/[,}].*/, "", v); return v }
    { while (match($0, /:[ ]*[{][^{}]*[}]/)) $0 = substr($0, 1, RSTART) "null" substr($0, RSTART + RLENGTH)
      step = field("step"); sent = field("sent_bytes")
      if (sent != "" && sent != "null") {
        seen = 1; total += sent
        if (step + 0 > start) { compressed += sent; count++ } }
      loss = field("val_loss")
      if (loss != "" && loss != "null") printf "%s %s %.6f\n", step, loss, total / 1048576 > val_dat }
    END {
      if (!seen) print "- -" > bytes_dat
      else printf "%.4f %.4f\n", count ? compressed / count / 1048576 : 0, total / 1048576 > bytes_dat }
  ' val_dat="$dir/val.dat" bytes_dat="$dir/bytes.dat" "$dir/metrics.jsonl"
  [ -s "$dir/val.dat" ] || fail "the $arm run logged no validation loss; see $dir/metrics.jsonl"
}

echo "$model, $ranks ranks, -z $zero, $steps steps of $((B * T * ranks)) tokens, lr $lr," \
  "compression from step $((start + 1)) ($trainer)" >&2
for arm in $methods; do run_arm "$arm"; done

# The table: final validation loss, its gap to none's, MiB per rank per compressed step, MiB in all.
none_loss=""
[ -r "$out/none/val.dat" ] && none_loss=$(tail -n1 "$out/none/val.dat" | cut -d' ' -f2)
echo "$model, $ranks ranks, -z $zero, $steps steps of $((B * T * ranks)) tokens, compression from step $((start + 1))"
printf '%-13s %10s %9s %16s %12s\n' method "val loss" "vs none" "MiB/step/rank" "MiB in all"
for arm in $methods; do
  dir="$out/$(arm_name "$arm")"
  loss=$(tail -n1 "$dir/val.dat" | cut -d' ' -f2)
  read -r per_step total <"$dir/bytes.dat"
  gap=-
  [ -n "$none_loss" ] && gap=$(awk -v a="$loss" -v b="$none_loss" 'BEGIN { printf "%+.2f%%", 100 * (a - b) / b }')
  printf '%-13s %10.4f %9s %16s %12s\n' "$(arm_label "$arm")" "$loss" "$gap" "$per_step" "$total"
done

# The chart: validation loss against the step, and against the MiB sent so far (where logged).
by_step="" by_bytes=""
for arm in $methods; do
  dir="$out/$(arm_name "$arm")" label=$(arm_label "$arm")
  by_step+="${by_step:+, }'$dir/val.dat' using 1:2 with linespoints lw 2 title '$label'"
  [ "$(cut -d' ' -f1 "$dir/bytes.dat")" != - ] &&
    by_bytes+="${by_bytes:+, }'$dir/val.dat' using (\$3 > 0 ? \$3 : 1/0):2 with linespoints lw 2 title '$label'"
done
panels=1
[ -n "$by_bytes" ] && panels=2
gnuplot <<GNUPLOT
set terminal png size $((650 * panels)),600
set output '$out/grad_compression.png'
set multiplot layout 1,$panels title 'gradient compression: $model, $ranks ranks, -z $zero, compression from step $((start + 1))' noenhanced
set grid
set key top right noenhanced
set ylabel 'validation loss'
set xlabel 'step'
plot $by_step
$(if [ $panels = 2 ]; then
    printf '%s\n' "set xlabel 'MiB sent by a rank so far (log scale)'" "set logscale x" "plot $by_bytes"
  fi)
unset multiplot
GNUPLOT
echo "wrote $out/grad_compression.png" >&2
