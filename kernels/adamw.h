// AdamW update (Loshchilov & Hutter, bias-corrected, decoupled weight decay) of one contiguous slice
// of n parameters: a whole tensor, or the piece of one that a ZeRO shard holds. Per element i:
//   g = grad_scale · grads[i]
//   m = β1·m + (1−β1)·g;   v = β2·v + (1−β2)·g²
//   p = p − lr·( m̂ / (sqrt(v̂) + eps) + weight_decay·p ),   m̂ = m / (1−β1^step),  v̂ = v / (1−β2^step)
// the same arithmetic, in fp32, as cpu/adamw.h's adamw_update.
//
// Inputs/outputs (device, n elements each): params floatX (read when master is null, always
// written), master float or null, m float, v float (read and written), grads floatX (read).
// Where p lives:
//   master == null: p is read from params and written back to params;
//   master != null: p is the fp32 master copy; params receives the new master value rounded to
//                   floatX (an exact copy in the fp32 build).
// Rounding to bf16 is stochastic (round up with probability equal to the distance from the lower
// neighbour, in units of the gap), so updates smaller than half a bf16 ulp survive on average
// instead of vanishing. The random bits are a counter-based hash of (seed, step, global_offset + i):
// a run is bitwise reproducible, and an element gets the same bits whichever slice or shard
// updates it. The trainer may pass the same seed every step (step changes the bits).
//
// Per call (adamw_bytes): with master, reads master, m, v (fp32) and grads, writes master, m, v and
// params: 24 + 2·sizeof(floatX) bytes per element (28 in bf16); without master, reads and writes
// params, m, v and reads grads: 16 + 3·sizeof(floatX) (22 in bf16). About 20 FLOPs and one 64-bit
// hash per element: memory bound.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/common.h"
#include "kernels/elementwise.h"

// Bytes one call moves (reads + writes), for the benchmark's bandwidth figure.
inline double adamw_bytes(size_t n, bool with_master) {
    const double per_element = with_master ? 3 * 4 * 2 + sizeof(floatX) * 2   // master, m, v; grad, param
                                           : 2 * 4 * 2 + sizeof(floatX) * 3;  // m, v; grad, param in+out
    return per_element * (double)n;
}

// ---- stochastic rounding to bf16. The bf16 of a float is its upper 16 bits; adding 16 random bits
// to the lower 16 and truncating rounds away from zero with probability (lower 16 bits) / 2^16,
// which is exactly the distance to the lower-magnitude neighbour over the gap: unbiased. A value
// that bf16 represents exactly (lower bits 0) never changes. Inf and NaN are returned unchanged
// (adding to a NaN's payload could carry into the sign bit).
__host__ __device__ inline __nv_bfloat16 stochastic_round_bf16(float x, uint32_t random_bits) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    if ((bits & 0x7f800000u) != 0x7f800000u) bits += random_bits & 0xffffu;  // finite: add the dither
    __nv_bfloat16_raw raw;
    raw.x = (unsigned short)(bits >> 16);
    return __nv_bfloat16(raw);
}

// 32 random bits for (key, counter): splitmix64's output function applied to key + counter·φ·2^64.
// Counter-based, so any thread computes the bits of any element without shared state.
__host__ __device__ inline uint32_t hash_random_bits(uint64_t key, uint64_t counter) {
    uint64_t z = key + counter * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (uint32_t)(z >> 32);
}
// The key of one update call: (seed, step) mixed, so that each step draws fresh bits.
inline uint64_t adamw_random_key(uint32_t seed, int step) {
    const uint64_t word = ((uint64_t)seed << 32) | (uint32_t)step;
    return ((uint64_t)hash_random_bits(word, 1) << 32) | hash_random_bits(word, 2);
}

// A parameter value as stored in the params array: stochastically rounded to bf16, exact in fp32.
template <typename T>
__device__ __forceinline__ T parameter_for_storage(float p, uint32_t random_bits);
template <>
__device__ __forceinline__ float parameter_for_storage<float>(float p, uint32_t) {
    return p;
}
template <>
__device__ __forceinline__ __nv_bfloat16 parameter_for_storage<__nv_bfloat16>(float p, uint32_t bits) {
    return stochastic_round_bf16(p, bits);
}

// The per-call constants of the update.
struct AdamWKernelArgs {
    float learning_rate, beta1, beta2, eps, weight_decay, grad_scale;
    float m_correction, v_correction;  // 1 − β1^step, 1 − β2^step
    uint64_t random_key;               // adamw_random_key(seed, step)
    size_t global_offset;              // index of this slice's first element in the whole model
};

// One element's update: m and v in place, returns the new parameter. Written as cpu/adamw.h does.
__device__ __forceinline__ float adamw_step(float p, float grad, float& m, float& v, const AdamWKernelArgs& s) {
    const float g = s.grad_scale * grad;
    m = s.beta1 * m + (1.0f - s.beta1) * g;
    v = s.beta2 * v + (1.0f - s.beta2) * g * g;
    const float m_hat = m / s.m_correction, v_hat = v / s.v_correction;
    return p - s.learning_rate * (m_hat / (sqrtf(v_hat) + s.eps) + s.weight_decay * p);
}

// Element i of the slice, one at a time (head, tail, and unaligned slices).
__device__ __forceinline__ void adamw_element(floatX* params, float* master, float* m, float* v,
                                              const floatX* grads, size_t i, const AdamWKernelArgs& s) {
    const float p_old = master != nullptr ? master[i] : to_float(params[i]);
    float mi = m[i], vi = v[i];
    const float p = adamw_step(p_old, to_float(grads[i]), mi, vi, s);
    m[i] = mi;
    v[i] = vi;
    if (master != nullptr) master[i] = p;
    params[i] = parameter_for_storage<floatX>(p, hash_random_bits(s.random_key, s.global_offset + i));
}

// One thread per group of 8 elements, 128-bit loads and stores of every array when kVector (all
// pointers 16-byte aligned at the groups), element by element otherwise; thread `groups` does the
// head and the tail.
template <bool kVector>
__global__ void adamw_kernel(floatX* params, float* master, float* m, float* v, const floatX* grads,
                             ElementGroups split, AdamWKernelArgs s) {
    const size_t g = global_thread_index();
    if (g < split.groups) {
        const size_t first = split.group_start(g);
        if (!kVector) {
            for (int k = 0; k < kGroupSize; k++) adamw_element(params, master, m, v, grads, first + k, s);
            return;
        }
        float grad[kGroupSize], p[kGroupSize], mk[kGroupSize], vk[kGroupSize];
        load_group(grad, grads + first);
        load_group(mk, m + first);
        load_group(vk, v + first);
        if (master != nullptr)
            load_group(p, master + first);
        else
            load_group(p, params + first);
        floatX stored[kGroupSize];
        for (int k = 0; k < kGroupSize; k++) {
            p[k] = adamw_step(p[k], grad[k], mk[k], vk[k], s);
            stored[k] = parameter_for_storage<floatX>(
                p[k], hash_random_bits(s.random_key, s.global_offset + first + k));
        }
        store_group(m + first, mk);
        store_group(v + first, vk);
        if (master != nullptr) store_group(master + first, p);
        store_group_raw(params + first, stored);
    } else if (g == split.groups) {
        for (size_t i = 0; i < split.head; i++) adamw_element(params, master, m, v, grads, i, s);
        for (size_t i = split.tail_start(); i < split.n; i++)
            adamw_element(params, master, m, v, grads, i, s);
    }
}

// ---- host launch function
constexpr int kAdamWBlockSize = 256;

// Updates params[0, n) (and master, m, v) from grads[0, n); global_offset is the index of params[0]
// among all the model's parameters (it selects the stochastic-rounding bits). step counts from 1.
inline void adamw_update(floatX* params, float* master, float* m, float* v, const floatX* grads, size_t n,
                         size_t global_offset, float learning_rate, float beta1, float beta2, float eps,
                         float weight_decay, float grad_scale, int step, uint32_t seed, cudaStream_t stream) {
    if (step < 1) {
        fprintf(stderr, "adamw_update: step must be >= 1 (got %d)\n", step);
        exit(1);
    }
    if (n == 0) return;
    AdamWKernelArgs s;
    s.learning_rate = learning_rate;
    s.beta1 = beta1;
    s.beta2 = beta2;
    s.eps = eps;
    s.weight_decay = weight_decay;
    s.grad_scale = grad_scale;
    s.m_correction = 1.0f - std::pow(beta1, (float)step);
    s.v_correction = 1.0f - std::pow(beta2, (float)step);
    s.random_key = adamw_random_key(seed, step);
    s.global_offset = global_offset;

    const ElementGroups split = split_into_groups(params, sizeof(floatX), n);
    const bool vector = aligned16_at(grads, split.head) && aligned16_at(master, split.head) &&
                        aligned16_at(m, split.head) && aligned16_at(v, split.head);
    const unsigned blocks = blocks_for(split.threads(), kAdamWBlockSize);
    if (vector)
        LAUNCH(adamw_kernel<true>, blocks, kAdamWBlockSize, 0, stream, params, master, m, v, grads, split, s);
    else
        LAUNCH(adamw_kernel<false>, blocks, kAdamWBlockSize, 0, stream, params, master, m, v, grads, split,
               s);
    CUDA_CHECK(cudaGetLastError());
}
