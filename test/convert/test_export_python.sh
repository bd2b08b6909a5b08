#!/usr/bin/env bash
# ./convert export-hf checked by a reader in Python's standard library alone (json, struct, math: no
# numpy, torch or transformers, so it runs wherever a python3 does; otherwise SKIPPED). The reader
# parses model.safetensors itself (the 8-byte length, the JSON header, F32/BF16/F16 data), runs
# GPT-2's forward in double precision in transformers' layout (Conv1D weights (in, out), the head
# tied to wte), and must agree with our programs on the same tokens:
#   - its mean loss on a batch of a token shard equals ./generate --eval's (printed to 4 decimals);
#   - its greedy continuation of a prompt is the very token sequence ./generate --temperature 0
#     prints, with the key/value cache and without (a decode table writes token i as "<i>").
# For fp32 and bf16 exports our side runs the model file exported; for fp16 it runs ./convert
# import-hf's file of the folder, so the check also covers import's widening of F16.
set -u
bin=${BIN:-.}
python=$(command -v python3 || true)
if [ -z "$python" ]; then
  echo "SKIPPED a Python reader runs ./convert export-hf's folder (no python3 here)"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A random fp32 model file (L=2, C=32, H=4, V=96, maxT=16), a token shard and a decode table.
"$python" - "$work" <<'PY' || { echo "FAIL writing the test's inputs"; exit 1; }
import random, struct, sys, array
work = sys.argv[1]
L, C, H, V, T = 2, 32, 4, 96, 16
Vp = 128
rng = random.Random(5)
per_layer = [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
sizes = [Vp * C, T * C] + [L * s for s in per_layer] + [C, C]
values = array.array("f", (rng.gauss(0, 0.3) for _ in range(sum(sizes))))
starts = [sum(sizes[:i]) for i in range(len(sizes))]
for t in (2, 8, 14):  # LayerNorm gains around 1
    for i in range(starts[t], starts[t] + sizes[t]): values[i] += 1.0
for i in range(V * C, Vp * C): values[i] = 0.0
open(f"{work}/model.bin", "wb").write(struct.pack("<256i", 20240326, 3, T, V, L, H, C, Vp, *[0] * 248)
                                      + values.tobytes())
tokens = [rng.randrange(V) for _ in range(2 * T + 1)]
open(f"{work}/val.bin", "wb").write(struct.pack("<256i", 20240520, 1, len(tokens), *[0] * 253)
                                    + struct.pack(f"<{len(tokens)}H", *tokens))
table = b"".join(bytes([len(s)]) + s for s in (f"<{i}>".encode() for i in range(V)))
open(f"{work}/table.bin", "wb").write(struct.pack("<256i", 20240328, 2, V, V - 1, *[0] * 252) + table)
PY

# The reader: prints the loss on the first 2x16 batch of val.bin, then the greedy continuation of the
# prompt (after end-of-text, the last token) as comma-separated ids.
cat >"$work/reader.py" <<'PY'
import json, math, struct, sys
folder, shard, prompt, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
config = json.load(open(f"{folder}/config.json"))
assert config["model_type"] == "gpt2" and config["activation_function"] == "gelu_new"
raw = open(f"{folder}/model.safetensors", "rb").read()
n = struct.unpack_from("<Q", raw, 0)[0]
header, data = json.loads(raw[8:8 + n]), 8 + n
def widen(dtype, b):
    if dtype == "F32": return list(struct.unpack(f"<{len(b) // 4}f", b))
    if dtype == "F16": return list(struct.unpack(f"<{len(b) // 2}e", b))
    assert dtype == "BF16", dtype
    halves = struct.unpack(f"<{len(b) // 2}H", b)
    return list(struct.unpack(f"<{len(halves)}f", struct.pack(f"<{len(halves)}I", *(h << 16 for h in halves))))
W = {}
for name, t in header.items():
    if name == "__metadata__": continue
    begin, end = t["data_offsets"]
    values = widen(t["dtype"], raw[data + begin:data + end])
    assert len(values) == math.prod(t["shape"]), name
    W[name.removeprefix("transformer.")] = (t["shape"], values)
C, NH, L, V = config["n_embd"], config["n_head"], config["n_layer"], config["vocab_size"]
eps, hs = config["layer_norm_epsilon"], C // NH
def w(name): return W[name][1]
def layernorm(x, name):
    g, b = w(name + ".weight"), w(name + ".bias")
    mean = sum(x) / C
    rstd = 1 / math.sqrt(sum((v - mean) ** 2 for v in x) / C + eps)
    return [(v - mean) * rstd * g[i] + b[i] for i, v in enumerate(x)]
def conv1d(x, name):  # x (in) times the weight (in, out) plus the bias
    (n_in, n_out), weight = W[name + ".weight"]
    y = list(w(name + ".bias"))
    for i, xi in enumerate(x):
        row = weight[i * n_out:(i + 1) * n_out]
        for o in range(n_out): y[o] += xi * row[o]
    return y
def gelu(v): return 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
def forward(tokens):  # logits of every position
    wte, wpe = w("wte.weight"), w("wpe.weight")
    xs = [[wte[tok * C + c] + wpe[t * C + c] for c in range(C)] for t, tok in enumerate(tokens)]
    for l in range(L):
        h = f"h.{l}."
        qkv = [conv1d(layernorm(x, h + "ln_1"), h + "attn.c_attn") for x in xs]
        ys = []
        for t in range(len(xs)):
            y = [0.0] * C
            for head in range(NH):
                q = qkv[t][head * hs:(head + 1) * hs]
                scores = [sum(a * b for a, b in zip(q, qkv[s][C + head * hs:C + (head + 1) * hs])) / math.sqrt(hs)
                          for s in range(t + 1)]
                top = max(scores)
                p = [math.exp(v - top) for v in scores]
                total = sum(p)
                for s in range(t + 1):
                    for d in range(hs): y[head * hs + d] += p[s] / total * qkv[s][2 * C + head * hs + d]
            ys.append(y)
        xs = [[a + b for a, b in zip(x, conv1d(y, h + "attn.c_proj"))] for x, y in zip(xs, ys)]
        xs = [[a + b for a, b in zip(x, conv1d([gelu(v) for v in conv1d(layernorm(x, h + "ln_2"), h + "mlp.c_fc")],
                                               h + "mlp.c_proj"))] for x in xs]
    return [[sum(f[c] * wte[v * C + c] for c in range(C)) for v in range(V)]
            for f in (layernorm(x, "ln_f") for x in xs)]
raw_shard = open(shard, "rb").read()
tokens = struct.unpack_from(f"<{struct.unpack_from('<i', raw_shard, 8)[0]}H", raw_shard, 1024)
loss = 0.0
for b in range(2):
    x, y = tokens[b * 16:(b + 1) * 16], tokens[b * 16 + 1:(b + 1) * 16 + 1]
    for row, target in zip(forward(x), y):
        top = max(row)
        loss += math.log(sum(math.exp(v - top) for v in row)) + top - row[target]
print("%.6f" % (loss / 32))
sequence = [V - 1] + [int(t) for t in prompt.split(",")]
for _ in range(count):
    last = forward(sequence)[-1]
    sequence.append(max(range(V), key=lambda v: (last[v], -v)))
print(",".join(map(str, sequence[1:])))
PY

status=0
check() {  # check NAME FOLDER OUR_MODEL_FILE
  local name=$1 folder=$2 model=$3 out ours theirs loss tokens
  if ! out=$("$python" "$work/reader.py" "$folder" "$work/val.bin" 3,14,15 9 2>&1); then
    echo "FAIL $name: the Python reader failed: $(echo "$out" | tail -n 3)"; status=1; return
  fi
  loss=$(echo "$out" | sed -n 1p) tokens=$(echo "$out" | sed -n 2p)
  ours=$("$bin/generate" -e "$model" --eval "$work/val.bin" -b 2 -t 16 -m 1 | sed -n 's/^val loss \([0-9.]*\).*/\1/p')
  if ! awk -v a="$ours" -v b="$loss" 'BEGIN { d = a - b; exit !(a != "" && d < 1e-4 && d > -1e-4) }'; then
    echo "FAIL $name: loss $loss (Python) vs $ours (./generate --eval)"; status=1; return
  fi
  for cache in 1 0; do
    theirs=$("$bin/generate" -e "$model" --device cpu --tokenizer "$work/table.bin" --prompt-tokens 3,14,15 -g 9 \
               --temperature 0 --kv-cache $cache | sed -n '/^--- sample/{n;p}' | grep -o '[0-9]\+' | paste -sd, -)
    if [ "$theirs" != "$tokens" ]; then
      echo "FAIL $name: greedy tokens $tokens (Python) vs $theirs (./generate --kv-cache $cache)"; status=1; return
    fi
  done
  echo "PASS $name (loss $loss; greedy $tokens)"
}

for dtype in fp32 bf16 fp16; do
  if ! out=$("$bin/convert" export-hf "$work/model.bin" "$work/hf_$dtype" --dtype $dtype 2>&1); then
    echo "FAIL export-hf --dtype $dtype: $out"; status=1; continue
  fi
done
"$bin/convert" to-bf16 "$work/model.bin" "$work/model_bf16.bin" >/dev/null
"$bin/convert" import-hf "$work/hf_fp16" "$work/model_fp16.bin" >/dev/null
check "python_reader_runs_the_fp32_export" "$work/hf_fp32" "$work/model.bin"
check "python_reader_runs_the_bf16_export" "$work/hf_bf16" "$work/model_bf16.bin"
check "python_reader_runs_the_fp16_export_and_its_import" "$work/hf_fp16" "$work/model_fp16.bin"
exit $status
