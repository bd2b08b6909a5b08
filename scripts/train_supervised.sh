#!/usr/bin/env bash
# Shared by the run scripts (run_gpt2_*.sh): trains one of the GPT-2 reproductions on FineWeb-style
# token shards under scripts/supervise.sh, so a run that dies restarts from its newest checkpoint.
#   usage: scripts/train_supervised.sh NAME TRAINER_FLAGS...
# Environment: DATA (folder of fineweb_train_*.bin / fineweb_val_*.bin shards, default
# data/fineweb10B), OUT (output folder, default out/NAME), NGPU (ranks on this node, default: every
# GPU nvidia-smi lists), MAX_RESTARTS (default 20).
set -euo pipefail
name="$1"; shift
cd "$(dirname "$0")/.."
data="${DATA:-data/fineweb10B}"
out="${OUT:-out/$name}"
ngpu="${NGPU:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)}"
[ "$ngpu" -ge 1 ] 2>/dev/null || ngpu=1
ls "$data"/fineweb_train_*.bin >/dev/null 2>&1 || {
  echo "error: no training shards at $data/fineweb_train_*.bin (set DATA to the folder of your FineWeb shards)" >&2
  exit 1
}
make -j"$(nproc)" train_gpt >/dev/null
launch=()
[ "$ngpu" -gt 1 ] && launch=(mpirun -np "$ngpu" --bind-to none)
exec scripts/supervise.sh --max-restarts "${MAX_RESTARTS:-20}" -- "${launch[@]}" ./train_gpt \
  -i "$data/fineweb_train_*.bin" -j "$data/fineweb_val_*.bin" -o "$out" -y 1 "$@"
