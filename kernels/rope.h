// Rotary position embeddings (RoPE) applied in place to the query and key heads of the fused qkv
// activation, in the "rotate half" pairing of cpu/rope.h: within a head of hs channels, channel i and
// channel i + hs/2 (i < hs/2) are rotated by the angle t·f_i of the token's position t:
//   forward    x'[i]        = x[i] · cos − x[i + hs/2] · sin
//              x'[i + hs/2] = x[i + hs/2] · cos + x[i] · sin
//   backward   the inverse rotation (sin negated) of the gradient, in place: the gradient of the
//              rotated q and k becomes that of the projections' outputs
//
// Layout of qkv (and of its gradient): (B, T, (H + 2·KV)·hs) floatX, each token's row holding its H
// query heads, then its KV key heads, then its KV value heads, head j at channels [j·hs, (j+1)·hs),
// as the q_proj, k_proj and v_proj weights stacked in that order produce it. The first H + KV heads
// of every row are rotated; the value heads are neither read nor written. Position t is the row's
// index within its sequence (row mod T).
// cos_table and sin_table are (T, hs/2) fp32, entry (t, i) = cos and sin of t·f_i, built on the host
// by base/rope_tables.h's rope_tables<float> (Llama 3.1's frequency scaling included) and copied once.
//
// Requirements: hs even. With hs/2 a multiple of the 128-bit vector (8 bf16, 4 fp32) and 16-byte
// aligned pointers, each thread moves 128 bits of each half of a head; otherwise a scalar kernel
// (one pair per thread) does the same work.
// Per call, S = sizeof(floatX): reads and writes B·T·(H + KV)·hs·S bytes each, and reads the tables,
// 2·T·(hs/2)·4 bytes (once from memory; every head and sequence reuses them from cache); 3 FLOPs per
// element rotated.
#pragma once
#include <cstdint>

#include "kernels/common.h"

// n consecutive floatX (n = the 128-bit vector's size, or 1) as floats, and back.
template <int P>
__device__ __forceinline__ void rope_load(float (&out)[P], const floatX* in) {
    if constexpr (P == Packed128<floatX>::size) {
        const Packed128<floatX> packed = load128(in);
#pragma unroll
        for (int k = 0; k < P; k++) out[k] = to_float(packed[k]);
    } else {
#pragma unroll
        for (int k = 0; k < P; k++) out[k] = to_float(in[k]);
    }
}
template <int P>
__device__ __forceinline__ void rope_store(floatX* out, const float (&in)[P]) {
    if constexpr (P == Packed128<floatX>::size) {
        Packed128<floatX> packed;
#pragma unroll
        for (int k = 0; k < P; k++) packed[k] = from_float<floatX>(in[k]);
        store128(out, packed);
    } else {
#pragma unroll
        for (int k = 0; k < P; k++) out[k] = from_float<floatX>(in[k]);
    }
}
// P consecutive table entries: float4 loads when P is a multiple of 4.
template <int P>
__device__ __forceinline__ void rope_load_table(float (&out)[P], const float* in) {
    if constexpr (P % 4 == 0) {
#pragma unroll
        for (int k = 0; k < P; k += 4) {
            const float4 four = *reinterpret_cast<const float4*>(in + k);
            out[k] = four.x, out[k + 1] = four.y, out[k + 2] = four.z, out[k + 3] = four.w;
        }
    } else {
#pragma unroll
        for (int k = 0; k < P; k++) out[k] = in[k];
    }
}

// One thread per P consecutive pairs of one q or k head of one token. sign = +1 rotates forward,
// −1 back.
template <int P>
__global__ void rope_rotate_kernel(floatX* qkv, const float* __restrict__ cos_table,
                                   const float* __restrict__ sin_table, int B, int T, int H, int KV, int hs,
                                   float sign) {
    const int half = hs / 2, groups = half / P, rotated = H + KV;
    const size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= (size_t)B * T * rotated * groups) return;
    const int i = (int)(index % groups) * P;
    const size_t head_of_token = index / groups;
    const int head = (int)(head_of_token % rotated);
    const size_t token = head_of_token / rotated;
    const int t = (int)(token % T);

    floatX* x = qkv + token * (size_t)(rotated + KV) * hs + (size_t)head * hs + i;
    float x1[P], x2[P], c[P], s[P];
    rope_load(x1, x);
    rope_load(x2, x + half);
    rope_load_table(c, cos_table + (size_t)t * half + i);
    rope_load_table(s, sin_table + (size_t)t * half + i);
    float y1[P], y2[P];
#pragma unroll
    for (int k = 0; k < P; k++) {
        const float sn = sign * s[k];
        y1[k] = x1[k] * c[k] - x2[k] * sn;
        y2[k] = x2[k] * c[k] + x1[k] * sn;
    }
    rope_store(x, y1);
    rope_store(x + half, y2);
}

// ---- host launch functions

constexpr int ROPE_BLOCK_SIZE = 256;

// Why a shape or pointer cannot be handled, or nullptr when it can.
inline const char* rope_shape_error(int B, int T, int H, int KV, int hs) {
    if (B < 0 || T < 0) return "B and T must not be negative";
    if (H < 1 || KV < 1) return "H and KV must be positive";
    if (hs < 2 || hs % 2 != 0) return "the head size must be even (RoPE rotates pairs)";
    return nullptr;
}
// Whether the 128-bit kernel applies: whole vectors in each half of a head, aligned pointers.
inline bool rope_vectorised(const void* qkv, const float* cos_table, const float* sin_table, int hs) {
    constexpr int P = Packed128<floatX>::size;
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    return (hs / 2) % P == 0 && aligned(qkv) && aligned(cos_table) && aligned(sin_table);
}

inline void rope_launch(const char* function, floatX* qkv, const float* cos_table, const float* sin_table, int B,
                        int T, int H, int KV, int hs, float sign, cudaStream_t stream) {
    if (const char* error = rope_shape_error(B, T, H, KV, hs)) {
        fprintf(stderr, "%s: B=%d T=%d H=%d KV=%d hs=%d: %s\n", function, B, T, H, KV, hs, error);
        exit(EXIT_FAILURE);
    }
    const size_t pairs = (size_t)B * T * (H + KV) * (hs / 2);
    if (pairs == 0) return;
    if (rope_vectorised(qkv, cos_table, sin_table, hs)) {
        constexpr int P = Packed128<floatX>::size;
        LAUNCH(rope_rotate_kernel<P>, ceil_div(pairs / P, ROPE_BLOCK_SIZE), ROPE_BLOCK_SIZE, 0, stream, qkv,
               cos_table, sin_table, B, T, H, KV, hs, sign);
    } else {
        LAUNCH(rope_rotate_kernel<1>, ceil_div(pairs, ROPE_BLOCK_SIZE), ROPE_BLOCK_SIZE, 0, stream, qkv,
               cos_table, sin_table, B, T, H, KV, hs, sign);
    }
    CUDA_CHECK(cudaGetLastError());
}

// Rotates the q and k heads of qkv (B, T, (H + 2·KV)·hs) in place by their positions' angles.
inline void rope_forward(floatX* qkv, const float* cos_table, const float* sin_table, int B, int T, int H,
                         int KV, int hs, cudaStream_t stream) {
    rope_launch("rope_forward", qkv, cos_table, sin_table, B, T, H, KV, hs, 1.0f, stream);
}

// The gradient of rope_forward: rotates the q and k heads of dqkv back, in place (OVERWRITES them:
// the gradient of the rotated heads becomes the gradient of the unrotated ones; v heads untouched).
inline void rope_backward(floatX* dqkv, const float* cos_table, const float* sin_table, int B, int T, int H,
                          int KV, int hs, cudaStream_t stream) {
    rope_launch("rope_backward", dqkv, cos_table, sin_table, B, T, H, KV, hs, -1.0f, stream);
}
