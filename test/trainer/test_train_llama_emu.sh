#!/usr/bin/env bash
# Llama 3 on the CUDA trainer, end to end: train_gpt.cu with the GPU model's Llama layers
# (gpu/llama_layers.h) built through the emulator (./train_gpt_emu, bf16; ./train_gpt_emu_fp32) trains
# a tiny Llama 3 for six steps on the same tokens, seed and flags as the fp32 CPU reference trainer
# (./train_gpt_cpu) and tracks its losses (bf16 within 2e-3, fp32 within 1e-5: each step's loss from
# the run's metrics.jsonl, the largest difference printed), and samples at steps 3 and 6 through the
# GPU model's key/value cache (gpu/llama_decode.h) that are the CPU trainer's (through its CPU
# decoder) token for token in fp32, and whole in bf16; a checkpoint resumes bit for bit; two
# ranks with ZeRO 1, 2 and 3 give one rank's losses and gradient norms exactly; --dry-run plans the
# memory and traffic those runs report; -tp 2 and -pp 2 are refused in one line. With BUILD naming a sanitized build it runs the bf16 trainer only
# (the Makefile runs it in the plain build, with the other multi-rank tests).
set -u
bin=${BIN:-.}
trainers="train_gpt_emu train_gpt_emu_fp32"
case "${BUILD:-build}" in *san*) trainers="train_gpt_emu" ;; esac
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 6,000 tokens below 256 (perl: in every Debian), in llm.c's shard format.
shard=$work/tokens.bin
perl -e 'srand(3); my $n = 6000; print pack("l<256", 20240520, 1, $n, (0) x 253);
         print pack("S<", int(rand(256))) for 1 .. $n;' >"$shard"
# A decode table whose token i prints as two hex digits, its EOT slot (where samples start) 255.
table=$work/table.bin
perl -e 'print pack("l<256", 20240328, 2, 256, 255, (0) x 252); print pack("C", 2), sprintf("%02x", $_) for 0 .. 255;' >"$table"
samples="-s 3 -g 16 --tokenizer $table"
model=llama3:L2:C64:H4:KV2:F128:T32:V256
common="-e $model -i $shard -b 2 -t 32 -x 6 -v 0 -s 0 -l 1e-3 -u 1 -c 0.1 --seed 5 -n 0"

status=0
pass() { echo "PASS $1"; }
failed() { echo "FAIL $1"; status=1; }

# run NAME RANKS TRAINER FLAGS...: its step lines' loss and norm into $work/NAME.steps, each step's
# loss from metrics.jsonl (6 digits) into $work/NAME.losses.
run() {
    local name=$1 ranks=$2 trainer=$3 launcher=()
    shift 3
    [ "$ranks" -gt 0 ] && launcher=(mpirun --oversubscribe -np "$ranks")
    # shellcheck disable=SC2086 # the flags are words
    if ! timeout 600 "${launcher[@]}" "$bin/$trainer" $common -o "$work/$name" "$@" >"$work/$name.log" 2>&1; then
        sed 's/^/   | /' "$work/$name.log" | tail -n 20
        return 1
    fi
    grep -E '^step [0-9]+/' "$work/$name.log" | awk -F' [|] ' '{ print $1, $2, $4 }' >"$work/$name.steps"
    sed -nE 's/^[{]"step":[0-9]+,"loss":([^,]*),.*/\1/p' "$work/$name/metrics.jsonl" >"$work/$name.losses"
    [ "$(wc -l <"$work/$name.steps")" -eq 6 ] && [ "$(wc -l <"$work/$name.losses")" -eq 6 ]
}

# The largest difference between two runs' losses, step by step.
loss_difference() {
    paste -d' ' "$1" "$2" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d } END { printf "%.2g", m + 0 }'
}

# shellcheck disable=SC2086 # the flags are words
run cpu 0 train_gpt_cpu $samples || failed "train_gpt_cpu trains $model"
[ -s "$work/cpu.losses" ] || failed "train_gpt_cpu's metrics.jsonl holds its losses"
grep '^sample: ' "$work/cpu.log" >"$work/cpu.samples"
for trainer in $trainers; do
    tolerance=2e-3
    [ "$trainer" = train_gpt_emu_fp32 ] && tolerance=1e-5
    # shellcheck disable=SC2086 # the flags are words
    if run "$trainer" 0 "$trainer" $samples; then
        # Samples through the key/value cache: two of 16 tokens (32 hex digits); in fp32 the CPU's.
        grep '^sample: ' "$work/$trainer.log" >"$work/$trainer.samples"
        if [ "$(grep -cE '^sample: [0-9a-f]{32}$' "$work/$trainer.samples")" -eq 2 ] &&
            { [ "$trainer" != train_gpt_emu_fp32 ] || cmp -s "$work/$trainer.samples" "$work/cpu.samples"; }; then
            pass "$trainer samples $model through its key/value cache"
        else
            paste -d' ' "$work/$trainer.samples" "$work/cpu.samples" | sed 's/^/   | /'
            failed "$trainer samples $model through its key/value cache"
        fi
        d=$(loss_difference "$work/$trainer.losses" "$work/cpu.losses")
        echo "  $trainer against train_gpt_cpu: largest loss difference over 6 steps $d (tolerance $tolerance)"
        if awk -v d="$d" -v t="$tolerance" 'BEGIN { exit !(d <= t) }'; then
            pass "$trainer tracks train_gpt_cpu on $model"
        else
            paste -d' ' "$work/$trainer.losses" "$work/cpu.losses" | sed 's/^/   | /'
            failed "$trainer tracks train_gpt_cpu on $model"
        fi
    else
        failed "$trainer trains $model"
    fi
done

# Data parallelism: two ranks (one micro-batch each, the same tokens per step) against one (two
# micro-batches accumulated).
run one_rank_d128 0 train_gpt_emu -d 128 || failed "one rank with -d 128"
for z in 1 2 3; do
    if run "z$z" 2 train_gpt_emu -z "$z" -d 128 && cmp -s "$work/z$z.steps" "$work/one_rank_d128.steps" &&
        cmp -s "$work/z$z.losses" "$work/one_rank_d128.losses"; then
        pass "2 ranks -z $z give one rank's losses and norms"
    else
        diff "$work/z$z.steps" "$work/one_rank_d128.steps" 2>&1 | sed 's/^/   | /' | head -n 12
        failed "2 ranks -z $z give one rank's losses and norms"
    fi
done

# The memory planner (--dry-run, one process, nothing allocated) prints the memory and network lines
# the runs above printed once they had allocated (their figures are the device allocation's, as
# test_gpu_llama checks): one rank, and two ranks with -z 3 (--plan-ranks 2).
dry_run_plans() {
    local what=$1 name=$2
    shift 2
    # shellcheck disable=SC2086 # the flags are words
    if ! timeout 300 "$bin/train_gpt_emu" $common -o "$work/dry_$name" --dry-run 1 "$@" >"$work/dry_$name.log" 2>&1 ||
        ! grep -q "dry run: nothing was allocated" "$work/dry_$name.log" || [ -e "$work/dry_$name" ]; then
        sed 's/^/   | /' "$work/dry_$name.log" | tail -n 8
        failed "--dry-run plans $model ($what)"
        return
    fi
    local prefix planned actual ok=1
    for prefix in memory: network:; do
        planned=$(grep "^$prefix" "$work/dry_$name.log")
        actual=$(grep "^$prefix" "$work/$name.log")
        if [ "$planned" != "$actual" ] || { [ "$prefix" = memory: ] && [ -z "$planned" ]; }; then
            printf '   | planned: %s\n   | the run: %s\n' "$planned" "$actual"
            ok=0
        fi
    done
    grep "^memory:" "$work/dry_$name.log" | sed 's/^/  /'
    if [ $ok = 1 ]; then pass "--dry-run plans what $what allocates"; else failed "--dry-run plans what $what allocates"; fi
}
dry_run_plans "one rank" one_rank_d128 -d 128
dry_run_plans "2 ranks -z 3" z3 -z 3 -d 128 --plan-ranks 2

# Checkpoints: six steps with a checkpoint every two, resumed from step 4 (-y 1, the step-6
# checkpoint's files left out), write the same model file at step 6, byte for byte.
resumed=$work/resumed
if run straight 0 train_gpt_emu -n 2 && mkdir -p "$resumed" &&
    cp "$work"/straight/*0000000[24]* "$work/straight/run.json" "$resumed/" &&
    timeout 600 "$bin/train_gpt_emu" $common -n 2 -o "$resumed" -y 1 >"$work/resumed.log" 2>&1 &&
    grep -q "resumed from step 4" "$work/resumed.log" &&
    cmp -s "$work/straight/model_00000006.bin" "$resumed/model_00000006.bin"; then
    pass "a checkpoint of $model resumes bit for bit"
else
    sed 's/^/   | /' "$work/resumed.log" 2>/dev/null | tail -n 8
    failed "a checkpoint of $model resumes bit for bit"
fi

# What the GPU model does not run for Llama 3 yet: refused, in one line, with a failing status.
refused() {
    local what=$1 ranks=$2
    shift 2
    local launcher=()
    [ "$ranks" -gt 0 ] && launcher=(mpirun --oversubscribe -np "$ranks")
    # shellcheck disable=SC2086 # the flags are words
    if timeout 300 "${launcher[@]}" "$bin/train_gpt_emu" $common -o "$work/refused" "$@" >"$work/refused.log" 2>&1; then
        failed "$what is refused (it ran)"
    elif [ "$(grep -c '^error: ' "$work/refused.log")" -ge 1 ] && grep '^error: ' "$work/refused.log" | head -n 1 | grep -qF -- "$what"; then
        echo "  $(grep -m 1 '^error: ' "$work/refused.log")"
        pass "$what with Llama 3 is refused in one line"
    else
        sed 's/^/   | /' "$work/refused.log" | tail -n 8
        failed "$what with Llama 3 is refused in one line"
    fi
}
refused -tp 2 -tp 2
refused -pp 2 -pp 2
exit $status
