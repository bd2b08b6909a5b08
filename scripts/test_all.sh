#!/usr/bin/env bash
# The README's test command: install what is missing, build, then run the whole test suite twice:
# the normal build (`make test`) and the AddressSanitizer + UndefinedBehaviorSanitizer build
# (`make test-san`). Ends with one line totalling both: "total: N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh || { echo "error: installing dependencies failed"; exit 1; }
JOBS=$(nproc)
log=$(mktemp) part=$(mktemp)
status=0
for target in test test-san; do
  echo "=== make $target"
  make -j"$JOBS" "$target" >"$part" 2>&1 || status=1
  grep -v -E '^(g\+\+|nvcc|mkdir|make)' "$part"   # compiler command lines are noise here
  cat "$part" >>"$log"
done
summaries=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$log")
rm -f "$log" "$part"
[ "$(echo "$summaries" | grep -c passed)" -eq 2 ] || { echo "error: a test run did not finish (build failure?)"; status=1; }
total() { echo "$summaries" | awk -v col="$1" '{ n += $col } END { print n + 0 }'; }
echo "total: $(total 1) passed, $(total 3) failed, $(total 5) skipped"
exit $status
