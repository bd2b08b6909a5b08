// Causal multi-head self-attention, flash-attention style: tiled over queries and keys with an
// online softmax, so nothing of size T×T ever reaches global memory.
//
// Per batch b and head h, with Q, K, V the head's (T × HS) slices of qkv and scale = 1/sqrt(HS):
//   S = scale · Q·Kᵀ,  S[i][j] = -inf for j > i (causal),  P = softmax_rows(S),  out = P·V
//   lse[i] = log Σ_j exp(S[i][j])                      (saved for backward: P = exp(S - lse))
// Backward, with dO = dout and D[i] = Σ_d dO[i][d]·out[i][d] = Σ_j P[i][j]·(dO·Vᵀ)[i][j]:
//   dV = Pᵀ·dO,  dS = P ⊙ (dO·Vᵀ − D),  dQ = scale · dS·K,  dK = scale · dSᵀ·Q
//
// Layouts (as cpu/attention.h): qkv (B, T, 3C) floatX with C = NH·HS, q, k and v side by side, head
// h at channels [h·HS, (h+1)·HS) of each; out, dout (B, T, C) floatX; lse (B, NH, T) fp32 (natural
// log); dqkv (B, T, 3C) floatX, overwritten.
//
// Per call (bf16, causal), N = B·NH·T²·HS:
//   forward:  reads qkv (6·B·T·C bytes) and writes out and lse (2·B·T·C + 4·B·NH·T bytes); the K/V
//             tiles are re-read by every query block, mostly from L2. FLOPs counted as 2·N (the two
//             causal products, 2·2·N/2); the tensor cores run ~2.2·N with tile granularity.
//   backward: reads qkv, out, dout, lse, writes dqkv and D (scratch, 4·B·NH·T bytes). FLOPs counted
//             as 2.5 × forward = 5·N; executed ~7·N: a dK/dV pass over key blocks (S, dP, dV, dK)
//             and a separate dQ pass over query blocks (S, dP, dQ), which keeps every sum in one
//             block and the result bitwise deterministic (no float atomics).
//
// Two implementations, each in a header of its own; the functions here pick one per call:
//   - kernels/attention_tensor_cores.h (bf16 build, HS = 32, 64, 128): FlashAttention-2 style,
//     mma.sync fed by ldmatrix from swizzled shared memory, tiles loaded by cp.async.
//   - kernels/attention_cuda_cores.h, fp32 arithmetic (the fp32 build, and other head sizes up to
//     256): a warp per row, one key per lane, K/V tiles in shared memory.
// kernels/attention_common.h holds what both share: the tensor layouts (attention_qkv_index, ...),
// the backward's row correction D, and attention_backward_scratch_bytes().
#pragma once
#include <cstdio>
#include <cstdlib>

#include "kernels/attention_common.h"
#include "kernels/attention_cuda_cores.h"
#include "kernels/attention_tensor_cores.h"
#include "kernels/common.h"

// Head sizes the kernels take: 32, 64 and 128 on tensor cores (bf16 build); any other up to 256
// through the CUDA-core path (slower). The trainer refuses others at start-up.
inline bool attention_supports_head_size(int HS) { return HS >= 1 && HS <= attention_simple::kMaxHeadSize; }
inline bool attention_uses_tensor_cores(int HS) {
#ifdef ENABLE_FP32
    (void)HS;
    return false;
#else
    return HS == 32 || HS == 64 || HS == 128;
#endif
}

inline void attention_check_shape(int B, int T, int NH, int HS) {
    if (B < 1 || T < 1 || NH < 1 || !attention_supports_head_size(HS) || B > 65535 || NH > 65535) {
        fprintf(stderr, "attention: unsupported shape B=%d T=%d NH=%d HS=%d (head size 1..%d)\n", B, T, NH,
                HS, attention_simple::kMaxHeadSize);
        exit(1);
    }
}

// ---- what the trainer calls
// Causal self-attention forward: out (B,T,C) and lse (B,NH,T) fp32 (natural log of the row sums
// of exp(scale·q·k)). Nothing of size T×T in global memory.
inline void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int HS,
                              cudaStream_t stream) {
    attention_check_shape(B, T, NH, HS);
#ifndef ENABLE_FP32
    using namespace attention_tc;
    if (HS == 32)
        return attention_forward_tensor_cores<32, kCpAsyncPipeline>(out, lse, qkv, B, T, NH, stream);
    if (HS == 64)
        return attention_forward_tensor_cores<64, kCpAsyncPipeline>(out, lse, qkv, B, T, NH, stream);
    if (HS == 128)
        return attention_forward_tensor_cores<128, kCpAsyncPipeline>(out, lse, qkv, B, T, NH, stream);
#endif
    attention_forward_simple(out, lse, qkv, B, T, NH, HS, stream);
}

// dqkv (B,T,3C) overwritten with dQ, dK, dV; scratch: attention_backward_scratch_bytes() bytes.
// Deterministic: every value is summed by one thread in a fixed order.
inline void attention_backward(floatX* dqkv, void* scratch, const floatX* dout, const floatX* out,
                               const float* lse, const floatX* qkv, int B, int T, int NH, int HS,
                               cudaStream_t stream) {
    attention_check_shape(B, T, NH, HS);
#ifndef ENABLE_FP32
    using namespace attention_tc;
    if (HS == 32)
        return attention_backward_tensor_cores<32, kCpAsyncPipeline>(dqkv, scratch, dout, out, lse, qkv, B, T,
                                                                     NH, stream);
    if (HS == 64)
        return attention_backward_tensor_cores<64, kCpAsyncPipeline>(dqkv, scratch, dout, out, lse, qkv, B, T,
                                                                     NH, stream);
    if (HS == 128)
        return attention_backward_tensor_cores<128, kCpAsyncPipeline>(dqkv, scratch, dout, out, lse, qkv, B,
                                                                      T, NH, stream);
#endif
    attention_backward_simple(dqkv, scratch, dout, out, lse, qkv, B, T, NH, HS, stream);
}
