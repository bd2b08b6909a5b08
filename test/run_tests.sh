#!/usr/bin/env bash
# Runs each test program or script given on the command line and totals their result lines.
# A program prints "PASS name", "FAIL name: why" or "SKIPPED name (why)" per test; one that exits
# non-zero without printing a FAIL line (a crash, a sanitizer report, a timeout) counts as one failure.
# Scripts (*.sh) run under bash. $BIN says where the programs under test live (see Makefile).
# Those named in $QUEUED_STREAMS_TESTS run with the emulator's streams queued: EMU_STREAMS set to
# $QUEUED_STREAMS_SEED (default 1; see emu/README.md).
set -u
export BIN="${BIN:-.}" BUILD="${BUILD:-build}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
per_program_limit="${TEST_TIMEOUT:-900}"
passed=0 failed=0 skipped=0
failures=()
log=$(mktemp)
for t in "$@"; do
  start=$(date +%s.%N)
  if [[ "$t" == *.sh ]]; then cmd=(bash "$t"); else cmd=("./$t"); fi
  if [[ " ${QUEUED_STREAMS_TESTS:-} " == *" $t "* ]]; then cmd=(env "EMU_STREAMS=${QUEUED_STREAMS_SEED:-1}" "${cmd[@]}"); fi
  timeout "$per_program_limit" "${cmd[@]}" >"$log" 2>&1
  rc=$?
  p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^SKIPPED ' "$log")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1
    echo "FAIL $t: exited with status $rc$( [ "$rc" -eq 124 ] && echo " (timed out after ${per_program_limit}s)")" >>"$log"
  fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  secs=$(printf '%.1f' "$(echo "$(date +%s.%N) - $start" | bc)")
  queued=$([ "${cmd[0]}" = env ] && echo ", streams queued")
  printf '== %s: %d passed, %d failed, %d skipped (%ss%s)\n' "$t" "$p" "$f" "$s" "$secs" "$queued"
  if [ "$f" -gt 0 ]; then
    sed 's/^/   | /' "$log" | tail -n 60
    failures+=("$t")
  else
    grep '^SKIPPED ' "$log" | sed 's/^/   /'
  fi
done
rm -f "$log"
[ ${#failures[@]} -gt 0 ] && echo "failing programs: ${failures[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
