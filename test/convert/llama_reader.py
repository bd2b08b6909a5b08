# A LlamaForCausalLM folder's forward in Python's standard library alone (json, struct, math), in
# double precision, written from the published architecture: RMSNorm, rotary position embeddings in
# the rotate-half layout with Llama 3.1's frequency scaling, grouped-query causal attention, the
# SwiGLU MLP, an untied (or tied) output layer. It parses model.safetensors itself.
#   python3 llama_reader.py FOLDER TOKENS TARGETS     (comma-separated ids)
# prints the mean cross-entropy of the targets.
import json, math, struct, sys

folder, tokens, targets = sys.argv[1], sys.argv[2], sys.argv[3]
tokens = [int(t) for t in tokens.split(",")]
targets = [int(t) for t in targets.split(",")]
config = json.load(open(f"{folder}/config.json"))
assert config["model_type"] == "llama" and config.get("hidden_act", "silu") == "silu"


def widen(dtype, b):
    if dtype == "F32": return list(struct.unpack(f"<{len(b) // 4}f", b))
    if dtype == "F16": return list(struct.unpack(f"<{len(b) // 2}e", b))
    assert dtype == "BF16", dtype
    halves = struct.unpack(f"<{len(b) // 2}H", b)
    return list(struct.unpack(f"<{len(halves)}f", struct.pack(f"<{len(halves)}I", *(h << 16 for h in halves))))


raw = open(f"{folder}/model.safetensors", "rb").read()
n = struct.unpack_from("<Q", raw, 0)[0]
header, data = json.loads(raw[8:8 + n]), 8 + n
W = {}
for name, t in header.items():
    if name == "__metadata__": continue
    begin, end = t["data_offsets"]
    W[name] = (t["shape"], widen(t["dtype"], raw[data + begin:data + end]))
if "lm_head.weight" not in W:
    assert config.get("tie_word_embeddings", False)
    W["lm_head.weight"] = W["model.embed_tokens.weight"]

C, L, V = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
H = config["num_attention_heads"]
KV = config.get("num_key_value_heads", H)
d = C // H
eps = config["rms_norm_eps"]


def linear(x, name):  # y = W x with W stored (out, in)
    (n_out, n_in), w = W[name]
    return [sum(w[o * n_in + i] * x[i] for i in range(n_in)) for o in range(n_out)]


def rmsnorm(x, name):
    g = W[name][1]
    scale = 1 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
    return [v * scale * g[i] for i, v in enumerate(x)]


def frequencies():
    theta = config["rope_theta"]
    f = [theta ** (-2 * i / d) for i in range(d // 2)]
    s = config.get("rope_scaling")
    if not s or s.get("rope_type", s.get("type")) != "llama3": return f
    old, low, high = s["original_max_position_embeddings"], s["low_freq_factor"], s["high_freq_factor"]
    out = []
    for freq in f:
        wavelength = 2 * math.pi / freq
        if wavelength < old / high: out.append(freq)
        elif wavelength > old / low: out.append(freq / s["factor"])
        else:
            smooth = (old / wavelength - low) / (high - low)
            out.append((1 - smooth) * freq / s["factor"] + smooth * freq)
    return out


FREQ = frequencies()


def rope(head, t):  # x·cos + rotate_half(x)·sin, rotate_half(x) = (−x[d/2:], x[:d/2])
    half = d // 2
    rotated = [-v for v in head[half:]] + head[:half]
    angles = [t * f for f in FREQ] * 2
    return [x * math.cos(a) + r * math.sin(a) for x, r, a in zip(head, rotated, angles)]


def attention(xs, p):
    qs = [linear(x, p + "self_attn.q_proj.weight") for x in xs]
    ks = [linear(x, p + "self_attn.k_proj.weight") for x in xs]
    vs = [linear(x, p + "self_attn.v_proj.weight") for x in xs]
    qs = [[v for h in range(H) for v in rope(q[h * d:(h + 1) * d], t)] for t, q in enumerate(qs)]
    ks = [[v for h in range(KV) for v in rope(k[h * d:(h + 1) * d], t)] for t, k in enumerate(ks)]
    out = []
    for t in range(len(xs)):
        y = []
        for h in range(H):
            g = h // (H // KV)  # the key/value head this query head shares
            q = qs[t][h * d:(h + 1) * d]
            scores = [sum(a * b for a, b in zip(q, ks[s][g * d:(g + 1) * d])) / math.sqrt(d) for s in range(t + 1)]
            top = max(scores)
            p_ = [math.exp(v - top) for v in scores]
            total = sum(p_)
            y += [sum(p_[s] / total * vs[s][g * d + i] for s in range(t + 1)) for i in range(d)]
        out.append(linear(y, p + "self_attn.o_proj.weight"))
    return out


def mlp(x, p):
    gate, up = linear(x, p + "mlp.gate_proj.weight"), linear(x, p + "mlp.up_proj.weight")
    return linear([g / (1 + math.exp(-g)) * u for g, u in zip(gate, up)], p + "mlp.down_proj.weight")


embed = W["model.embed_tokens.weight"][1]
xs = [embed[tok * C:(tok + 1) * C] for tok in tokens]
for layer in range(L):
    p = f"model.layers.{layer}."
    branch = attention([rmsnorm(x, p + "input_layernorm.weight") for x in xs], p)
    xs = [[a + b for a, b in zip(x, y)] for x, y in zip(xs, branch)]
    xs = [[a + b for a, b in zip(x, mlp(rmsnorm(x, p + "post_attention_layernorm.weight"), p))] for x in xs]
loss = 0.0
for x, target in zip(xs, targets):
    logits = linear(rmsnorm(x, "model.norm.weight"), "lm_head.weight")
    top = max(logits)
    loss += math.log(sum(math.exp(v - top) for v in logits)) + top - logits[target]
print("%.9f" % (loss / len(targets)))
