// Attention of one new token over a key/value cache: the step of incremental decoding (generation)
// that replaces attention_forward over the whole prefix, with grouped-query attention: NH query heads
// share KV key/value heads (NH % KV == 0), query head h reading key/value head kv = h / (NH/KV), as
// attention.h groups them (KV = NH is GPT-2's multi-head attention). With the new token at position
// pos and scale = 1/sqrt(HS):
//   K[kv][pos] = k_kv,  V[kv][pos] = v_kv          (the new token's keys and values appended)
//   per query head h, reading kv = h / (NH/KV):
//     s_j = scale · q_h·K[kv][j]  (j = 0..pos),  p = softmax(s),  out_h = Σ_j p_j · V[kv][j]
// No mask is needed: the cache holds only positions up to pos.
//
// Shapes and types: qkv ((NH + 2·KV)·HS) floatX, the new token's NH query heads, then its KV key heads,
// then its KV value heads, head j at channels [j·HS, (j+1)·HS) of its part (as attention.h; for GPT-2
// the q, k and v thirds of 3C); k_cache, v_cache (KV, capacity, HS) floatX, one layer's, head-major so
// that each key/value head's keys are one (pos+1) × HS matrix; out (NH·HS) floatX. Scores, softmax and
// sums in fp32.
// Per call, e = sizeof(floatX), Ckv = KV·HS: reads (NH·HS + 2·Ckv)·e + 2·pos·Ckv·e (the cache; each
// key/value head's rows by each of the NH/KV query heads that share it), writes 2·Ckv·e (the new row)
// + NH·HS·e; 4·(pos+1)·NH·HS FLOPs. Memory-bound.
//
// One block per query head (NH blocks of 256 threads): a warp per key for the scores (lanes across
// the head's channels, then a warp sum), a block max and sum for the softmax, then the weighted sum
// of values with the block split into 256/HS groups of HS threads, group g taking keys g, g+groups,
// ...; the groups' partial sums are added in group order, so the result is the same every run. The
// first query head of each group writes its key/value head's new row; every block reads position pos
// from qkv rather than from the cache, so no block waits for another's write.
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kernels/common.h"

constexpr int DECODE_ATTENTION_THREADS = 256;
constexpr size_t DECODE_ATTENTION_MAX_SHARED = 48 * 1024;  // without opting in to more

// Floats of dynamic shared memory: q (HS), the scores (pos+1), the groups' partial sums (groups·HS).
__host__ __device__ inline size_t decode_attention_shared_floats(int length, int HS) {
    return (size_t)HS + length + (size_t)(DECODE_ATTENTION_THREADS / HS) * HS;
}

static __global__ void __launch_bounds__(DECODE_ATTENTION_THREADS)
    decode_attention_kernel(floatX* __restrict__ out, floatX* __restrict__ k_cache,
                            floatX* __restrict__ v_cache, const floatX* __restrict__ qkv, int pos,
                            int NH, int KV, int HS, int capacity) {
    DYNAMIC_SHARED(float, shared);
    const int h = blockIdx.x, group = NH / KV, kv = h / group, length = pos + 1;
    float* q = shared;                 // (HS)
    float* scores = q + HS;            // (length): scores, then exp(score − max)
    float* partial = scores + length;  // (groups, HS)
    floatX* K = k_cache + (size_t)kv * capacity * HS;  // (capacity, HS)
    floatX* V = v_cache + (size_t)kv * capacity * HS;
    const floatX* new_k = qkv + (size_t)(NH + kv) * HS;  // the new token's key and value head
    const floatX* new_v = qkv + (size_t)(NH + KV + kv) * HS;
    // Row j of the keys and values: position pos from qkv, the earlier ones from the cache.
    auto key = [&](int j) { return j == pos ? new_k : K + (size_t)j * HS; };
    auto value = [&](int j) { return j == pos ? new_v : V + (size_t)j * HS; };

    // 1. Keep q in shared memory; the group's first query head appends the new key and value.
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        q[d] = to_float(qkv[(size_t)h * HS + d]);
        if (h % group == 0) {
            K[(size_t)pos * HS + d] = new_k[d];
            V[(size_t)pos * HS + d] = new_v[d];
        }
    }
    __syncthreads();

    // 2. Scores: one warp per key.
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const float scale = 1.0f / sqrtf((float)HS);
    for (int j = warp; j < length; j += warps) {
        float dot = 0.0f;
        const floatX* k = key(j);
        for (int d = lane; d < HS; d += 32) dot += q[d] * to_float(k[d]);
        dot = warp_reduce_sum(dot);
        if (lane == 0) scores[j] = dot * scale;
    }
    __syncthreads();

    // 3. Softmax numerator and denominator (block_reduce's barriers publish the scores).
    float max_score = -INFINITY;
    for (int j = threadIdx.x; j < length; j += blockDim.x) max_score = fmaxf(max_score, scores[j]);
    max_score = block_reduce_max(max_score);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < length; j += blockDim.x) {
        const float e = expf(scores[j] - max_score);
        scores[j] = e;
        sum += e;
    }
    sum = block_reduce_sum(sum);

    // 4. out = Σ_j p_j·V[j]: group g of HS threads sums keys g, g + groups, ...; then the groups in order.
    const int groups = blockDim.x / HS, g = threadIdx.x / HS, d = threadIdx.x % HS;
    if (g < groups) {
        float acc = 0.0f;
        for (int j = g; j < length; j += groups) acc += scores[j] * to_float(value(j)[d]);
        partial[g * HS + d] = acc;
    }
    __syncthreads();
    for (int c = threadIdx.x; c < HS; c += blockDim.x) {
        float acc = 0.0f;
        for (int k = 0; k < groups; k++) acc += partial[k * HS + c];
        out[h * HS + c] = from_float<floatX>(acc / sum);
    }
}

// Why the shape cannot be handled, or nullptr (tests call it directly).
inline const char* decode_attention_shape_error(int pos, int NH, int KV, int HS, int capacity) {
    if (NH < 1 || NH > 65535) return "NH must be from 1 to 65535";
    if (KV < 1 || NH % KV != 0) return "the key/value heads KV must divide the query heads NH";
    if (HS < 1 || HS > DECODE_ATTENTION_THREADS) return "head size must be from 1 to 256";
    if (pos < 0 || pos >= capacity) return "pos must be within the cache's capacity";
    if (decode_attention_shared_floats(capacity, HS) * sizeof(float) > DECODE_ATTENTION_MAX_SHARED)
        return "the cache is too long for the scores to fit in 48 KiB of shared memory";
    return nullptr;
}

// Appends the new token's keys and values (from qkv) at position pos of this layer's caches and
// writes its attention output over positions 0..pos into out.
inline void decode_attention_forward(floatX* out, floatX* k_cache, floatX* v_cache, const floatX* qkv,
                                     int pos, int NH, int KV, int HS, int capacity, cudaStream_t stream) {
    const char* error = decode_attention_shape_error(pos, NH, KV, HS, capacity);
    if (error) {
        fprintf(stderr, "decode_attention_forward: pos=%d NH=%d KV=%d HS=%d capacity=%d: %s\n", pos, NH,
                KV, HS, capacity, error);
        exit(EXIT_FAILURE);
    }
    const size_t shared_bytes = decode_attention_shared_floats(pos + 1, HS) * sizeof(float);
    LAUNCH(decode_attention_kernel, NH, DECODE_ATTENTION_THREADS, shared_bytes, stream, out, k_cache,
           v_cache, qkv, pos, NH, KV, HS, capacity);
    CUDA_CHECK(cudaGetLastError());
}
