#!/usr/bin/env bash
# Llama 3 on the CUDA trainer, end to end: train_gpt.cu with the GPU model's Llama layers
# (gpu/llama_layers.h) built through the emulator (./train_gpt_emu, bf16; ./train_gpt_emu_fp32) trains
# a tiny Llama 3 for six steps on the same tokens, seed and flags as the fp32 CPU reference trainer
# (./train_gpt_cpu) and tracks its losses (bf16 within 2e-3, fp32 within 1e-5: each step's loss from
# the run's metrics.jsonl, the largest difference printed), and samples at steps 3 and 6 through the
# GPU model's key/value cache (gpu/llama_decode.h) that are the CPU trainer's (through its CPU
# decoder) token for token in fp32, and whole in bf16; a checkpoint resumes bit for bit; two
# ranks with ZeRO 1, 2 and 3 give one rank's losses and gradient norms exactly; --dry-run plans the
# memory and traffic those runs report.
# Model parallelism against one rank (the fp32 trainer, 4 micro-batches a step): -pp 2 gives one
# rank's losses, norms and model file bit for bit (each stage runs its layers' kernels on the same
# values); -tp 2 (with and without sequence parallelism) and the mesh -tp 2 -pp 2 -z 1 give them
# within 1e-5 relative (losses and norms from metrics.jsonl, the final weights by relative L2): the
# tensor group adds the row-parallel products' partial sums and combines the loss from the vocabulary
# slices' statistics in another order than one rank's single sums, which moves fp32 roundings only.
# A -tp 2 checkpoint continues on one rank and a one-rank checkpoint on -tp 2 -pp 2 (the universal
# checkpoint re-cut), each matching the uninterrupted run within the same 1e-5; --dry-run plans what
# -tp 2 and -tp 2 -pp 2 allocate and send; -tp 4 over 2 key/value heads is refused in one line.
# With BUILD naming a sanitized build it runs the bf16 trainer only
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
common="-e $model -i $shard -b 2 -t 32 -x 6 -v 0 -s 0 -l 1e-3 -u 1 -c 0.1 --seed 5 -n 0 --override"  # a run's own flags may replace these

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
    if ! timeout 300 "$bin/${dry_run_trainer:-train_gpt_emu}" $common -o "$work/dry_$name" --dry-run 1 "$@" >"$work/dry_$name.log" 2>&1 ||
        ! grep -q "dry run: nothing was allocated" "$work/dry_$name.log" || [ -e "$work/dry_$name" ]; then
        sed 's/^/   | /' "$work/dry_$name.log" | tail -n 8
        failed "--dry-run plans $model ($what)"
        return
    fi
    local prefix planned actual ok=1
    for prefix in memory: network: pipeline: "stage "; do
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

# ---- Model parallelism: tensor (-tp, with sequence parallelism by default), pipeline (-pp) and their
# mesh against one rank, on the fp32 trainer (the bf16 one in a sanitized build: there the tensor ranks'
# partial products round apart in bf16 and stochastic rounding then draws some weights to the other
# neighbour, so the weights agree to one bf16 step, 4e-3 relative; measured 1.5e-3), 4 micro-batches of
# 2 x 32 a step, a checkpoint every 2 steps.
mp_trainer=train_gpt_emu_fp32 mp_tolerance=1e-5
case "${BUILD:-build}" in *san*) mp_trainer=train_gpt_emu mp_tolerance=4e-3 ;; esac
mp_flags="-d 256 -n 2"

# logged DIR KEY: each step's KEY (loss, norm) from the run's metrics.jsonl, one a line.
logged() { grep '^{"step":' "$1/metrics.jsonl" | sed -nE "s/.*\"$2\":([^,}]*).*/\1/p"; }
# within A B TOLERANCE: the numbers of files A and B (one a line, as many) agree within TOLERANCE
# relative (+ 1e-6: metrics.jsonl's six decimals); the largest difference on stdout.
within() {
    [ -s "$1" ] && [ "$(wc -l <"$1")" -eq "$(wc -l <"$2")" ] || return 1
    paste -d' ' "$1" "$2" | awk -v t="$3" '{ d = $1 - $2; if (d < 0) d = -d; b = $2 < 0 ? -$2 : $2
        if (d > m) m = d; if (d > t * b + 1e-6) bad = 1 } END { printf "%.2g", m + 0; exit bad }'
}
# weight_difference A B: the relative L2 distance of two Llama 3 model files' weights (fp32 or bf16,
# after the 256-slot header; slot 2 holds the bytes per weight).
weight_difference() {
    perl -e 'sub weights { open(my $f, "<:raw", $_[0]) or die "$_[0]: $!\n"; local $/; my $bytes = <$f>;
                           my @header = unpack("l<256", $bytes); my $body = substr($bytes, 1024);
                           return [unpack("f<*", $body)] if $header[2] == 4;
                           return [map { unpack("f<", pack("L<", $_ << 16)) } unpack("v*", $body)]; }
             my ($a, $b) = (weights($ARGV[0]), weights($ARGV[1]));
             die "the files hold different numbers of weights\n" if @$a != @$b;
             my ($d, $n) = (0, 0);
             for my $i (0 .. $#$a) { $d += ($a->[$i] - $b->[$i]) ** 2; $n += $b->[$i] ** 2 }
             printf "%.2g", sqrt($d / ($n || 1));' "$1" "$2"
}
# same_run DIR REFERENCE TOLERANCE: every step's loss and norm, and the step-6 model file, within
# TOLERANCE of the reference run's (exact: the same printed losses and norms, the same bytes).
same_run() {
    local dir=$1 reference=$2 tolerance=$3 key d ok=0
    if [ "$tolerance" = exact ]; then
        cmp -s "$dir.steps" "$reference.steps" && cmp -s "$dir.losses" "$reference.losses" &&
            cmp -s "$dir/model_00000006.bin" "$reference/model_00000006.bin" && echo "  the same bits" && return 0
        diff "$dir.steps" "$reference.steps" | sed 's/^/   | /' | head -n 12
        return 1
    fi
    local report="  largest differences from one rank:"
    for key in loss norm; do
        logged "$dir" $key >"$dir.$key" && logged "$reference" $key >"$reference.$key"
        if ! d=$(within "$dir.$key" "$reference.$key" "$tolerance"); then
            paste -d' ' "$dir.$key" "$reference.$key" | sed "s/^/   | $key: /"
            ok=1
        fi
        report="$report $key $d,"
    done
    d=$(weight_difference "$dir/model_00000006.bin" "$reference/model_00000006.bin") || return 1
    echo "$report weights $d (relative L2; tolerance $tolerance)"
    awk -v d="$d" -v t="$tolerance" 'BEGIN { exit !(d <= t) }' && return $ok
}

if run mp_one 0 "$mp_trainer" $mp_flags; then
    for spec in "-pp 2|2|exact" "-tp 2|2|$mp_tolerance" "-tp 2 -sp 0|2|$mp_tolerance" \
        "-tp 2 -pp 2 -z 1|4|$mp_tolerance"; do
        IFS='|' read -r mesh ranks tolerance <<<"$spec"
        name=mp_$(echo "$mesh" | tr -d ' -')
        # shellcheck disable=SC2086 # the flags are words
        if run "$name" "$ranks" "$mp_trainer" $mp_flags $mesh && same_run "$work/$name" "$work/mp_one" "$tolerance"; then
            pass "$mesh ($ranks ranks) gives one rank's training of $model"
        else
            failed "$mesh ($ranks ranks) gives one rank's training of $model"
        fi
    done
else
    failed "one rank with $mp_flags"
fi

# Checkpoints between meshes: saved at step 2 by SAVED_RANKS with SAVED flags, resumed to step 6 by
# RANKS with RESUMED flags (the checkpoint's tensors re-cut for the new mesh), against the
# uninterrupted one-rank run.
moves() {
    local saved_ranks=$1 saved=$2 ranks=$3 resumed=$4 dir launcher=()
    dir=$work/move_$(echo "$saved $resumed" | tr -d ' -')
    [ "$saved_ranks" -gt 0 ] && launcher=(mpirun --oversubscribe -np "$saved_ranks")
    # shellcheck disable=SC2086 # the flags are words
    timeout 600 "${launcher[@]}" "$bin/$mp_trainer" $common $mp_flags -o "$dir" --stop-at 2 $saved \
        >"$dir.saved.log" 2>&1 || { tail -n 8 "$dir.saved.log" | sed 's/^/   | /'; return 1; }
    launcher=()
    [ "$ranks" -gt 0 ] && launcher=(mpirun --oversubscribe -np "$ranks")
    # shellcheck disable=SC2086 # the flags are words
    timeout 600 "${launcher[@]}" "$bin/$mp_trainer" $common $mp_flags -o "$dir" -y 1 $resumed \
        >"$dir.log" 2>&1 && grep -q "resumed from step 2" "$dir.log" || { tail -n 8 "$dir.log" | sed 's/^/   | /'; return 1; }
    same_run "$dir" "$work/mp_one" "$mp_tolerance"
}
if moves 2 "-tp 2" 0 ""; then pass "a -tp 2 checkpoint continues on one rank"; else failed "a -tp 2 checkpoint continues on one rank"; fi
if moves 0 "" 4 "-tp 2 -pp 2"; then
    pass "a one-rank checkpoint continues on -tp 2 -pp 2"
else
    failed "a one-rank checkpoint continues on -tp 2 -pp 2"
fi

# --dry-run plans what the model-parallel runs above allocated and sent (and the stages' lines).
dry_run_trainer=$mp_trainer
dry_run_plans "-tp 2" mp_tp2 $mp_flags -tp 2 --plan-ranks 2
dry_run_plans "-tp 2 -pp 2 -z 1" mp_tp2pp2z1 $mp_flags -tp 2 -pp 2 -z 1 --plan-ranks 4

# What cannot work: refused, in one line, with a failing status.
refused() {
    local what=$1 ranks=$2 message=$3
    shift 3
    local launcher=()
    [ "$ranks" -gt 0 ] && launcher=(mpirun --oversubscribe -np "$ranks")
    # shellcheck disable=SC2086 # the flags are words
    if timeout 300 "${launcher[@]}" "$bin/train_gpt_emu" $common -o "$work/refused" "$@" >"$work/refused.log" 2>&1; then
        failed "$what is refused (it ran)"
    elif [ "$(grep -c '^error: ' "$work/refused.log")" -ge 1 ] && grep '^error: ' "$work/refused.log" | head -n 1 | grep -qF -- "$message"; then
        echo "  $(grep -m 1 '^error: ' "$work/refused.log")"
        pass "$what is refused in one line"
    else
        sed 's/^/   | /' "$work/refused.log" | tail -n 8
        failed "$what is refused in one line"
    fi
}
refused "-tp 4 over $model's 2 key/value heads" 4 "does not divide the model's 2 key/value heads" -tp 4
exit $status
