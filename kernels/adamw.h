// AdamW update (Loshchilov & Hutter, bias-corrected, decoupled weight decay) of one contiguous slice
// of n parameters: a whole tensor, or the piece of one that a ZeRO shard holds. Per element i:
//   g = grad_scale · grads[i]
//   m = β1·m + (1−β1)·g;   v = β2·v + (1−β2)·g²
//   p = p − lr·( m̂ / (sqrt(v̂) + eps) + weight_decay·p ),   m̂ = m / (1−β1^step),  v̂ = v / (1−β2^step)
// the same arithmetic, in fp32, as cpu/adamw.h's adamw_update.
//
// Inputs/outputs (device, n elements each): params floatX (read when master is null, always
// written), master float or null, m float, v float (read and written), grads floatX or float (read:
// G, the gradients' type; float where they were accumulated and reduced in fp32).
// Where p lives:
//   master == null: p is read from params and written back to params;
//   master != null: p is the fp32 master copy; params receives the new master value rounded to
//                   floatX (an exact copy in the fp32 build).
// Rounding to bf16 is stochastic (round up with probability equal to the distance from the lower
// neighbour, in units of the gap), so updates smaller than half a bf16 ulp survive on average
// instead of vanishing. The random bits are a counter-based hash of (seed, step, global_offset + i):
// a run is bitwise reproducible, and an element gets the same bits whichever slice or shard
// updates it. The trainer may pass the same seed every step (step changes the bits).
// adamw_update does one slice per launch; adamw_update_multi_tensor does many slices (a device table
// of runs, planned once) in one launch, with the clipping factor read from device memory, bit for bit
// as the per-slice calls would; its second form reads every per-step value from device memory
// (AdamWDeviceStep), so that the same launch serves every step (a CUDA graph replays it).
//
// Per call (adamw_bytes): with master, reads master, m, v (fp32) and grads, writes master, m, v and
// params: 24 + 2·sizeof(floatX) bytes per element (28 in bf16); without master, reads and writes
// params, m, v and reads grads: 16 + 3·sizeof(floatX) (22 in bf16). About 20 FLOPs and one 64-bit
// hash per element: memory bound.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

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

// One element's update: m and v in place, returns the new parameter. The formula of cpu/adamw.h, with
// each multiply-add written as an explicit fmaf: a compiler may otherwise fuse a product and a sum
// into one rounding in one inlined copy and not in another (nvcc did, between the 128-bit and the
// element-by-element paths, on an H100), and then shards, slices and unaligned arrays would not get
// the same bits. Every other operation here is a single product, quotient, sum or square root.
// The step is in two pieces that LAMB (kernels/layer_adaptive.h) uses too:
//   adamw_moments:   m and v after the scaled gradient g;
//   adamw_direction: the update direction m̂/(√v̂ + eps) + weight_decay·p from those m and v.
__device__ __forceinline__ void adamw_moments(float g, float& m, float& v, const AdamWKernelArgs& s) {
    m = fmaf(s.beta1, m, (1.0f - s.beta1) * g);
    v = fmaf(s.beta2, v, ((1.0f - s.beta2) * g) * g);
}
__device__ __forceinline__ float adamw_direction(float p, float m, float v, const AdamWKernelArgs& s) {
    const float m_hat = m / s.m_correction, v_hat = v / s.v_correction;
    return fmaf(s.weight_decay, p, m_hat / (sqrtf(v_hat) + s.eps));
}
__device__ __forceinline__ float adamw_step(float p, float grad, float& m, float& v, const AdamWKernelArgs& s) {
    adamw_moments(s.grad_scale * grad, m, v, s);
    return fmaf(-s.learning_rate, adamw_direction(p, m, v, s), p);
}

// Element i of the slice, one at a time (head, tail, and unaligned slices).
template <typename G>
__device__ __forceinline__ void adamw_element(floatX* params, float* master, float* m, float* v,
                                              const G* grads, size_t i, const AdamWKernelArgs& s) {
    const float p_old = master != nullptr ? master[i] : to_float(params[i]);
    float mi = m[i], vi = v[i];
    const float p = adamw_step(p_old, to_float(grads[i]), mi, vi, s);
    m[i] = mi;
    v[i] = vi;
    if (master != nullptr) master[i] = p;
    params[i] = parameter_for_storage<floatX>(p, hash_random_bits(s.random_key, s.global_offset + i));
}

// Thread g of a one-thread-per-group launch over one slice: group g, 128-bit loads and stores of
// every array when kVector (all pointers 16-byte aligned at the groups), element by element
// otherwise; thread `groups` does the head and the tail.
template <bool kVector, typename G>
__device__ __forceinline__ void adamw_thread(floatX* params, float* master, float* m, float* v,
                                             const G* grads, const ElementGroups& split, size_t g,
                                             const AdamWKernelArgs& s) {
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

// One slice: one thread per group of 8 elements (adamw_thread).
template <bool kVector>
__global__ void adamw_kernel(floatX* params, float* master, float* m, float* v, const floatX* grads,
                             ElementGroups split, AdamWKernelArgs s) {
    adamw_thread<kVector>(params, master, m, v, grads, split, global_thread_index(), s);
}

// ---- many slices in one launch. The trainer's parameters are ~150 runs (a tensor, or the part of
// one a ZeRO shard holds); one launch per run costs a launch latency each and leaves the GPU idle
// between small runs. Here a device table describes every run, each run owns a contiguous range of
// the grid's blocks, and every thread does exactly what thread (its index within the run's blocks)
// of adamw_kernel would do for that run alone: the same arithmetic, the same random bits (keyed by
// the run's global offset), hence the same bits in params, master, m and v.
struct AdamWRunEntry {
    floatX* params;
    float* master;  // null: no fp32 master copy
    float* m;
    float* v;
    const floatX* grads;
    const float* grads_fp32;  // instead of grads, where the gradients are fp32 (null: grads)
    ElementGroups split;   // split_into_groups(params, ...), as adamw_update makes it
    size_t global_offset;  // index of params[0] in the whole model
    unsigned first_block;  // first block of the grid that works on this run
    int vector;            // 1: 128-bit path (as adamw_update would choose), 0: element by element
    int decay;             // 1: weight decay applies to this run, 0: it does not (biases, LayerNorm)
};

// Block → run: the last run whose first block is at or before this block (runs sorted by
// first_block, every run at least one block). Entry: AdamWRunEntry, or a table entry that extends it.
template <typename Entry>
__device__ __forceinline__ int run_of_block(const Entry* table, int runs, unsigned block) {
    int lo = 0, hi = runs - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (table[mid].first_block <= block) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// One step's values in device memory, for an update whose launch must not depend on host values that
// change from step to step (a captured CUDA graph replays the same launch every step): the learning
// rate and weight decay of the step, its bias corrections and random key (as adamw_kernel_args makes
// them), the clipping factor, and whether to skip the update altogether (the trainer's outlier and
// non-finite checks, decided on the device: gpu/optimizer.h, kernels/step_guard.h).
struct AdamWDeviceStep {
    float learning_rate, weight_decay;  // weight_decay: the decayed runs' value
    float m_correction, v_correction;   // 1 − β1^step, 1 − β2^step
    uint64_t random_key;                // adamw_random_key(seed, step)
    float grad_scale;                   // multiplies every gradient (global-norm clipping)
    int skip;                           // nonzero: the update leaves everything as it is
};

// s with the step's values in place of its own (the learning rate, weight decay, corrections, key and
// clipping factor); the caller checks step.skip.
__device__ __forceinline__ void take_device_step(AdamWKernelArgs& s, const AdamWDeviceStep& step) {
    s.learning_rate = step.learning_rate;
    s.weight_decay = step.weight_decay;
    s.m_correction = step.m_correction;
    s.v_correction = step.v_correction;
    s.random_key = step.random_key;
    s.grad_scale = step.grad_scale;
}

// s: the step's constants (weight_decay the decayed runs' value; global_offset and grad_scale are
// replaced per run and from *grad_scale). grad_scale: one float on the device (e.g. written by
// global_norm_clip_scale), or null for 1. step: null, or the step's values on the device, which then
// replace s's learning rate, weight decay, corrections, key and grad_scale (and may skip the update).
static __global__ void adamw_multi_tensor_kernel(const AdamWRunEntry* table, int runs, AdamWKernelArgs s,
                                          const float* grad_scale, const AdamWDeviceStep* step) {
    if (step != nullptr) {
        if (step->skip) return;
        take_device_step(s, *step);
    } else {
        s.grad_scale = grad_scale != nullptr ? *grad_scale : 1.0f;
    }
    const AdamWRunEntry& run = table[run_of_block(table, runs, blockIdx.x)];
    s.weight_decay = run.decay ? s.weight_decay : 0.0f;
    s.global_offset = run.global_offset;
    const size_t g = flat_thread_index(blockIdx.x - run.first_block, blockDim.x, threadIdx.x);
    if (run.grads_fp32 != nullptr) {
        if (run.vector)
            adamw_thread<true>(run.params, run.master, run.m, run.v, run.grads_fp32, run.split, g, s);
        else
            adamw_thread<false>(run.params, run.master, run.m, run.v, run.grads_fp32, run.split, g, s);
    } else if (run.vector) {
        adamw_thread<true>(run.params, run.master, run.m, run.v, run.grads, run.split, g, s);
    } else {
        adamw_thread<false>(run.params, run.master, run.m, run.v, run.grads, run.split, g, s);
    }
}

// ---- host launch function
constexpr int kAdamWBlockSize = 256;

// The per-call constants of step `step` (grad_scale and global_offset as given).
inline AdamWKernelArgs adamw_kernel_args(float learning_rate, float beta1, float beta2, float eps,
                                         float weight_decay, float grad_scale, int step, uint32_t seed,
                                         size_t global_offset, const char* caller) {
    if (step < 1) {
        fprintf(stderr, "%s: step must be >= 1 (got %d)\n", caller, step);
        exit(1);
    }
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
    return s;
}

// True when the 128-bit path applies: every array 16-byte aligned where params' groups start.
template <typename G>
inline bool adamw_vectorisable(const ElementGroups& split, const float* master, const float* m,
                               const float* v, const G* grads) {
    return aligned16_at(grads, split.head) && aligned16_at(master, split.head) && aligned16_at(m, split.head) &&
           aligned16_at(v, split.head);
}

// Updates params[0, n) (and master, m, v) from grads[0, n); global_offset is the index of params[0]
// among all the model's parameters (it selects the stochastic-rounding bits). step counts from 1.
inline void adamw_update(floatX* params, float* master, float* m, float* v, const floatX* grads, size_t n,
                         size_t global_offset, float learning_rate, float beta1, float beta2, float eps,
                         float weight_decay, float grad_scale, int step, uint32_t seed, cudaStream_t stream) {
    const AdamWKernelArgs s = adamw_kernel_args(learning_rate, beta1, beta2, eps, weight_decay, grad_scale,
                                                step, seed, global_offset, "adamw_update");
    if (n == 0) return;
    const ElementGroups split = split_into_groups(params, sizeof(floatX), n);
    const unsigned blocks = blocks_for(split.threads(), kAdamWBlockSize);
    if (adamw_vectorisable(split, master, m, v, grads))
        LAUNCH(adamw_kernel<true>, blocks, kAdamWBlockSize, 0, stream, params, master, m, v, grads, split, s);
    else
        LAUNCH(adamw_kernel<false>, blocks, kAdamWBlockSize, 0, stream, params, master, m, v, grads, split,
               s);
    CUDA_CHECK(cudaGetLastError());
}

// ---- multi-tensor update: a plan made once (the pointers do not change between steps), then one
// launch per step.
//
//   AdamWRun runs[count] = {{params, master, m, v, grads, n, global_offset, decay}, ...};
//   AdamWMultiTensor plan = adamw_multi_tensor_plan(runs, count);        // at set-up
//   adamw_update_multi_tensor(plan, lr, β1, β2, eps, wd, grad_scale_dev, step, seed, stream);  // per step
//   adamw_multi_tensor_free(plan);                                       // at teardown
//
// Result: bitwise what adamw_update(run.params, ..., run.n, run.global_offset, lr, β1, β2, eps,
// run.decay ? wd : 0, *grad_scale_dev, step, seed) does for each run in turn. Runs must not overlap.
// Device memory: count · sizeof(AdamWRunEntry) (96 bytes) for the table. Traffic and FLOPs: the sum of
// adamw_bytes over the runs, plus a table search (log2(runs) entries, from cache) per thread.
struct AdamWRun {
    floatX* params;
    float* master;  // null: none
    float* m;
    float* v;
    const floatX* grads;
    size_t n;
    size_t global_offset;
    bool decay;  // weight decay applies (the weight matrices), or not (biases, LayerNorm, ...)
    const float* grads_fp32 = nullptr;  // fp32 gradients instead of grads (accumulated in fp32)
};
struct AdamWMultiTensor {
    AdamWRunEntry* table = nullptr;  // device
    int runs = 0;                    // runs with n > 0 (entries in the table)
    unsigned blocks = 0;             // the grid
};

// The table's entries and the grid (runs with n = 0 left out).
inline std::vector<AdamWRunEntry> adamw_multi_tensor_entries(const AdamWRun* runs, int count, unsigned* grid) {
    std::vector<AdamWRunEntry> entries;
    unsigned long long blocks = 0;
    for (int r = 0; r < count; r++) {
        const AdamWRun& run = runs[r];
        if (run.n == 0) continue;
        AdamWRunEntry e;
        e.params = run.params;
        e.master = run.master;
        e.m = run.m;
        e.v = run.v;
        e.grads = run.grads;
        e.grads_fp32 = run.grads_fp32;
        e.split = split_into_groups(run.params, sizeof(floatX), run.n);
        e.global_offset = run.global_offset;
        e.first_block = (unsigned)blocks;
        e.vector = (run.grads_fp32 ? adamw_vectorisable(e.split, run.master, run.m, run.v, run.grads_fp32)
                                   : adamw_vectorisable(e.split, run.master, run.m, run.v, run.grads)) ? 1 : 0;
        e.decay = run.decay ? 1 : 0;
        blocks += blocks_for(e.split.threads(), kAdamWBlockSize);
        entries.push_back(e);
    }
    if (blocks > 2147483647ull) {
        fprintf(stderr, "adamw_multi_tensor_plan: %llu blocks exceed a grid\n", blocks);
        exit(1);
    }
    *grid = (unsigned)blocks;
    return entries;
}

// The plan in a device table the caller owns (`capacity` entries, e.g. in the trainer's arena), filled
// by a synchronous copy: call at set-up, not per step.
inline AdamWMultiTensor adamw_multi_tensor_plan_in(AdamWRunEntry* table, int capacity, const AdamWRun* runs,
                                                   int count) {
    AdamWMultiTensor plan;
    const std::vector<AdamWRunEntry> entries = adamw_multi_tensor_entries(runs, count, &plan.blocks);
    plan.runs = (int)entries.size();
    if (plan.runs > capacity) {
        fprintf(stderr, "adamw_multi_tensor_plan_in: %d runs, room for %d\n", plan.runs, capacity);
        exit(1);
    }
    plan.table = table;
    if (plan.runs > 0)
        CUDA_CHECK(cudaMemcpy(table, entries.data(), entries.size() * sizeof(AdamWRunEntry), cudaMemcpyHostToDevice));
    return plan;
}

// Builds the device table (cudaMalloc + a synchronous copy: call at set-up, not per step).
inline AdamWMultiTensor adamw_multi_tensor_plan(const AdamWRun* runs, int count) {
    unsigned blocks = 0;
    const int entries = (int)adamw_multi_tensor_entries(runs, count, &blocks).size();
    AdamWRunEntry* table = nullptr;
    if (entries > 0) CUDA_CHECK(cudaMalloc(&table, entries * sizeof(AdamWRunEntry)));
    return adamw_multi_tensor_plan_in(table, entries, runs, count);
}

inline void adamw_multi_tensor_free(AdamWMultiTensor& plan) {
    if (plan.table) CUDA_CHECK(cudaFree(plan.table));
    plan = AdamWMultiTensor{};
}

// One launch updating every run of the plan. grad_scale: one float on the device, read by the kernel
// (no host read-back needed before the update), or null for 1. weight_decay applies to the runs
// planned with decay.
inline void adamw_update_multi_tensor(const AdamWMultiTensor& plan, float learning_rate, float beta1,
                                      float beta2, float eps, float weight_decay, const float* grad_scale,
                                      int step, uint32_t seed, cudaStream_t stream) {
    const AdamWKernelArgs s = adamw_kernel_args(learning_rate, beta1, beta2, eps, weight_decay, 1.0f, step,
                                                seed, 0, "adamw_update_multi_tensor");
    if (plan.runs == 0) return;
    LAUNCH(adamw_multi_tensor_kernel, plan.blocks, kAdamWBlockSize, 0, stream, plan.table, plan.runs, s,
           grad_scale, (const AdamWDeviceStep*)nullptr);
    CUDA_CHECK(cudaGetLastError());
}

// The device values of step `step` (count from 1), as adamw_kernel_args computes them, with the given
// clipping factor and no skip.
inline AdamWDeviceStep adamw_device_step(float learning_rate, float beta1, float beta2, float weight_decay,
                                         float grad_scale, int step, uint32_t seed) {
    const AdamWKernelArgs s = adamw_kernel_args(learning_rate, beta1, beta2, 0.0f, weight_decay, grad_scale, step,
                                                seed, 0, "adamw_device_step");
    return {s.learning_rate, s.weight_decay, s.m_correction, s.v_correction, s.random_key, s.grad_scale, 0};
}

// The same launch with every per-step value read from `step` (device memory; see AdamWDeviceStep): the
// launch itself is the same every step. Bitwise what adamw_update_multi_tensor does with the values
// adamw_device_step gives (or nothing, when step->skip is set).
inline void adamw_update_multi_tensor(const AdamWMultiTensor& plan, float beta1, float beta2, float eps,
                                      const AdamWDeviceStep* step, cudaStream_t stream) {
    AdamWKernelArgs s = adamw_kernel_args(0.0f, beta1, beta2, eps, 0.0f, 1.0f, 1, 0, 0,
                                          "adamw_update_multi_tensor");
    if (plan.runs == 0) return;
    LAUNCH(adamw_multi_tensor_kernel, plan.blocks, kAdamWBlockSize, 0, stream, plan.table, plan.runs, s,
           (const float*)nullptr, step);
    CUDA_CHECK(cudaGetLastError());
}
