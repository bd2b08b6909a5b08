#!/usr/bin/env bash
# The PyTorch reference (dev/gpt2_torch.py) against the fp32 CPU trainer, where this machine has a torch
# (e.g. Debian's python3-torch): both train the same model file on the same batches for a few steps
# (three shards, so across shards and epochs) with a constant learning rate, weight decay and gradient
# accumulation, and the script's own comparison must find every step's loss equal to the printed
# digits (relative 1e-4; measured ~5e-6).
# This checks the script's file reading, batch order, model, clipping and AdamW without a GPU.
# Without torch: SKIPPED (the script is still byte-compiled).
set -u
bin=${BIN:-.}
script=dev/gpt2_torch.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! command -v python3 >/dev/null; then
  echo "SKIPPED gpt2_torch.py (no python3 here)"
  exit 0
fi
if python3 -c "import ast, sys; ast.parse(open(sys.argv[1]).read())" "$script"; then
  echo "PASS gpt2_torch.py parses"
else
  echo "FAIL gpt2_torch.py does not parse"
  exit 1
fi

python=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import torch' >/dev/null 2>&1; then python=$p; break; fi
done
if [ -z "$python" ]; then
  echo "SKIPPED gpt2_torch.py against train_gpt_cpu (no python3 with torch here)"
  exit 0
fi

# Three small shards of random tokens below 512, of 2 batches each: 4 steps of 2 micro-batches go
# through all three in glob order and around again (the loader's order across shards and epochs).
python3 - "$work" <<'PY'
import random, struct, sys
rng = random.Random(5)
for i, n in enumerate([700, 600, 650]):
    with open(f"{sys.argv[1]}/shard_{i}.bin", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *[0] * 253))
        f.write(struct.pack(f"<{n}H", *[rng.randrange(512) for _ in range(n)]))
PY
data="$work/shard_*.bin"
# A model file written by our trainer: one step at learning rate 0 leaves the initial weights.
model=custom:L2:C64:H4:V512
"$bin/train_gpt_cpu" -e "$model" -i "$data" -b 4 -t 64 -x 1 -l 0 -k constant -v 0 -s 0 -o "$work/init" \
  >"$work/init.log" 2>&1 ||
  { echo "FAIL train_gpt_cpu could not write the initial model file"; cat "$work/init.log"; exit 1; }
flags=(-i "$data" -b 4 -t 64 -d 512 -x 4 -l 1e-3 -c 0.1)
"$bin/train_gpt_cpu" -e "$work/init/model_00000001.bin" "${flags[@]}" -k constant -v 0 -s 0 >"$work/cpu.log" 2>&1 ||
  { echo "FAIL train_gpt_cpu run"; cat "$work/cpu.log"; exit 1; }
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$python" -B "$script" --check --device cpu --dtype fp32 \
  -e "$work/init/model_00000001.bin" "${flags[@]}" --compare "$work/cpu.log" --tolerance 1e-4 \
  --tolerance-first 1e-4 >"$work/torch.log" 2>&1
rc=$?
sed -n '/^comparison/,$p' "$work/torch.log"
if [ $rc -ne 0 ] || ! grep -q '^PASS torch reference' "$work/torch.log"; then
  cat "$work/torch.log"
  echo "FAIL gpt2_torch.py --check disagrees with train_gpt_cpu (exit status $rc)"
  exit 1
fi
# A log of other settings must fail the comparison (the check can fail).
if "$python" -B "$script" --check --device cpu -e "$work/init/model_00000001.bin" -i "$data" -b 4 -t 64 -x 2 -l 2e-3 \
     --compare "$work/cpu.log" >"$work/wrong.log" 2>&1; then
  echo "FAIL gpt2_torch.py --check accepted a log of another learning rate"
  exit 1
fi
echo "PASS gpt2_torch.py --check refuses a log of other settings"
