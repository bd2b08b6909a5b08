#!/usr/bin/env bash
# ./convert export-hf checked by Hugging Face transformers itself, where this machine has a python3
# with torch and transformers (otherwise SKIPPED): a random GPT-2 model file is exported, loaded with
# AutoModelForCausalLM.from_pretrained, and its mean loss on the first batch of a token shard must
# equal ./generate --eval's on the same batch (within 2e-4: ours is printed to 4 digits); with GPT-2's vocabulary here,
# AutoTokenizer.from_pretrained on the same folder must encode "Hello world" as 15496, 995.
set -u
bin=${BIN:-.}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import torch, transformers' >/dev/null 2>&1; then
    python=$p; break
  fi
done
if [ -z "$python" ]; then
  echo "SKIPPED transformers loads ./convert export-hf's folder (no python3 with torch and transformers here)"
  exit 0
fi

# An llm.c fp32 model file (L=2, C=64, H=2, maxT=32, GPT-2's vocabulary) and a token shard.
"$python" - "$work" <<'PY'
import random, struct, sys, array
work = sys.argv[1]
L, C, H, V, T = 2, 64, 2, 50257, 32
Vp = (V + 127) // 128 * 128
rng = random.Random(3)
sizes = [Vp * C, T * C] + [n for n in (C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C,
                                        4 * C * C, C)] + [C, C]
sizes = sizes[:2] + [L * s for s in sizes[2:14]] + sizes[14:]
values = array.array("f", (rng.gauss(0, 0.1) for _ in range(sum(sizes))))
for i in range(V * C, Vp * C): values[i] = 0.0
header = [20240326, 3, T, V, L, H, C, Vp] + [0] * 248
open(f"{work}/model.bin", "wb").write(struct.pack("<256i", *header) + values.tobytes())
tokens = [rng.randrange(V) for _ in range(2 * T + 1)]
open(f"{work}/val.bin", "wb").write(struct.pack("<256i", 20240520, 1, len(tokens), *[0] * 253) +
                                   struct.pack(f"<{len(tokens)}H", *tokens))
PY
if ! "$bin/convert" export-hf "$work/model.bin" "$work/hf" >"$work/log" 2>&1; then
  echo "FAIL export-hf: $(cat "$work/log")"; exit 1
fi
ours=$("$bin/generate" -e "$work/model.bin" --eval "$work/val.bin" -b 2 -t 32 -m 1 | sed -n 's/^val loss \([0-9.]*\).*/\1/p')
theirs=$("$python" - "$work" <<'PY'
import struct, sys, torch
from transformers import AutoModelForCausalLM
work = sys.argv[1]
model = AutoModelForCausalLM.from_pretrained(f"{work}/hf", torch_dtype=torch.float32).eval()
raw = open(f"{work}/val.bin", "rb").read()
n = struct.unpack_from("<i", raw, 8)[0]
tokens = torch.tensor(struct.unpack_from(f"<{n}H", raw, 1024), dtype=torch.long)
x, y = tokens[:64].view(2, 32), tokens[1:65].view(2, 32)
with torch.no_grad():
    logits = model(input_ids=x).logits
print("%.6f" % torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)).item())
PY
)
if [ -n "$ours" ] && [ -n "$theirs" ] && awk -v a="$ours" -v b="$theirs" 'BEGIN { d = a - b; exit !(d < 2e-4 && d > -2e-4) }'; then
  echo "PASS transformers' loss on the exported folder equals ours ($theirs vs $ours)"
else
  echo "FAIL transformers' loss '$theirs' vs ours '$ours'"; exit 1
fi
if [ -f "$work/hf/vocab.json" ]; then
  ids=$("$python" -c 'import sys; from transformers import AutoTokenizer; print(AutoTokenizer.from_pretrained(sys.argv[1])("Hello world")["input_ids"])' "$work/hf")
  if [ "$ids" = "[15496, 995]" ]; then echo "PASS AutoTokenizer reads the exported tokenizer"
  else echo "FAIL AutoTokenizer: 'Hello world' -> $ids"; exit 1; fi
else
  echo "SKIPPED AutoTokenizer on the export (GPT-2's vocabulary is not here: data/fetch_vocab.sh)"
fi
