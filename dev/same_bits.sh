#!/usr/bin/env bash
# Does a change leave what the trainer computes untouched? Builds the emulated CUDA trainer
# (./train_gpt_emu: the real kernels and the NCCL stand-in over MPI, bf16) at two commits, runs the
# same short trainings with each on a small GPT-2 and a small Llama 3, and compares every step's loss
# and gradient norm and the model file each run writes, byte for byte:
#     1 rank                           2 ranks -z 1, 2 micro-steps      2 ranks -z 3
#     2 ranks -tp 2                    2 ranks -pp 2, 4 micro-batches   8 ranks -tp 2 -pp 2 -z 1
#     2 ranks --grad-compression powersgd (after one plain step)        2 ranks --optimizer lamb -z 1
#
# Usage, from anywhere in the repository:
#     bash dev/same_bits.sh A [B]     A, B: commits (anything git rev-parse takes); B left out: the
#                                     working tree as it is, uncommitted changes included; A and B may
#                                     also be paths of emulated trainers already built (not rebuilt)
# Each commit is built in a worktree of its own under $SAME_BITS_DIR (default $TMPDIR/same_bits),
# kept between calls, so a second comparison against the same commit only runs. Needs what the
# build needs (bash scripts/install_deps.sh) and mpirun. JOBS: make -j (default 2).
# Exit status: 0 every run the same at both commits; 1 a difference (listed); 2 a build or run failed.
set -uo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)" || exit 2
repo=$(pwd)
[ $# -ge 1 ] && [ $# -le 2 ] || { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
work=${SAME_BITS_DIR:-${TMPDIR:-/tmp}/same_bits}
jobs=${JOBS:-2}
mkdir -p "$work" || exit 2

# The runs: name, ranks (0: a plain process), flags added to the common ones.
runs=(
    "one_rank|0|"
    "two_ranks_z1_accumulation|2|-z 1 -d 256"
    "two_ranks_z3|2|-z 3"
    "tensor_parallel_2|2|-tp 2"
    "pipeline_parallel_2|2|-pp 2 -d 256"
    "mesh_2x2x2|8|-tp 2 -pp 2 -z 1"
    "powersgd|2|--grad-compression powersgd --compression-start 1 -d 256"
    "lamb_z1|2|--optimizer lamb -l 1e-2 -z 1"
)
models=(gpt2=custom:L4:C64:H4:V512:T64 llama3=llama3:L4:C64:H4:KV2:F128:T64:V512)
common="-b 2 -t 32 -x 3 -v 0 -s 0 -l 2e-4 -u 1 -c 0.1 --seed 5 -n 3"

# A token shard of 20,000 tokens below 512, the same file for both commits (perl: in every Debian).
shard=$work/tokens.bin
if [ ! -s "$shard" ]; then
    perl -e 'srand(7); my $n = 20000; print pack("l<256", 20240520, 1, $n, (0) x 253);
             print pack("S<", int(rand(512))) for 1 .. $n;' >"$shard" || exit 2
fi

# build REF: the trainer of REF (or of the working tree for "worktree"), its path on stdout.
build() {
    local ref=$1 dir
    if [ "$ref" = worktree ]; then
        dir=$repo
    else
        dir=$work/tree_$(git rev-parse --short=12 "$ref^{commit}") || return 1
        if [ ! -d "$dir" ]; then
            git worktree add --detach "$dir" "$ref" >/dev/null 2>&1 || { echo "cannot check out $ref" >&2; return 1; }
        fi
    fi
    local log=$work/build_${dir##*/}.log
    echo "building ./train_gpt_emu at $ref in $dir (log: $log)" >&2
    make -C "$dir" -j"$jobs" train_gpt_emu >"$log" 2>&1 || {
        echo "the build at $ref failed: see $log" >&2
        return 1
    }
    echo "$dir/train_gpt_emu"
}

# run_all TRAINER OUT: every run of every model into OUT/MODEL_NAME/ (the run's folder, its output,
# its step lines). A run's own flags come after the common ones (a later -l replaces the common one).
run_all() {
    local trainer=$1 out=$2 spec name ranks flags launcher family model
    rm -rf "$out" && mkdir -p "$out" || return 1
    for family in "${models[@]}"; do
        model=${family#*=}
        for spec in "${runs[@]}"; do
            IFS='|' read -r name ranks flags <<<"$spec"
            name=${family%%=*}_$name
            launcher=()
            [ "$ranks" -gt 0 ] && launcher=(mpirun --oversubscribe -np "$ranks")
            # shellcheck disable=SC2086 # the flags are words
            if ! OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 600 \
                "${launcher[@]}" "$trainer" -e "$model" $common -i "$shard" -o "$out/$name" --override $flags \
                >"$out/$name.log" 2>&1; then
                echo "run $name failed: see $out/$name.log" >&2
                return 1
            fi
            # Each step's loss and norm, as printed (the fields before the timings).
            grep -E '^step [0-9]+/' "$out/$name.log" | awk -F' [|] ' '{ print $1, $2, $4 }' >"$out/$name.steps"
        done
    done
}

# built PATH: PATH where it is an executable file, made absolute (a trainer already built).
built() { [ -f "$1" ] && [ -x "$1" ] && echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }

if trainer_a=$(built "$1"); then
    label_a=$1
else
    label_a=$(git rev-parse --short "$1^{commit}") || exit 2
    trainer_a=$(build "$1") || exit 2
fi
if [ $# -eq 2 ] && trainer_b=$(built "$2"); then
    label_b=$2
else
    label_b=${2:+$(git rev-parse --short "$2^{commit}")}
    label_b=${label_b:-worktree}
    trainer_b=$(build "${2:-worktree}") || exit 2
fi
total=$((${#runs[@]} * ${#models[@]}))
echo "running $total trainings at $label_a, then at $label_b" >&2
run_all "$trainer_a" "$work/runs_a" || exit 2
run_all "$trainer_b" "$work/runs_b" || exit 2

status=0
printf '%-28s %-22s %s\n' run "losses and norms" "model file"
for family in "${models[@]}"; do
    for spec in "${runs[@]}"; do
        IFS='|' read -r name _ _ <<<"$spec"
        name=${family%%=*}_$name
        steps=same model=same
        if [ ! -s "$work/runs_a/$name.steps" ] || ! cmp -s "$work/runs_a/$name.steps" "$work/runs_b/$name.steps"; then
            steps=DIFFERENT status=1
        fi
        file=$(cd "$work/runs_a/$name" && ls model_*.bin 2>/dev/null | tail -n 1)
        if [ -z "$file" ] || ! cmp -s "$work/runs_a/$name/$file" "$work/runs_b/$name/$file"; then
            model=DIFFERENT status=1
        fi
        printf '%-28s %-22s %s\n' "$name" "$steps" "$model${file:+ ($file)}"
        [ "$steps" = same ] || diff "$work/runs_a/$name.steps" "$work/runs_b/$name.steps" | sed 's/^/    /' | head -n 8
    done
done
if [ $status -eq 0 ]; then
    echo "same bits: $label_a and $label_b train alike in all $total runs"
else
    echo "NOT the same bits: $label_a and $label_b differ (runs in $work/runs_a and $work/runs_b)"
fi
exit $status
