#!/usr/bin/env python3
"""GPT-2 in PyTorch, on this project's file formats: the independent numerical reference and the
speed peer of train_gpt. Python 3 standard library and torch only.

Two modes:

  --check   trains the weights of one of our model files (-e) on our token shards (-i), batch by
            batch in the order of our DataLoader (sequential mode, one rank), with our optimizer
            settings, and prints one line per step in our trainer's format. With --compare LOG (our
            trainer's output for the same flags) it checks that the losses of every step agree and
            exits 1 where they do not. The training step is the one of train/train_loop.cpp:
              - micro-batch c of B*T+1 consecutive tokens; inputs and targets shifted by one;
                -d gives gradient accumulation (each micro-batch's loss scaled by 1/steps);
              - global gradient norm; gradients scaled by 1/norm when the norm exceeds 1.0;
              - AdamW written out here as kernels/adamw.h does it (fp32: bias-corrected moments,
                decoupled weight decay on wte, wpe, qkvw, attprojw, fcw and fcprojw only,
                beta1 0.9, beta2 0.95, eps 1e-8); no update where the loss or norm is not finite;
              - a constant learning rate (-l): run our trainer with -k constant, so that no
                schedule can differ.
            --dtype fp32 (default: the reference numerics, TF32 off) or bf16 (autocast: matmuls
            in bf16, fp32 master weights, LayerNorm, softmax and the loss in fp32).

  --bench   GPT-2 124M (d12) at T=1024, the way a PyTorch user would train it fast: torch.compile,
            bf16 autocast, F.scaled_dot_product_attention (flash attention), fused AdamW, gradient
            clipping at 1.0; the largest batch of --batch-candidates that fits (-b to fix it).
            Timed with CUDA events per step after warm-up; prints the median step, tokens/s and MFU
            against the bf16 GEMM rate measured in the same run (torch.matmul, 8192^3) and against
            the 989 TFLOP/s datasheet peak (H100 SXM / H200 dense bf16).

The model is GPT-2 as our trainer computes it: token + position embedding; per layer
x += attproj(attention(qkv(ln1(x)))), x += fcproj(gelu_tanh(fc(ln2(x)))); lnf; logits = x . wte^T
over the padded vocabulary, of which only the first V columns enter the softmax and the loss
(the padded rows of wte receive no gradient and stay zero). LayerNorm eps 1e-5, causal attention
with scale 1/sqrt(head size), q, k and v side by side in the qkv output (head h at channels
[h*HS, (h+1)*HS) of each).

Examples (from the repository root):
  python3 dev/gpt2_torch.py --check -e model.bin -i data/janeausten/janeausten_train.bin \\
      -b 4 -t 64 -x 20 -l 3e-4 -c 0.1 --dtype bf16 --compare train_gpt.log
  python3 dev/gpt2_torch.py --bench
"""
import argparse
import contextlib
import glob
import inspect
import math
import os
import re
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HEADER_INTS = 256
HEADER_BYTES = 4 * HEADER_INTS
MODEL_MAGIC, MODEL_FP32, MODEL_BF16 = 20240326, 3, 5
SHARD_MAGIC, SHARD_VERSION = 20240520, 1

# Our model file's 16 tensors, in file order (base/gpt_config.h); per-layer tensors are stacked over L.
TENSOR_NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
DECAYED_TENSORS = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}  # AdamW weight decay only here
GRAD_CLIP = 1.0
BETA1, BETA2, ADAM_EPS = 0.9, 0.95, 1e-8
DATASHEET_PEAK_TFLOPS = 989.0  # H100 SXM and H200, dense bf16

# One of our step lines: "step 12/40 | loss 3.4567 | lr 3.00e-04 | norm 1.234 | 12.3 ms | ..."
STEP_LINE = re.compile(r"^step (\d+)/(\d+) \| loss (\S+) \| lr (\S+) \| norm (\S+)")


class InputError(Exception):
    """A problem with a file or a flag: printed as one 'error: ...' line, exit status 1."""


# ------------------------------------------------------------------------------------------------
# Shapes and files

class Config:
    def __init__(self, max_seq_len, vocab_size, padded_vocab_size, num_layers, num_heads, channels):
        self.max_seq_len, self.vocab_size, self.padded_vocab_size = max_seq_len, vocab_size, padded_vocab_size
        self.num_layers, self.num_heads, self.channels = num_layers, num_heads, channels

    def __str__(self):
        return (f"L={self.num_layers} H={self.num_heads} C={self.channels} V={self.vocab_size} "
                f"Vp={self.padded_vocab_size} maxT={self.max_seq_len}")

    def tensor_shapes(self):
        """(name, shape) of the 16 file tensors, in file order."""
        V, T, L, C = self.padded_vocab_size, self.max_seq_len, self.num_layers, self.channels
        return list(zip(TENSOR_NAMES, [
            (V, C), (T, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C),
            (L, C), (L, C), (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]))

    def num_parameters(self):
        return sum(math.prod(shape) for _, shape in self.tensor_shapes())

    def training_flops_per_token(self, T):
        """As train/train_loop.cpp counts them: 6 per parameter plus causal attention's 6*L*C*T."""
        return 6.0 * self.num_parameters() + 6.0 * self.num_layers * self.channels * T


def gpt2_124m_config():
    return Config(max_seq_len=1024, vocab_size=50257, padded_vocab_size=50304, num_layers=12,
                  num_heads=12, channels=768)


def read_header(path):
    try:
        with open(path, "rb") as f:
            header = f.read(HEADER_BYTES)
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}")
    if len(header) != HEADER_BYTES:
        raise InputError(f"{path}: shorter than the {HEADER_BYTES}-byte header")
    return torch.frombuffer(bytearray(header), dtype=torch.int32).tolist()


def read_model_file(path):
    """Our model file (base/model_file.h) -> (Config, {name: fp32 tensor of the file shape})."""
    h = read_header(path)
    if h[0] != MODEL_MAGIC:
        raise InputError(f"{path}: not a model file (magic {h[0]}, expected {MODEL_MAGIC})")
    if h[1] not in (MODEL_FP32, MODEL_BF16):
        raise InputError(f"{path}: unsupported model file version {h[1]} (3 = fp32, 5 = bf16)")
    config = Config(max_seq_len=h[2], vocab_size=h[3], num_layers=h[4], num_heads=h[5], channels=h[6],
                    padded_vocab_size=h[7])
    element_bytes = 4 if h[1] == MODEL_FP32 else 2
    count = config.num_parameters()
    expected = HEADER_BYTES + element_bytes * count
    actual = os.path.getsize(path)
    if actual != expected:
        raise InputError(f"{path}: {actual} bytes, but its header ({config}) needs {expected}")
    with open(path, "rb") as f:
        f.seek(HEADER_BYTES)
        data = bytearray(f.read())
    flat = torch.frombuffer(data, dtype=torch.float32 if h[1] == MODEL_FP32 else torch.bfloat16).float()
    tensors, offset = {}, 0
    for name, shape in config.tensor_shapes():
        n = math.prod(shape)
        tensors[name] = flat[offset:offset + n].view(shape)
        offset += n
    return config, tensors, ("fp32" if h[1] == MODEL_FP32 else "bf16")


def read_token_shard(path, vocab_size):
    """A token shard (data/token_shard.h) -> int64 tensor of its tokens, checked as train/dataloader.cpp does."""
    h = read_header(path)
    if h[0] != SHARD_MAGIC:
        raise InputError(f"{path}: not a token shard (magic {h[0]}, expected {SHARD_MAGIC})")
    if h[1] != SHARD_VERSION:
        raise InputError(f"{path}: unsupported token shard version {h[1]} (expected {SHARD_VERSION})")
    n = h[2]
    if n < 0 or os.path.getsize(path) != HEADER_BYTES + 2 * n:
        raise InputError(f"{path}: size {os.path.getsize(path)} bytes does not match its header ({n} tokens)")
    with open(path, "rb") as f:
        f.seek(HEADER_BYTES)
        data = bytearray(f.read())
    tokens = torch.frombuffer(data, dtype=torch.int16).to(torch.int64) & 0xFFFF  # uint16 values
    if n > 0 and int(tokens.max()) >= vocab_size:
        i = int(torch.nonzero(tokens >= vocab_size)[0])
        raise InputError(f"{path}: token {int(tokens[i])} at index {i} is outside the vocabulary "
                         f"of {vocab_size}")
    return tokens


class SequentialLoader:
    """Batches in the order of our DataLoader with one rank and no shuffling: the shards of the glob
    in sorted order, each cut into floor((n - 1) / (B*T)) chunks of B*T tokens (+1 for the last
    target), chunk after chunk, then the next shard, then around again."""

    def __init__(self, pattern, B, T, vocab_size):
        files = sorted(glob.glob(pattern))
        if not files:
            raise InputError(f"{pattern}: no file matches")
        self.B, self.T, self.vocab_size, self.files = B, T, vocab_size, files
        self.chunks = []
        for path in files:
            n = read_header(path)[2]
            chunks = (n - 1) // (B * T) if n > 0 else 0
            if chunks == 0:
                raise InputError(f"{path}: {n} tokens are too few for one batch of {B * T} (+1) tokens")
            self.chunks.append(chunks)
        self.shard, self.chunk, self.loaded, self.tokens = 0, 0, -1, None

    def next_batch(self):
        if self.loaded != self.shard:
            self.tokens = read_token_shard(self.files[self.shard], self.vocab_size)
            self.loaded = self.shard
        n = self.B * self.T
        start = self.chunk * n
        window = self.tokens[start:start + n + 1]
        inputs, targets = window[:-1].view(self.B, self.T), window[1:].view(self.B, self.T)
        self.chunk += 1
        if self.chunk == self.chunks[self.shard]:
            self.chunk = 0
            self.shard = (self.shard + 1) % len(self.files)
        return inputs, targets


# ------------------------------------------------------------------------------------------------
# The model

def causal_attention(q, k, v):
    """softmax(q.k^T / sqrt(HS) with future positions masked) . v, per (batch, head); q, k, v are
    (B, NH, T, HS). Flash attention through F.scaled_dot_product_attention where torch has it."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T, HS = q.size(-2), q.size(-1)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    weights = torch.softmax(scores.masked_fill(future, float("-inf")).float(), dim=-1).to(v.dtype)
    return weights @ v


class TransformerLayer(nn.Module):
    """One GPT-2 layer: pre-LayerNorm attention and MLP branches added to the residual stream."""

    def __init__(self, channels, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.ln1 = nn.LayerNorm(channels, eps=1e-5)
        self.qkv = nn.Linear(channels, 3 * channels)
        self.attproj = nn.Linear(channels, channels)
        self.ln2 = nn.LayerNorm(channels, eps=1e-5)
        self.fc = nn.Linear(channels, 4 * channels)
        self.fcproj = nn.Linear(4 * channels, channels)

    def forward(self, x):
        B, T, C = x.shape
        HS = C // self.num_heads
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.num_heads, HS).transpose(1, 2) for t in (q, k, v))
        attended = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, C)
        x = x + self.attproj(attended)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        C = config.channels
        self.wte = nn.Parameter(torch.zeros(config.padded_vocab_size, C))
        self.wpe = nn.Parameter(torch.zeros(config.max_seq_len, C))
        self.layers = nn.ModuleList(TransformerLayer(C, config.num_heads) for _ in range(config.num_layers))
        self.lnf = nn.LayerNorm(C, eps=1e-5)

    def forward(self, inputs, targets):
        """Mean cross-entropy over the B*T positions, over the real vocabulary only."""
        T, V = inputs.size(1), self.config.vocab_size
        x = F.embedding(inputs, self.wte) + self.wpe[:T]
        for layer in self.layers:
            x = layer(x)
        logits = F.linear(self.lnf(x), self.wte)  # (B, T, Vp); columns >= V are padding
        return F.cross_entropy(logits[..., :V].float().reshape(-1, V), targets.reshape(-1))

    def file_slots(self):
        """(file tensor name, layer index or None, parameter) for every parameter, in file order."""
        per_layer = {"ln1w": lambda m: m.ln1.weight, "ln1b": lambda m: m.ln1.bias,
                     "qkvw": lambda m: m.qkv.weight, "qkvb": lambda m: m.qkv.bias,
                     "attprojw": lambda m: m.attproj.weight, "attprojb": lambda m: m.attproj.bias,
                     "ln2w": lambda m: m.ln2.weight, "ln2b": lambda m: m.ln2.bias,
                     "fcw": lambda m: m.fc.weight, "fcb": lambda m: m.fc.bias,
                     "fcprojw": lambda m: m.fcproj.weight, "fcprojb": lambda m: m.fcproj.bias}
        whole = {"wte": self.wte, "wpe": self.wpe, "lnfw": self.lnf.weight, "lnfb": self.lnf.bias}
        for name in TENSOR_NAMES:
            if name in whole:
                yield name, None, whole[name]
            else:
                for l, layer in enumerate(self.layers):
                    yield name, l, per_layer[name](layer)

    @torch.no_grad()
    def load_file_tensors(self, tensors):
        for name, l, param in self.file_slots():
            param.copy_(tensors[name] if l is None else tensors[name][l])

    @torch.no_grad()
    def init_gpt2(self, seed):
        """GPT-2's initialisation (as base/gpt_init.h, drawn by torch): weight matrices normal(0,
        0.02), residual projections scaled by 1/sqrt(2L), padded wte rows zero, biases zero,
        LayerNorm weights one. For the speed benchmark: random weights, never zeros."""
        generator = torch.Generator(device="cpu").manual_seed(seed)
        for name, _, param in self.file_slots():
            if name in DECAYED_TENSORS:
                std = 0.02 / (math.sqrt(2 * self.config.num_layers) if name in ("attprojw", "fcprojw") else 1)
                param.copy_(torch.randn(param.shape, generator=generator) * std)
            else:
                param.fill_(1.0 if name in ("ln1w", "ln2w", "lnfw") else 0.0)
        self.wte[self.config.vocab_size:].zero_()

    def decay_groups(self):
        decayed = [p for name, _, p in self.file_slots() if name in DECAYED_TENSORS]
        plain = [p for name, _, p in self.file_slots() if name not in DECAYED_TENSORS]
        return decayed, plain


# ------------------------------------------------------------------------------------------------
# --check: the reference training run

class ReferenceAdamW:
    """AdamW as kernels/adamw.h computes it, in fp32 on fp32 weights, per element:
         g = grad_scale * grad;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2
         p = p - lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p),
         m_hat = m / (1 - b1^step),  v_hat = v / (1 - b2^step)
       (torch.optim.AdamW computes the same function; written out here so that nothing is assumed)."""

    def __init__(self, model, learning_rate, weight_decay):
        decayed, plain = model.decay_groups()
        self.groups = [(decayed, weight_decay), (plain, 0.0)]
        self.learning_rate = learning_rate
        self.moments = {p: (torch.zeros_like(p), torch.zeros_like(p))
                        for group, _ in self.groups for p in group}

    @torch.no_grad()
    def step(self, grad_scale, step):
        lr = self.learning_rate
        m_correction, v_correction = 1.0 - BETA1 ** step, 1.0 - BETA2 ** step
        for params, weight_decay in self.groups:
            for p in params:
                m, v = self.moments[p]
                g = p.grad * grad_scale
                m.mul_(BETA1).add_(g, alpha=1.0 - BETA1)
                v.mul_(BETA2).addcmul_(g, g, value=1.0 - BETA2)
                update = (m / m_correction) / ((v / v_correction).sqrt() + ADAM_EPS) + weight_decay * p
                p.sub_(lr * update)


def global_grad_norm(model):
    squares = [p.grad.float().pow(2).sum() for p in model.parameters() if p.grad is not None]
    return math.sqrt(float(torch.stack(squares).sum()))


def step_line(step, steps, loss, lr, norm, ms, tokens_per_s, mfu="n/a", eta_s=0.0):
    """Our trainer's step line (train/train_loop.cpp), so scripts read both alike."""
    eta = int(round(eta_s))
    eta_text = f"{eta // 3600}h{eta // 60 % 60:02d}m" if eta >= 3600 else f"{eta // 60}m{eta % 60:02d}s"
    return (f"step {step}/{steps} | loss {loss:.4f} | lr {lr:.2e} | norm {norm:.3f} | {ms:.1f} ms | "
            f"{tokens_per_s:.0f} tok/s | MFU {mfu} | ETA {eta_text}")


def pick_device(name):
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device is available to torch")
    return torch.device(name)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def run_check(args):
    device = pick_device(args.device)
    if device.type == "cuda":  # fp32 means fp32: no TF32 in matmuls or convolutions
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(args.seed)
    config, tensors, file_type = read_model_file(args.model)
    B, T = args.batch_size, args.seq_len
    if T > config.max_seq_len:
        raise InputError(f"-t {T} exceeds the model's maximum sequence length {config.max_seq_len}")
    total = args.total_batch if args.total_batch > 0 else B * T
    if total % (B * T) != 0:
        raise InputError(f"-d {total} is not a multiple of B*T = {B * T}")
    accum_steps = total // (B * T)
    loader = SequentialLoader(args.train_data, B, T, config.vocab_size)

    model = GPT2(config)
    model.load_file_tensors(tensors)
    del tensors
    model.to(device)
    optimizer = ReferenceAdamW(model, args.learning_rate, args.weight_decay)
    bf16 = args.dtype == "bf16"
    autocast = (torch.autocast(device_type=device.type, dtype=torch.bfloat16) if bf16
                else contextlib.nullcontext())

    print(f"model: {args.model} ({file_type} file: {config}), {config.num_parameters()} parameters")
    print(f"compute: PyTorch {torch.__version__} on {device}"
          f"{' (' + torch.cuda.get_device_name(device) + ')' if device.type == 'cuda' else ''}, "
          f"{'bf16 autocast, fp32 master weights' if bf16 else 'fp32 (TF32 off)'}")
    print(f"batch: B={B} T={T}, {total} tokens per step ({accum_steps} micro-steps), {args.max_steps} steps, "
          f"constant lr {args.learning_rate:.2e}, weight decay {args.weight_decay}")
    losses, norms = {}, {}
    started = time.time()
    for step in range(1, args.max_steps + 1):
        t0 = time.time()
        model.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for _ in range(accum_steps):
            inputs, targets = (t.to(device) for t in loader.next_batch())
            with autocast:
                loss = model(inputs, targets)
            (loss / accum_steps).backward()
            loss_sum += float(loss) / accum_steps
        norm = global_grad_norm(model)
        if math.isfinite(loss_sum) and math.isfinite(norm):
            optimizer.step(GRAD_CLIP / norm if norm > GRAD_CLIP else 1.0, step)
        else:
            what = "the loss" if not math.isfinite(loss_sum) else "the gradient norm"
            print(f"skipping the update of step {step}: {what} is not finite")
        synchronize(device)
        ms = 1000.0 * (time.time() - t0)
        losses[step], norms[step] = loss_sum, norm
        eta = (time.time() - started) / step * (args.max_steps - step)
        print(step_line(step, args.max_steps, loss_sum, args.learning_rate, norm, ms, total / (ms / 1000.0),
                        eta_s=eta), flush=True)
    if args.compare:
        return compare_with_log(args.compare, losses, norms, args.learning_rate, args.tolerance_first,
                                args.tolerance)
    return 0


def read_step_lines(path):
    """{step: (loss, lr, norm)} from our trainer's output."""
    rows = {}
    try:
        with open(path, errors="replace") as f:
            for line in f:
                match = STEP_LINE.match(line.strip())
                if match:
                    rows[int(match.group(1))] = tuple(float(match.group(i)) for i in (3, 4, 5))
    except OSError as e:
        raise InputError(f"--compare {path}: {e.strerror}")
    return rows


# The default tolerances, for train_gpt's bf16 build against this script in fp32 or bf16 autocast:
#   - the first step starts from identical weights on the identical batch, so only the forward
#     pass's rounding differs: bf16 keeps 8 bits of mantissa (relative rounding 2^-9 = 2e-3 per
#     value), but the loss is a mean over B*T positions of sums over the vocabulary, and the rounding
#     errors mostly average out: 5e-3;
#   - later steps also differ by the updates' rounding (bf16 gradients, stochastically rounded bf16
#     weights in train_gpt; fp32 or round-to-nearest here), which compounds from step to step: 2e-2.
# Measured on the build machine (CPU), 20 steps at a constant lr: this script in fp32 against
# train_gpt_cpu (fp32) on GPT-2 124M agrees to the printed digits (worst 7e-6), which checks the model,
# the batches, clipping and AdamW; its bf16 autocast run differs from train_gpt_cpu by at most 2.1e-4;
# train_gpt's emulated bf16 build against this script on a small model (L2, C64): worst 1.1e-4. A wrong
# batch order, a missing bias correction or a wrong clip moves the losses by several percent.
# On an H100 (dev/RESULTS.md) train_gpt against this script at lr 1e-4 agrees far inside these
# tolerances; at 6e-4 the runs agree for 14 steps and then part, a loss spike in one trainer and not
# the other compounding: such a learning rate is too close to instability for a step-by-step check.
def compare_with_log(path, losses, norms, learning_rate, tolerance_first, tolerance):
    """Our trainer's losses against these, step by step: relative difference within tolerance_first
    at step 1 and within tolerance at every step (see above). PASS/FAIL lines; 1 on a failure."""
    ours = read_step_lines(path)
    print(f"\ncomparison with {path} (train_gpt: our trainer; torch: this run)")
    print("step   train_gpt      torch   rel.diff   norm train_gpt  norm torch")
    problems, worst = [], 0.0
    for step in sorted(losses):
        if step not in ours:
            problems.append(f"step {step} is missing from {path}")
            continue
        loss, lr, norm = ours[step]
        diff = abs(loss - losses[step]) / max(abs(losses[step]), 1e-12)
        if not math.isfinite(loss) or not math.isfinite(losses[step]):
            diff = math.inf
        limit = tolerance_first if step == min(losses) else tolerance
        flag = "" if diff <= limit else f"  > {limit:g}"
        print(f"{step:4d}  {loss:10.4f} {losses[step]:10.4f}   {diff:.2e}   {norm:14.3f} "
              f"{norms[step]:11.3f}{flag}")
        if diff > limit:
            problems.append(f"step {step}: loss {loss:.4f} vs {losses[step]:.4f} "
                            f"(relative {diff:.2e} > {limit:g})")
        if abs(lr - learning_rate) > 1e-3 * learning_rate:  # "%.2e" keeps three digits
            problems.append(f"step {step}: train_gpt used lr {lr:.2e}, this run {learning_rate:.2e} "
                            "(run train_gpt with -k constant and the same -l)")
        worst = max(worst, diff)
    if problems:
        for p in problems[:10]:
            print(f"FAIL {p}")
        print(f"FAIL torch reference: {len(problems)} problem(s); worst loss difference {worst:.2e}")
        return 1
    print(f"PASS torch reference: {len(losses)} steps agree with train_gpt within {tolerance:g} "
          f"(first step {tolerance_first:g}); worst {worst:.2e}")
    return 0


# ------------------------------------------------------------------------------------------------
# --bench: the speed peer

def measure_bf16_gemm_tflops(n=8192, repeats=20):
    """The card's bf16 GEMM rate through torch.matmul (cuBLAS), median of timed runs after warm-up."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return 2.0 * n ** 3 / (statistics.median(times) * 1e-3) / 1e12


def make_optimizer(model, learning_rate, weight_decay):
    """torch's AdamW with our settings, fused where this torch has it (then foreach)."""
    decayed, plain = model.decay_groups()
    groups = [{"params": decayed, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0}]
    options = dict(lr=learning_rate, betas=(BETA1, BETA2), eps=ADAM_EPS)
    accepted = inspect.signature(torch.optim.AdamW).parameters
    for flag in ("fused", "foreach"):
        if flag in accepted:
            try:
                return torch.optim.AdamW(groups, **options, **{flag: True}), flag
            except (RuntimeError, TypeError, ValueError):
                pass
    return torch.optim.AdamW(groups, **options), "plain"


def out_of_memory(error):
    return isinstance(error, getattr(torch.cuda, "OutOfMemoryError", ())) or "out of memory" in str(error)


def bench_fits(model, optimizer, B, T, vocab_size):
    """Whether one eager training step at batch B fits (eager keeps more activations than compiled
    code, so a batch that fits here fits compiled too)."""
    try:
        inputs = torch.randint(0, vocab_size, (B, T), device="cuda")
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = model(inputs, inputs)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return True
    except RuntimeError as e:
        if not out_of_memory(e):
            raise
        return False
    finally:
        optimizer.zero_grad(set_to_none=True)
        loss = inputs = None
        torch.cuda.empty_cache()


def run_bench(args):
    if not torch.cuda.is_available():
        print("SKIPPED torch bench (no CUDA device)")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    config, T = gpt2_124m_config(), args.seq_len
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name}, {props.total_memory / 2**30:.1f} GiB; PyTorch {torch.__version__}")
    gemm_tflops = measure_bf16_gemm_tflops()
    print(f"bf16 GEMM rate (torch.matmul 8192^3, median): {gemm_tflops:.1f} TFLOP/s")

    model = GPT2(config)
    model.init_gpt2(args.seed)
    model.cuda()
    optimizer, optimizer_kind = make_optimizer(model, args.learning_rate, args.weight_decay)
    if args.batch_size > 0:
        candidates = [args.batch_size]
    else:
        candidates = sorted({int(b) for b in args.batch_candidates.split(",")}, reverse=True)
        largest = next((B for B in candidates if bench_fits(model, optimizer, B, T, config.vocab_size)), None)
        if largest is None:
            print(f"FAIL torch bench: not even B={candidates[-1]} fits")
            return 1
        candidates = [B for B in candidates if B <= largest]
        print(f"largest batch of {args.batch_candidates} whose eager step fits: B={largest}")

    use_compile = args.compile and hasattr(torch, "compile")
    compiled = torch.compile(model) if use_compile else model
    while candidates:
        B = candidates[0]
        try:
            return bench_batch(compiled, model, optimizer, config, B, T, args, gemm_tflops,
                               use_compile, optimizer_kind)
        except Exception as e:  # out of memory: the next batch down; torch.compile failing: eager
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            if out_of_memory(e):
                print(f"B={B}: out of memory in the {'compiled' if use_compile else 'eager'} step; "
                      "trying a smaller batch")
                candidates.pop(0)
            elif use_compile:
                first_line = str(e).splitlines()[0] if str(e) else ""
                print(f"torch.compile failed ({type(e).__name__}: {first_line}); "
                      "timing the eager model instead")
                compiled, use_compile = model, False
            else:
                raise
    print("FAIL torch bench: no batch fits")
    return 1


def bench_batch(compiled, model, optimizer, config, B, T, args, gemm_tflops, use_compile, optimizer_kind):
    params = list(model.parameters())
    batches = [torch.randint(0, config.vocab_size, (B, T + 1), device="cuda") for _ in range(4)]

    def train_step(i):
        tokens = batches[i % len(batches)]
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = compiled(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach(), norm.detach()

    t0 = time.time()
    train_step(0)  # compilation happens here
    torch.cuda.synchronize()
    first_s = time.time() - t0
    for i in range(1, args.warmup):
        train_step(i)
    torch.cuda.synchronize()

    events, results = [], []
    for i in range(args.steps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        results.append(train_step(i))
        stop.record()
        events.append((start, stop))
    torch.cuda.synchronize()
    times = [start.elapsed_time(stop) for start, stop in events]

    tokens = B * T
    step_flops = config.training_flops_per_token(T) * tokens
    for i, ((loss, norm), ms) in enumerate(zip(results, times)):
        tflops = step_flops / (ms * 1e-3) / 1e12
        print(step_line(i + 1, args.steps, float(loss), args.learning_rate, float(norm), ms,
                        tokens / (ms * 1e-3), mfu=f"{100 * tflops / DATASHEET_PEAK_TFLOPS:.1f}%"))
    median_ms = statistics.median(times)
    tokens_per_s = tokens / (median_ms * 1e-3)
    tflops = step_flops / (median_ms * 1e-3) / 1e12
    print(f"\nPyTorch peer: GPT-2 124M, B={B} T={T}, bf16 autocast, "
          f"{'torch.compile' if use_compile else 'eager (no torch.compile)'}, "
          f"{'flash SDPA' if hasattr(F, 'scaled_dot_product_attention') else 'plain attention'}, "
          f"{optimizer_kind} AdamW; first step {first_s:.1f} s{' (compilation)' if use_compile else ''}, "
          f"{args.warmup} warm-up steps")
    print(f"median step {median_ms:.2f} ms (min {min(times):.2f}, max {max(times):.2f}) "
          f"over {len(times)} steps: "
          f"{tokens_per_s:.0f} tok/s, {tflops:.1f} TFLOP/s = MFU {100 * tflops / gemm_tflops:.1f}% of the "
          f"measured bf16 GEMM rate ({gemm_tflops:.1f} TFLOP/s), {100 * tflops / DATASHEET_PEAK_TFLOPS:.1f}% "
          f"of {DATASHEET_PEAK_TFLOPS:.0f} TFLOP/s")
    print(f"peer_result B={B} T={T} median_ms={median_ms:.3f} tokens_per_s={tokens_per_s:.0f} "
          f"mfu_measured={100 * tflops / gemm_tflops:.2f} "
          f"mfu_datasheet={100 * tflops / DATASHEET_PEAK_TFLOPS:.2f}")
    finite = all(math.isfinite(float(loss)) for loss, _ in results)
    print(f"{'PASS' if finite else 'FAIL'} torch bench: {len(times)} timed steps, losses "
          f"{'finite' if finite else 'NOT finite'} "
          f"({float(results[0][0]):.4f} -> {float(results[-1][0]):.4f})")
    return 0 if finite else 1


# ------------------------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="See the top of dev/gpt2_torch.py for what each mode computes.")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="train our model file on our shards (reference)")
    mode.add_argument("--bench", action="store_true", help="time GPT-2 124M training steps (speed peer)")
    p.add_argument("-e", "--model", help="--check: our model file (fp32 v3 or bf16 v5)")
    p.add_argument("-i", "--train-data", default="data/janeausten/janeausten_train.bin",
                   help="--check: token shards (glob), read in sorted order")
    p.add_argument("-b", "--batch-size", type=int, default=None,
                   help="micro-batch B (--check: default 4; --bench: the largest candidate that fits)")
    p.add_argument("-t", "--seq-len", type=int, default=None,
                   help="sequence length T (--check 64, --bench 1024)")
    p.add_argument("-d", "--total-batch", type=int, default=-1,
                   help="--check: tokens per step (accumulation)")
    p.add_argument("-x", "--max-steps", type=int, default=20, help="--check: steps (default 20)")
    p.add_argument("-l", "--learning-rate", type=float, default=3e-4, help="constant learning rate")
    p.add_argument("-c", "--weight-decay", type=float, default=0.0, help="AdamW weight decay (2-D tensors)")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32",
                   help="--check: fp32, or bf16 autocast with fp32 master weights")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto", help="--check: where to run")
    p.add_argument("--compare", metavar="LOG", help="--check: our trainer's output for the same flags")
    p.add_argument("--tolerance", type=float, default=2e-2,
                   help="--compare: largest relative loss difference at any step (default 2e-2)")
    p.add_argument("--tolerance-first", type=float, default=5e-3,
                   help="--compare: largest relative loss difference at the first step (default 5e-3)")
    p.add_argument("--seed", type=int, default=42, help="torch's seed (--bench: the weights)")
    p.add_argument("--batch-candidates", default="64,48,32,24,16,8",
                   help="--bench: batches to try, largest first (default 64,48,32,24,16,8)")
    p.add_argument("--warmup", type=int, default=5,
                   help="--bench: untimed steps, the first compiles (default 5)")
    p.add_argument("--steps", type=int, default=20, help="--bench: timed steps (default 20)")
    p.add_argument("--no-compile", dest="compile", action="store_false", help="--bench: eager mode")
    args = p.parse_args(argv)
    if args.check:
        if not args.model:
            p.error("--check needs our model file: -e FILE")
        args.batch_size = args.batch_size or 4
        args.seq_len = args.seq_len or 64
        if args.max_steps < 1:
            p.error("-x must be at least 1")
    else:
        args.batch_size = args.batch_size or 0
        args.seq_len = args.seq_len or 1024
        if args.warmup < 1 or args.steps < 1:
            p.error("--warmup and --steps must be at least 1")
    if args.batch_size < 0 or args.seq_len < 1:
        p.error("-b and -t must be positive")
    return args


def main(argv):
    args = parse_args(argv)
    try:
        return run_check(args) if args.check else run_bench(args)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
