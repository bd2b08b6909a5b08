#!/usr/bin/env bash
# The emulated CUDA trainer on the Hopper attention kernels (train_gpt_emu --attention-kernel hopper:
# TMA, mbarriers and wgmma through their emulated twins) tracks the fp32 CPU trainer step by step, and
# the mma.sync kernels: one model file (2 layers, head size 64), one batch of T 37 (partial tiles)
# overfitted for 12 AdamW steps. bf16 against fp32: every loss within 3% of train_gpt_cpu's (measured:
# 1.2% at most); hopper against mma: within 0.2% (measured: equal to the printed digits). A CPU run
# at another learning rate must fail the same comparison, so the check can fail.
# Plain build only: the sanitized suite runs the Hopper path of the trainer in test_train_gpt_emu.sh.
set -u
bin=${BIN:-.}
for p in train_gpt_cpu train_gpt_emu; do
  if [ ! -x "$bin/$p" ]; then
    echo "SKIPPED hopper trainer comparison ($bin/$p not built)"
    exit 0
  fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Two shards of 3000 random tokens below 64 (header: magic, version, token count).
for i in 0 1; do
  perl -e 'srand(7 + $ARGV[0]); print pack("l<256", 20240520, 1, 3000, (0) x 253);
           print pack("S<*", map { int(rand(64)) } 1 .. 3000)' "$i" >"$work/shard_$i.bin"
done
"$bin/train_gpt_cpu" -e custom:L2:C128:H2:V64:T64 -i "$work/shard_*.bin" -b 2 -t 37 -x 1 -l 0 -k constant \
  -v 0 -s 0 -o "$work/init" >"$work/init.log" 2>&1 ||
  { echo "FAIL train_gpt_cpu could not write the model file"; cat "$work/init.log"; exit 1; }

losses() {  # trainer, extra flags...: the loss of every step, one line
  local trainer=$1
  shift
  "$bin/$trainer" -e "$work/init/model_00000001.bin" -i "$work/shard_*.bin" -b 2 -t 37 -a 1 -x 12 \
    -k constant -c 0 -v 0 -s 0 "$@" 2>&1 | awk '/^step / { printf "%s ", $5 }'
}
# within A B TOLERANCE: every step's loss of A within TOLERANCE (relative) of B's, same step count.
within() {
  awk -v a="$1" -v b="$2" -v tol="$3" 'BEGIN {
    n = split(a, x, " "); m = split(b, y, " ")
    if (n != 12 || m != 12) exit 1
    for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > tol * y[i]) exit 1 }
  }'
}
cpu=$(losses train_gpt_cpu -l 3e-3)
hopper=$(losses train_gpt_emu -l 3e-3 --attention-kernel hopper)
mma=$(losses train_gpt_emu -l 3e-3 --attention-kernel mma)
other=$(losses train_gpt_cpu -l 6e-3)
status=0
report() {  # name, command...
  local name=$1
  shift
  if "$@"; then echo "PASS $name"; else echo "FAIL $name"; status=1; fi
}
report "hopper attention trainer tracks train_gpt_cpu (3%)" within "$hopper" "$cpu" 0.03
report "hopper attention trainer tracks the mma.sync one (0.2%)" within "$hopper" "$mma" 0.002
report "the comparison refuses a run at another learning rate" eval '! within "$hopper" "$other" 0.03'
[ $status -eq 0 ] || printf 'cpu:    %s\nhopper: %s\nmma:    %s\nother:  %s\n' "$cpu" "$hopper" "$mma" "$other"
exit $status
