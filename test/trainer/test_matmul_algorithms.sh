#!/usr/bin/env bash
# The cuBLASLt algorithms a run computes with are chosen once (train/algorithm_table.h): the emulated
# trainer (fp32) as 2 MPI ranks whose cuBLASLt stand-ins time different candidates fastest
# (EMU_CUBLASLT_FASTEST, emu/README.md), counted per rank by the stand-in itself:
#   - after the first step every rank computes with rank 0's fastest candidate, whichever rank 0 times;
#   - a resumed run loads the run folder's table, times nothing, and ends with the same bits;
#   - a table written for another device is ignored with a note and timed afresh; a damaged one
#     stops the run with one line naming the file.
set -u
trainer="${BIN:-.}/train_gpt_emu_fp32" name=matmul_algorithms
source "$(dirname "$0")/../parallel/tiny_mpi_run.sh"
flags=(-e custom:L1:C64:H2:V64:T16 -i "$work/train.bin" -b 2 -t 16 -v 0 -s 0 -x 2)
status=0
# run LOG FASTEST FLAGS...: the 2-rank trainer, its output in $work/LOG.log; its exit status.
run() {
  local log=$1 fastest=$2
  shift 2
  EMU_CUBLASLT_FASTEST=$fastest timeout 120 mpirun --oversubscribe -np 2 "$trainer" "${flags[@]}" "$@" \
    >"$work/$log.log" 2>&1
}
# count LOG RANK CANDIDATE: the products the rank's stand-in computed with that candidate.
count() {
  sed -n "s/^cuBLASLt stand-in: rank $2 products by candidate: 0: \([0-9]*\), 1: \([0-9]*\), 2: \([0-9]*\)$/\1 \2 \3/p" \
    "$work/$1.log" | awk -v c="$3" '{ print $(c + 1) }'
}
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; status=1; }
must_run() { run "$@" || { fail "$1" "the run failed: $(tail -3 "$work/$1.log" | tr '\n' ' ')"; exit 1; }; }

# Step 1 alone (its counts: the timing, and the heuristic's first computing), then two whole runs in
# which rank 0 times candidate 1 fastest and rank 1 candidate 0, and the other way round.
must_run first 1,0 -o "$work/split" --stop-at 1
must_run one_zero 1,0 -o "$work/one_zero"
must_run zero_one 0,1 -o "$work/zero_one"
name=every_rank_computes_with_rank_0s_timed_algorithms
ok=1
for rank in 0 1; do
  # Step 2 ran only candidate 1 when rank 0 timed it fastest, only candidate 0 when rank 0 timed that.
  [ "$(count one_zero $rank 0)" = "$(count first $rank 0)" ] || ok=0
  [ "$(count one_zero $rank 1)" -gt "$(count first $rank 1)" ] || ok=0
  [ "$(count zero_one $rank 1)" = "$(count first $rank 1)" ] || ok=0
  [ "$(count zero_one $rank 0)" -gt "$(count first $rank 0)" ] || ok=0
done
# The saved table holds candidate 1 (the first of the algorithm's eight words) for every product.
entries=$(grep -c ' = ' "$work/one_zero/matmul_algorithms.txt")
ones=$(grep -c ' = 0000000000000001' "$work/one_zero/matmul_algorithms.txt")
[ "$entries" -gt 0 ] && [ "$entries" = "$ones" ] || ok=0
grep -q '^matmul algorithms: .* timed on rank 0' "$work/one_zero.log" || ok=0
if [ $ok = 1 ]; then pass $name; else
  fail $name "candidate counts (step 1 / 1,0 / 0,1): $(grep -h 'stand-in' "$work/first.log" "$work/one_zero.log" \
    "$work/zero_one.log" | tr '\n' ' '); table: $ones of $entries entries candidate 1"
fi

name=resume_loads_the_table_and_times_nothing
cp -r "$work/split" "$work/split_other" && cp -r "$work/split" "$work/split_damaged"
must_run resumed 0,0 -o "$work/split" -y 1
ok=1
grep -q "^matmul algorithms: $entries loaded from $work/split/matmul_algorithms.txt" "$work/resumed.log" || ok=0
for rank in 0 1; do  # rank 0's candidate 1 from the file, though both ranks now time 0 fastest
  [ "$(count resumed $rank 0)" = 0 ] && [ "$(count resumed $rank 2)" = 0 ] && [ "$(count resumed $rank 1)" -gt 0 ] || ok=0
done
for file in model_00000002.bin state_00000002_00000.bin state_00000002_00001.bin; do
  cmp -s "$work/one_zero/$file" "$work/split/$file" || ok=0
done
if [ $ok = 1 ]; then pass $name; else fail $name "$(grep -h 'matmul\|stand-in' "$work/resumed.log" | tr '\n' ' ')"; fi

name=another_devices_table_is_timed_afresh
# The emulated device's name holds its thread count: two threads make it another device.
OMP_NUM_THREADS=2 run other 0,0 -o "$work/split_other" -y 1 || fail $name "the run failed"
ok=1
grep -q "^note: $work/split_other/matmul_algorithms.txt was written for .*1 threads.*: ignored" "$work/other.log" || ok=0
[ "$(count other 0 2)" -gt 0 ] || ok=0  # timed: the split-k candidate ran
grep -q '^environment .*2 threads' "$work/split_other/matmul_algorithms.txt" || ok=0
if [ $ok = 1 ]; then pass $name; else fail $name "$(grep -h 'matmul\|stand-in\|note' "$work/other.log" | tr '\n' ' ')"; fi

name=damaged_table_stops_the_run
sed -i '3s/= 0000000000000001/= 0000000000000002/' "$work/split_damaged/matmul_algorithms.txt"
if run damaged 1,0 -o "$work/split_damaged" -y 1; then
  fail $name "the run succeeded"
elif ! grep -q "^error: $work/split_damaged/matmul_algorithms.txt: damaged (its checksum does not match" \
    "$work/damaged.log" || grep -q '^step ' "$work/damaged.log"; then
  fail $name "$(grep -v '^\(model\|compute\|network\|batch\|data\|validation\|resumed\)' "$work/damaged.log" | head -4 | tr '\n' ' ')"
else
  pass $name
fi
exit $status
