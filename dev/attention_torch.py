#!/usr/bin/env python3
"""The attention peer of dev/cuda/attention.cu: PyTorch's causal scaled_dot_product_attention (its
flash and cuDNN backends, bf16) at the shapes that benchmark times, in TFLOP/s counted the same way
(causal half: forward 2*2*B*NH*T^2*HS/2, backward 2.5x that) and as a share of the bf16 GEMM rate
measured in the same run (torch.matmul, 8192^3). Median of repeated runs timed with CUDA events after
warm-up, on random inputs. Python 3 standard library and torch only.

Run on the GPU machine beside dev/bin/cuda_attention, so that both sets of figures come from one card
in one session:
    python3 dev/attention_torch.py
"""
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# (B, T, NH, HS): the shapes of dev/cuda/attention.cu on a GPU, in its order.
SHAPES = [(8, 1024, 12, 64), (16, 1024, 12, 64), (8, 1024, 24, 32), (8, 1024, 8, 128), (8, 2048, 12, 64)]
BACKENDS = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]


def median_ms(fn, warmup=5, reps=30):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def gemm_tflops():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    return 2 * 8192**3 / median_ms(lambda: a @ b) / 1e9


def main():
    if not torch.cuda.is_available():
        print("SKIPPED attention_torch (no CUDA device)")
        return 0
    print(f"device: {torch.cuda.get_device_name()}; PyTorch {torch.__version__}")
    ceiling = gemm_tflops()
    print(f"bf16 GEMM rate (torch.matmul 8192^3): {ceiling:.1f} TFLOP/s")
    for B, T, NH, HS in SHAPES:
        q, k, v = (torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        dout = torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16)
        fwd_flop = 2 * 2 * B * NH * T * T * HS / 2
        for name, backend in BACKENDS:
            try:
                with sdpa_kernel(backend):
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    fwd = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
                    both = median_ms(lambda: torch.autograd.grad(
                        F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), dout))
            except RuntimeError as e:
                print(f"B={B} T={T} NH={NH} HS={HS} {name}: not available ({str(e).splitlines()[0]})")
                continue
            del out
            for what, ms, flop in (("fwd ", fwd, fwd_flop), ("bwd ", both - fwd, 2.5 * fwd_flop),
                                   ("both", both, 3.5 * fwd_flop)):
                tflops = flop / ms / 1e9
                print(f"B={B} T={T} NH={NH} HS={HS} {what} torch {name:5s} {ms:8.3f} ms "
                      f"{tflops:7.1f} TFLOP/s {100 * tflops / ceiling:5.1f}% of the bf16 GEMM rate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
