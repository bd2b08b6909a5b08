#!/usr/bin/env bash
# The suite's short fuzzing run: every parser's fuzzer (scripts/fuzz.sh) for FUZZ_SECONDS each
# (default 3), from the committed seeds. PASS when no input crashes; SKIPPED where clang's libFuzzer
# is missing. Longer runs: bash scripts/fuzz.sh 60.
set -u
cd "$(dirname "$0")/../.."
out=$(bash scripts/fuzz.sh "${FUZZ_SECONDS:-3}" 2>&1)
rc=$?
echo "$out"
last=$(echo "$out" | tail -n 1)
if [ $rc -eq 2 ]; then
    echo "SKIPPED fuzz_parsers (clang++ with libFuzzer is missing: bash scripts/install_deps.sh)"
elif [ $rc -eq 0 ]; then
    echo "PASS fuzz_parsers ($last)"
else
    echo "FAIL fuzz_parsers: $last (inputs under fuzz-crashes/)"
    exit 1
fi
