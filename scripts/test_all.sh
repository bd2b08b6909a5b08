#!/usr/bin/env bash
# The README's test command: install what is missing, build, run the whole test suite (plain, then
# under ASan + UBSan). Ends with the suite's "N passed, N failed, N skipped" line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
JOBS=$(nproc)
make -j"$JOBS" all >/dev/null
make -j"$JOBS" test
