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
// Grouped-query attention (Llama 3; cpu/gqa_attention.h): NH query heads share KV key/value heads
// (NH % KV == 0), query head h reading K and V of head h / (NH/KV). qkv and dqkv are then
// (B, T, (NH + 2·KV)·HS): each token's NH query heads, then its KV key heads, then its KV value heads
// (kernels/rope.h's layout); out, dout and lse are as above. dK and dV of a key/value head are the
// sums over its group's query heads. KV == NH is the case above, bit for bit. Nothing copies K or V:
// the forward and dQ blocks of a group's query heads read the same K/V tiles (from L2 after the
// first), and the dK/dV pass has a block per key block of a key/value head that walks its group's
// query heads one after another, summing in registers (no partials in memory, no atomics); it reads
// the group's Q, dO, lse and D once per key block as plain attention does, over NH/KV times fewer
// blocks. All three implementations below take every KV.
//
// Per call (bf16, causal), N = B·NH·T²·HS, W = (NH + 2·KV)·HS the width of a token's qkv row (3C
// for multi-head attention):
//   forward:  reads qkv (2·B·T·W bytes, 6·B·T·C at KV == NH) and writes out and lse (2·B·T·C +
//             4·B·NH·T bytes); the K/V tiles are re-read by every query block of the group's query
//             heads, mostly from L2. FLOPs counted as 2·N (the two causal products, 2·2·N/2); the
//             tensor cores run ~2.2·N with tile granularity. N counts query heads: GQA does as many
//             FLOPs as multi-head attention with NH heads, and moves fewer K/V bytes.
//   backward: reads qkv, out, dout, lse, writes dqkv (2·B·T·W bytes) and D (scratch, 4·B·NH·T
//             bytes). FLOPs counted as 2.5 × forward = 5·N; executed ~7·N: a dK/dV pass over key
//             blocks (S, dP, dV, dK) and a separate dQ pass over query blocks (S, dP, dQ), which
//             keeps every sum in one block and the result bitwise deterministic (no float atomics).
//
// Three implementations, each in a header of its own; the functions here pick one per call:
//   - kernels/attention_hopper.h (bf16 build, HS = 64, 128, sm_90a): warp-specialised, a producer
//     warpgroup loading tiles by TMA into an mbarrier-guarded ring, consumer warpgroups multiplying
//     with wgmma; picked on sm_90 devices when the binary holds sm_90a code.
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
#include "kernels/attention_hopper.h"
#include "kernels/attention_tensor_cores.h"
#include "kernels/common.h"
#include <cstring>

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

// ---- which implementation: a process-wide choice, set once at start-up (the trainers'
// --attention-kernel NAME; "auto" unless given). auto: hopper where it can run (bf16, HS 64/128, an
// sm_90 GPU running sm_90a code), else mma (bf16, HS 32/64/128), else cuda-cores. Under the
// emulator, auto never picks hopper, so the emulated suites keep testing mma unless told otherwise.
// A forced choice that cannot serve a shape is an error, not a silent fallback.
enum class AttentionKernel { Auto, Hopper, Mma, CudaCores };
inline AttentionKernel& attention_kernel_setting() {
    static AttentionKernel kernel = AttentionKernel::Auto;
    return kernel;
}
// Parses "auto", "hopper", "mma", "cuda-cores"; false for anything else.
inline bool parse_attention_kernel(const char* name, AttentionKernel* out) {
    static const struct { const char* name; AttentionKernel kernel; } names[] = {
        {"auto", AttentionKernel::Auto}, {"hopper", AttentionKernel::Hopper}, {"mma", AttentionKernel::Mma},
        {"cuda-cores", AttentionKernel::CudaCores}};
    for (const auto& n : names)
        if (strcmp(name, n.name) == 0) return *out = n.kernel, true;
    return false;
}
inline void set_attention_kernel(const char* name) {
    if (!parse_attention_kernel(name, &attention_kernel_setting())) {
        fprintf(stderr, "attention: unknown kernel '%s' (auto, hopper, mma, cuda-cores)\n", name);
        exit(1);
    }
}
// Whether the Hopper kernels can run here: an sm_90 device running this binary's sm_90a code.
inline bool attention_hopper_runnable() {
#if defined(ENABLE_FP32)
    return false;
#elif defined(__CUDACC__)
    static const bool runnable = [] {
        if (!hopper_units_available()) return false;
        cudaFuncAttributes attributes;
        if (cudaFuncGetAttributes(&attributes, attention_hopper::forward_kernel<64, false, 128>) != cudaSuccess)
            return false;
        return attributes.binaryVersion == 90;
    }();
    return runnable;
#else
    return true;
#endif
}
// Every kernel takes grouped-query shapes (KV < NH key/value heads): the choice depends on the head
// size and the device only.
inline AttentionKernel attention_kernel_for(int HS) {
    const AttentionKernel chosen = attention_kernel_setting();
    const bool hopper_ok = (HS == 64 || HS == 128) && attention_hopper_runnable();
    const bool mma_ok = attention_uses_tensor_cores(HS);
    const char* refused = nullptr;
    if (chosen == AttentionKernel::Hopper && !hopper_ok)
        refused = "hopper needs the bf16 build, head size 64 or 128 and an sm_90 GPU (sm_90a code)";
    if (chosen == AttentionKernel::Mma && !mma_ok) refused = "mma needs the bf16 build and head size 32, 64 or 128";
    if (refused) {
        fprintf(stderr, "attention: --attention-kernel: %s (head size %d)\n", refused, HS);
        exit(1);
    }
    if (chosen != AttentionKernel::Auto) return chosen;
#ifdef __CUDACC__
    if (hopper_ok) return AttentionKernel::Hopper;
#endif
    return mma_ok ? AttentionKernel::Mma : AttentionKernel::CudaCores;
}

inline void attention_check_shape(int B, int T, int NH, int KV, int HS) {
    if (B < 1 || T < 1 || NH < 1 || KV < 1 || NH % KV != 0 || !attention_supports_head_size(HS) || B > 65535 ||
        NH > 65535) {
        fprintf(stderr,
                "attention: unsupported shape B=%d T=%d NH=%d KV=%d HS=%d (head size 1..%d, NH a multiple of KV)\n",
                B, T, NH, KV, HS, attention_simple::kMaxHeadSize);
        exit(1);
    }
}

// ---- what the trainer calls
// Causal self-attention forward: out (B,T,C) and lse (B,NH,T) fp32 (natural log of the row sums
// of exp(scale·q·k)). Nothing of size T×T in global memory. KV key/value heads (see the top).
inline void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int KV, int HS,
                              cudaStream_t stream) {
    attention_check_shape(B, T, NH, KV, HS);
    const AttentionKernel kernel = attention_kernel_for(HS);
#ifndef ENABLE_FP32
    if (kernel == AttentionKernel::Hopper) {  // its launches are checked here
        if (HS == 64)
            attention_forward_hopper<64>(out, lse, qkv, B, T, NH, KV, stream);
        else
            attention_forward_hopper<128>(out, lse, qkv, B, T, NH, KV, stream);
        CUDA_CHECK(cudaGetLastError());
        return;
    }
    using namespace attention_tc;
    if (kernel == AttentionKernel::CudaCores)
        return attention_forward_simple(out, lse, qkv, B, T, NH, KV, HS, stream);
    if (HS == 32)
        return attention_forward_tensor_cores<32, kCpAsyncPipeline>(out, lse, qkv, B, T, NH, KV, stream);
    if (HS == 64)
        return attention_forward_tensor_cores<64, kCpAsyncPipeline>(out, lse, qkv, B, T, NH, KV, stream);
    if (HS == 128)
        return attention_forward_tensor_cores<128, kCpAsyncPipeline>(out, lse, qkv, B, T, NH, KV, stream);
#endif
    (void)kernel;
    attention_forward_simple(out, lse, qkv, B, T, NH, KV, HS, stream);
}
// Multi-head attention: as many key/value heads as query heads, qkv (B, T, 3C).
inline void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int HS,
                              cudaStream_t stream) {
    attention_forward(out, lse, qkv, B, T, NH, NH, HS, stream);
}

// dqkv (B,T,(NH+2·KV)·HS) overwritten with dQ, dK, dV; scratch: attention_backward_scratch_bytes()
// bytes. Deterministic: every value is summed by one thread in a fixed order.
inline void attention_backward(floatX* dqkv, void* scratch, const floatX* dout, const floatX* out,
                               const float* lse, const floatX* qkv, int B, int T, int NH, int KV, int HS,
                               cudaStream_t stream) {
    attention_check_shape(B, T, NH, KV, HS);
    const AttentionKernel kernel = attention_kernel_for(HS);
#ifndef ENABLE_FP32
    if (kernel == AttentionKernel::Hopper) {  // its launches are checked here (the last error sticks)
        if (HS == 64)
            attention_backward_hopper<64>(dqkv, scratch, dout, out, lse, qkv, B, T, NH, KV, stream);
        else
            attention_backward_hopper<128>(dqkv, scratch, dout, out, lse, qkv, B, T, NH, KV, stream);
        CUDA_CHECK(cudaGetLastError());
        return;
    }
    using namespace attention_tc;
    if (kernel == AttentionKernel::CudaCores)
        return attention_backward_simple(dqkv, scratch, dout, out, lse, qkv, B, T, NH, KV, HS, stream);
    if (HS == 32)
        return attention_backward_tensor_cores<32, kCpAsyncPipeline>(dqkv, scratch, dout, out, lse, qkv, B, T,
                                                                     NH, KV, stream);
    if (HS == 64)
        return attention_backward_tensor_cores<64, kCpAsyncPipeline>(dqkv, scratch, dout, out, lse, qkv, B, T,
                                                                     NH, KV, stream);
    if (HS == 128)
        return attention_backward_tensor_cores<128, kCpAsyncPipeline>(dqkv, scratch, dout, out, lse, qkv, B,
                                                                      T, NH, KV, stream);
#endif
    (void)kernel;
    attention_backward_simple(dqkv, scratch, dout, out, lse, qkv, B, T, NH, KV, HS, stream);
}
// Multi-head attention: as many key/value heads as query heads, dqkv (B, T, 3C).
inline void attention_backward(floatX* dqkv, void* scratch, const floatX* dout, const floatX* out,
                               const float* lse, const floatX* qkv, int B, int T, int NH, int HS,
                               cudaStream_t stream) {
    attention_backward(dqkv, scratch, dout, out, lse, qkv, B, T, NH, NH, HS, stream);
}
