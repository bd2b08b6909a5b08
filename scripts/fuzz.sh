#!/usr/bin/env bash
# Fuzzes every file parser and the command line with libFuzzer:
#   bash scripts/fuzz.sh SECONDS [TARGET...]      e.g. bash scripts/fuzz.sh 60
# Builds one target per parser (test/fuzz/fuzz_*.cpp: model file fp32/bf16, training state, token
# shard, tokenizer decode table, encoder.json + vocab.bpe, run.json, HellaSwag eval file, command line,
# safetensors header, Hugging Face config.json)
# with clang under AddressSanitizer and UndefinedBehaviorSanitizer (test/fuzz/fuzz.mk, into
# build-fuzz/), then runs each for SECONDS from its committed seeds (test/fuzz/corpus/<target>/: valid
# files and known-bad ones) plus what earlier runs found (build-fuzz/corpus/<target>/). An input that
# crashes, leaks, hangs (10 s), allocates 64 MiB at once or gets a refusal other than a one-line error
# is kept under fuzz-crashes/<target>/; reproduce it with build-fuzz/fuzz_<target> FILE.
# Ends with "fuzz: N targets, M executions, K crashes"; exits non-zero on any crash, 2 when clang's
# libFuzzer is missing (scripts/install_deps.sh installs it).
set -uo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 1 ] || ! [[ "$1" =~ ^[0-9]+$ ]] || [ "$1" -lt 1 ]; then
    echo "usage: bash scripts/fuzz.sh SECONDS [TARGET...]   (targets: $(ls test/fuzz/fuzz_*.cpp | sed 's|.*/fuzz_||; s|\.cpp||' | tr '\n' ' '))" >&2
    exit 2
fi
seconds=$1
shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=($(ls test/fuzz/fuzz_*.cpp | sed 's|.*/fuzz_||; s|\.cpp||'))

# clang with libFuzzer: compile and link an empty target.
probe=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)  # scratch files: memory where possible
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/p.cpp"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" 2>"$probe/err"; then
    echo "fuzz: clang++ with libFuzzer is missing (bash scripts/install_deps.sh installs clang and libclang-rt-dev)"
    sed 's/^/  | /' "$probe/err" | head -5
    exit 2
fi

echo "fuzz: building ${#targets[@]} targets (clang, ASan + UBSan, libFuzzer) into build-fuzz/"
if ! make -s -f test/fuzz/fuzz.mk -j"${FUZZ_JOBS:-2}" $(printf 'build-fuzz/fuzz_%s ' "${targets[@]}") \
        >build-fuzz.log 2>&1; then
    tail -n 30 build-fuzz.log
    echo "fuzz: build failed (build-fuzz.log)"
    exit 1
fi
rm -f build-fuzz.log

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export FUZZ_SCRATCH=$probe
total_runs=0 total_crashes=0
for t in "${targets[@]}"; do
    corpus=build-fuzz/corpus/$t crashes=fuzz-crashes/$t log=build-fuzz/logs/$t.log
    mkdir -p "$corpus" "$crashes" build-fuzz/logs
    before=$(ls "$crashes" | wc -l)
    # -close_fd_mask=1: the targets' stdout (the flags' --help) is noise here.
    # No input of at most 8 KiB should need a single allocation of 64 MiB: a parser that sizes a
    # buffer from a header before checking it against the file is a finding.
    build-fuzz/fuzz_"$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -malloc_limit_mb=64 -max_len=8192 -close_fd_mask=1 -print_final_stats=1 \
        -artifact_prefix="$crashes/" "$corpus" "test/fuzz/corpus/$t" >"$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
    runs=${runs:-0}
    found=$(( $(ls "$crashes" | wc -l) - before ))
    [ "$rc" -ne 0 ] && [ "$found" -eq 0 ] && found=1  # died without leaving an input: count it
    total_runs=$((total_runs + runs)) total_crashes=$((total_crashes + found))
    printf 'fuzz_%s: %d executions, %d crashes\n' "$t" "$runs" "$found"
    if [ "$found" -gt 0 ]; then
        grep -E 'ERROR|SUMMARY|fuzz:|runtime error|Test unit written' "$log" | head -n 8 | sed 's/^/  | /'
        echo "  | log: $log; inputs: $crashes/"
    fi
done
echo "fuzz: ${#targets[@]} targets, $total_runs executions, $total_crashes crashes"
[ "$total_crashes" -eq 0 ]
