// LAMB (You et al., 2019) and LARS (You, Gitman & Ginsburg, 2017): updates whose step size is scaled,
// tensor by tensor ("slot" by slot), by the ratio of the weights' norm to the update's norm. Per slot,
// with g = grad_scale·grad (the step's clipping factor), p the weights, λ the weight decay (on the
// runs planned with decay), t the step:
//   LAMB: m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
//         u = (m/(1−β1^t)) / (√(v/(1−β2^t)) + eps) + λ·p          (AdamW's direction, kernels/adamw.h)
//         r = ‖p‖/‖u‖;  p = p − lr·r·u
//   LARS: g' = g + λ·p;  ℓ = η·‖p‖/‖g'‖;  b = μ·b + ℓ·g';  p = p − lr·b
// r and ℓ are 1 where either norm is 0, and on slots planned without layer adaptation. The norms are
// over a whole tensor, while a rank (ZeRO) may hold only pieces of it, so an update takes three
// launches, none of which waits for the host (a CUDA graph captures all three):
//   1. the norms' pieces: one launch over every run of the plan; each block writes the sums of p² and
//      of u² (LAMB, which also updates m and v in place here) or of g'² (LARS) over its elements;
//   2. the sums: one block per slot adds that slot's block sums, in a fixed order, into sums[2·slot]
//      (Σp²) and sums[2·slot + 1] (Σu² or Σg'²): the same bits every run, no float atomics. The caller
//      then all-reduces the 2·slots floats across ranks (nothing to do on one rank); a slot split
//      between two ranks gets the bits it would get on one (layer_norms_sum_kernel says why);
//   3. the update: one launch over every run, reading the summed norms and the step's values from
//      device memory (AdamWDeviceStep), recomputing u from the updated m and v (the same fp32
//      operations as launch 1, so the same bits) or g', and writing the weights: the fp32 master
//      when there is one, and params, rounded stochastically to bf16 with the bits keyed by the global
//      element index exactly as AdamW does (the same bits whichever shard updates an element).
// Every multiply-add is an explicit fmaf, for the reason adamw_step gives.
//
// Memory moved per element (bf16 params and gradients, fp32 master weights):
//   LAMB: launch 1 reads grads, master, m, v and writes m, v (22 bytes); launch 3 reads master, m, v
//         and writes master, params (18 bytes): 40 in all, against AdamW's 28 (1.43×).
//   LARS: launch 1 reads grads and master (6 bytes); launch 3 reads grads, master, b and writes
//         master, b, params (20 bytes): 26 in all.
// Without master weights p is read from params (2 bytes instead of 4) and no master is written:
// LAMB 20 + 12 = 32 bytes (AdamW 22), LARS 4 + 14 = 18.
// Launch 2 reads 8 bytes per block of launch 1 (one block per 2,048 elements) and the run table once
// per slot. Memory bound, like AdamW: about 25 FLOPs and one 64-bit hash per element.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/common.h"
#include "kernels/elementwise.h"

// ---- the plan: AdamW's run table (kernels/adamw.h), each run also naming its slot and whether the
// slot adapts its step. A run's m is LAMB's first moment or LARS's momentum buffer b; v is LAMB's
// second moment, null for LARS.
//
//   LayerAdaptiveRun runs[count] = {{{params, master, m, v, grads, n, global_offset, decay}, slot, adapt}, ...};
//   LayerAdaptivePlan plan = layer_adaptive_plan(runs, count, slots);        // at set-up (or, in the
//       caller's memory: layer_adaptive_plan_in(memory, layer_adaptive_device_bytes(runs, count, slots), ...))
//   per step, LAMB:  lamb_moments_and_norms(plan, β1, β2, eps, step, stream);   // launch 1
//                    layer_norms_sum(plan, stream);                             // launch 2
//                    (all-reduce plan.sums, 2·slots floats, across ranks)
//                    lamb_apply(plan, eps, step, stream);                       // launch 3
//            LARS:   lars_norms(plan, step, stream); layer_norms_sum(plan, stream); (all-reduce);
//                    lars_apply(plan, momentum, trust_coefficient, step, stream);
//   layer_adaptive_free(plan);                                                 // at teardown
//
// step: the step's values in device memory (adamw_device_step makes them; LARS ignores the bias
// corrections). With step->skip set, launch 1 writes zero sums and nothing else, launch 3 nothing.
// Every rank plans the same `slots` (the model's tensor count), so that the sums line up for the
// all-reduce; a slot with no run on this rank sums to 0.
struct LayerAdaptiveRun {
    AdamWRun tensor;  // the run's arrays, length, global offset, decay (LARS: v = null)
    int slot;         // the tensor it belongs to, in [0, slots)
    bool adapt;       // the step is scaled by the trust ratio (false: r = ℓ = 1)
    // Its squares count in the slot's sums; false for a copy of elements another rank counts (a
    // tensor replicated across a tensor-parallel group, the classifier's copy of the embedding, a
    // second sharding group's shard): the copy is updated with the slot's ratio all the same.
    bool counted = true;
};
struct LayerAdaptiveRunEntry : AdamWRunEntry {
    int slot;
    int adapt;
    int counted;
};
struct LayerAdaptivePlan {
    LayerAdaptiveRunEntry* table = nullptr;  // device, `runs` entries
    float* block_sums = nullptr;             // device, 2 per block of launch 1
    float* sums = nullptr;                   // device, 2 per slot: Σp², then Σu² (LAMB) or Σg'² (LARS)
    int runs = 0;                            // runs with n > 0
    int slots = 0;
    unsigned blocks = 0;                     // the grid of launches 1 and 3
    bool second_moments = false;             // every run has v (LAMB may run; LARS ignores v)
    void* owned = nullptr;                   // what layer_adaptive_plan allocated (null: the caller's)
};

// ---- per-element arithmetic

// The trust ratio coefficient·√weights²/√other² (LAMB: coefficient 1, other = u; LARS: η and g'), or
// 1 where the slot does not adapt or either norm is 0.
__device__ __forceinline__ float trust_ratio(const float* sums, int slot, int adapt, float coefficient) {
    const float weights = sums[2 * slot], other = sums[2 * slot + 1];
    if (!adapt || weights == 0.0f || other == 0.0f) return 1.0f;
    return coefficient * (sqrtf(weights) / sqrtf(other));
}

// LARS's decayed gradient g' = grad_scale·grad + λ·p.
__device__ __forceinline__ float lars_gradient(float p, float grad, const AdamWKernelArgs& s) {
    return fmaf(s.weight_decay, p, s.grad_scale * grad);
}

// ---- moving kCount consecutive elements (a group of 8 or a single head or tail element) between
// memory and registers: 128-bit accesses when kVector, one by one otherwise.
template <int kCount, bool kVector, typename T>
__device__ __forceinline__ void load_elements(float (&out)[kCount], const T* in) {
    if constexpr (kVector && kCount == kGroupSize) {
        load_group(out, in);
    } else {
        for (int k = 0; k < kCount; k++) out[k] = to_float(in[k]);
    }
}
template <int kCount, bool kVector>
__device__ __forceinline__ void store_elements(float* out, const float (&in)[kCount]) {
    if constexpr (kVector && kCount == kGroupSize) {
        store_group(out, in);
    } else {
        for (int k = 0; k < kCount; k++) out[k] = in[k];
    }
}
// The weights p: the fp32 master when the run has one, else params.
template <int kCount, bool kVector>
__device__ __forceinline__ void load_weights(float (&p)[kCount], const AdamWRunEntry& run, size_t first) {
    if (run.master != nullptr) load_elements<kCount, kVector>(p, run.master + first);
    else load_elements<kCount, kVector>(p, run.params + first);
}
template <int kCount, bool kVector>
__device__ __forceinline__ void load_gradients(float (&g)[kCount], const AdamWRunEntry& run, size_t first) {
    if (run.grads_fp32 != nullptr) load_elements<kCount, kVector>(g, run.grads_fp32 + first);
    else load_elements<kCount, kVector>(g, run.grads + first);
}
// The new weights: into the master (if any), and into params rounded as AdamW rounds them.
template <int kCount, bool kVector>
__device__ __forceinline__ void store_weights(const AdamWRunEntry& run, size_t first, const float (&p)[kCount],
                                              const AdamWKernelArgs& s) {
    if (run.master != nullptr) store_elements<kCount, kVector>(run.master + first, p);
    floatX stored[kCount];
    for (int k = 0; k < kCount; k++)
        stored[k] = parameter_for_storage<floatX>(p[k], hash_random_bits(s.random_key, s.global_offset + first + k));
    if constexpr (kVector && kCount == kGroupSize) {
        store_group_raw(run.params + first, stored);
    } else {
        for (int k = 0; k < kCount; k++) run.params[first + k] = stored[k];
    }
}

// Thread g of a run's blocks hands its elements to pass.elements<kCount, kVector>(first): group g (8
// elements), or, for thread `groups`, the head and the tail one element at a time; as adamw_thread.
template <typename Pass>
__device__ __forceinline__ void visit_elements(Pass& pass, const AdamWRunEntry& run, size_t g) {
    const ElementGroups& split = run.split;
    if (g < split.groups) {
        if (run.vector) pass.template elements<kGroupSize, true>(split.group_start(g));
        else pass.template elements<kGroupSize, false>(split.group_start(g));
    } else if (g == split.groups) {
        for (size_t i = 0; i < split.head; i++) pass.template elements<1, false>(i);
        for (size_t i = split.tail_start(); i < split.n; i++) pass.template elements<1, false>(i);
    }
}

// ---- the passes over one thread's elements

// Every pass: the run it works on and the step's values.
struct RunPass {
    const AdamWRunEntry& run;
    const AdamWKernelArgs& s;
};
// Launch 1's passes: Σp² and the sum of the other vector's squares (u² or g'²) over the elements visited.
struct SquaresPass : RunPass {
    float weights_squared = 0.0f, other_squared = 0.0f;
    __device__ __forceinline__ void add_squares(float p, float other) {
        weights_squared = fmaf(p, p, weights_squared);
        other_squared = fmaf(other, other, other_squared);
    }
};

// LAMB, launch 1: m and v updated in place; Σp² and Σu².
struct LambMomentsPass : SquaresPass {
    template <int kCount, bool kVector>
    __device__ __forceinline__ void elements(size_t first) {
        float p[kCount], g[kCount], m[kCount], v[kCount];
        load_weights<kCount, kVector>(p, run, first);
        load_gradients<kCount, kVector>(g, run, first);
        load_elements<kCount, kVector>(m, run.m + first);
        load_elements<kCount, kVector>(v, run.v + first);
        for (int k = 0; k < kCount; k++) {
            adamw_moments(s.grad_scale * g[k], m[k], v[k], s);
            add_squares(p[k], adamw_direction(p[k], m[k], v[k], s));
        }
        store_elements<kCount, kVector>(run.m + first, m);
        store_elements<kCount, kVector>(run.v + first, v);
    }
};

// LAMB, launch 3: p = p − step_size·u (step_size = lr·r), u from the updated m and v.
struct LambApplyPass : RunPass {
    float step_size;
    template <int kCount, bool kVector>
    __device__ __forceinline__ void elements(size_t first) {
        float p[kCount], m[kCount], v[kCount];
        load_weights<kCount, kVector>(p, run, first);
        load_elements<kCount, kVector>(m, run.m + first);
        load_elements<kCount, kVector>(v, run.v + first);
        for (int k = 0; k < kCount; k++) p[k] = fmaf(-step_size, adamw_direction(p[k], m[k], v[k], s), p[k]);
        store_weights<kCount, kVector>(run, first, p, s);
    }
};

// LARS, launch 1: Σp² and Σg'².
struct LarsNormsPass : SquaresPass {
    template <int kCount, bool kVector>
    __device__ __forceinline__ void elements(size_t first) {
        float p[kCount], g[kCount];
        load_weights<kCount, kVector>(p, run, first);
        load_gradients<kCount, kVector>(g, run, first);
        for (int k = 0; k < kCount; k++) add_squares(p[k], lars_gradient(p[k], g[k], s));
    }
};

// LARS, launch 3: b = μ·b + ℓ·g' (b in run.m), p = p − lr·b.
struct LarsApplyPass : RunPass {
    float momentum, local_rate;  // μ, ℓ
    template <int kCount, bool kVector>
    __device__ __forceinline__ void elements(size_t first) {
        float p[kCount], g[kCount], b[kCount];
        load_weights<kCount, kVector>(p, run, first);
        load_gradients<kCount, kVector>(g, run, first);
        load_elements<kCount, kVector>(b, run.m + first);
        for (int k = 0; k < kCount; k++) {
            b[k] = fmaf(momentum, b[k], local_rate * lars_gradient(p[k], g[k], s));
            p[k] = fmaf(-s.learning_rate, b[k], p[k]);
        }
        store_elements<kCount, kVector>(run.m + first, b);
        store_weights<kCount, kVector>(run, first, p, s);
    }
};

// ---- kernels

// This block's run, and s with the step's values and the run's weight decay.
__device__ __forceinline__ const LayerAdaptiveRunEntry& layer_adaptive_run(const LayerAdaptiveRunEntry* table,
                                                                         int runs, AdamWKernelArgs& s,
                                                                         const AdamWDeviceStep& step) {
    const LayerAdaptiveRunEntry& run = table[run_of_block(table, runs, blockIdx.x)];
    take_device_step(s, step);
    s.weight_decay = run.decay ? s.weight_decay : 0.0f;
    s.global_offset = run.global_offset;
    return run;
}
__device__ __forceinline__ size_t thread_of_run(const AdamWRunEntry& run) {
    return flat_thread_index(blockIdx.x - run.first_block, blockDim.x, threadIdx.x);
}
// The block's two sums (every thread takes part) into block_sums[2·block], [2·block + 1].
__device__ __forceinline__ void write_block_sums(float* block_sums, float weights_squared, float other_squared) {
    weights_squared = block_reduce_sum(weights_squared);
    other_squared = block_reduce_sum(other_squared);
    if (threadIdx.x == 0) {
        block_sums[2 * blockIdx.x] = weights_squared;
        block_sums[2 * blockIdx.x + 1] = other_squared;
    }
}

// Launch 1 (NormsPass: LambMomentsPass or LarsNormsPass). s: the constants (β1, β2, eps).
template <typename NormsPass>
__global__ void layer_norms_kernel(const LayerAdaptiveRunEntry* table, int runs, float* block_sums, AdamWKernelArgs s,
                                   const AdamWDeviceStep* step) {
    if (step->skip) {  // the sums of a skipped step are defined (0), and nothing else changes
        write_block_sums(block_sums, 0.0f, 0.0f);
        return;
    }
    const LayerAdaptiveRunEntry& run = layer_adaptive_run(table, runs, s, *step);
    NormsPass pass{{{run, s}}};
    visit_elements(pass, run, thread_of_run(run));
    write_block_sums(block_sums, pass.weights_squared, pass.other_squared);
}

// Launch 2, block `slot`: each of the slot's counted runs, in the table's order, totals its block sums
// (thread t adds blocks t, t + blockDim, ... of the run, then the block adds the threads' totals), and
// the slot's sums are those run totals added one after another from 0. The bits depend only on the
// slot's own runs; and a slot whose runs lie in several plans (ranks), each summing its own, gets the
// same bits once the plans' sums are added in the table's order (in any order, for two plans:
// floating-point addition commutes).
static __global__ void layer_norms_sum_kernel(float* sums, const float* block_sums, const LayerAdaptiveRunEntry* table,
                                              int runs, unsigned grid_blocks) {
    const int slot = blockIdx.x;
    float weights_squared = 0.0f, other_squared = 0.0f;
    for (int r = 0; r < runs; r++) {
        if (table[r].slot != slot || !table[r].counted) continue;  // the same for every thread of the block
        const unsigned first = table[r].first_block, end = r + 1 < runs ? table[r + 1].first_block : grid_blocks;
        float run_weights = 0.0f, run_other = 0.0f;
        for (unsigned b = first + threadIdx.x; b < end; b += blockDim.x) {
            run_weights += block_sums[2 * b];
            run_other += block_sums[2 * b + 1];
        }
        weights_squared += block_reduce_sum(run_weights);
        other_squared += block_reduce_sum(run_other);
    }
    if (threadIdx.x == 0) {
        sums[2 * slot] = weights_squared;
        sums[2 * slot + 1] = other_squared;
    }
}

// Launch 3 of LAMB. s: the constants (eps).
static __global__ void lamb_apply_kernel(const LayerAdaptiveRunEntry* table, int runs, const float* sums,
                                         AdamWKernelArgs s, const AdamWDeviceStep* step) {
    if (step->skip) return;
    const LayerAdaptiveRunEntry& run = layer_adaptive_run(table, runs, s, *step);
    LambApplyPass pass{{run, s}, s.learning_rate * trust_ratio(sums, run.slot, run.adapt, 1.0f)};
    visit_elements(pass, run, thread_of_run(run));
}

// Launch 3 of LARS.
static __global__ void lars_apply_kernel(const LayerAdaptiveRunEntry* table, int runs, const float* sums,
                                         float momentum, float trust_coefficient, const AdamWDeviceStep* step) {
    if (step->skip) return;
    AdamWKernelArgs s{};
    const LayerAdaptiveRunEntry& run = layer_adaptive_run(table, runs, s, *step);
    LarsApplyPass pass{{run, s}, momentum, trust_ratio(sums, run.slot, run.adapt, trust_coefficient)};
    visit_elements(pass, run, thread_of_run(run));
}

// ---- host functions
// Launch 2's block: 256 threads; GPT-2 124M's largest slot (wte, ~19,000 blocks of launch 1) then
// takes ~74 sums per thread, a few microseconds.
constexpr int kLayerNormsSumBlockSize = 256;

// The table's entries and launch 1's grid: AdamW's entries (kernels/adamw.h) plus slot and adaptation.
inline std::vector<LayerAdaptiveRunEntry> layer_adaptive_entries(const LayerAdaptiveRun* runs, int count, int slots,
                                                                 unsigned* grid) {
    std::vector<AdamWRun> tensors;
    std::vector<const LayerAdaptiveRun*> planned;  // the runs with elements, as the entries list them
    for (int r = 0; r < count; r++) {
        if (runs[r].slot < 0 || runs[r].slot >= slots) {
            fprintf(stderr, "layer_adaptive_plan: run %d names slot %d of %d\n", r, runs[r].slot, slots);
            exit(1);
        }
        for (int earlier = 0; earlier < r; earlier++)
            if (runs[earlier].slot == runs[r].slot &&
                (runs[earlier].adapt != runs[r].adapt || runs[earlier].tensor.decay != runs[r].tensor.decay)) {
                fprintf(stderr, "layer_adaptive_plan: runs %d and %d of slot %d differ in adaptation or decay\n",
                        earlier, r, runs[r].slot);
                exit(1);
            }
        if (runs[r].tensor.n == 0) continue;
        tensors.push_back(runs[r].tensor);
        planned.push_back(&runs[r]);
    }
    const std::vector<AdamWRunEntry> base = adamw_multi_tensor_entries(tensors.data(), (int)tensors.size(), grid);
    std::vector<LayerAdaptiveRunEntry> entries(base.size());
    for (size_t e = 0; e < base.size(); e++) {
        static_cast<AdamWRunEntry&>(entries[e]) = base[e];
        entries[e].slot = planned[e]->slot;
        entries[e].adapt = planned[e]->adapt ? 1 : 0;
        entries[e].counted = planned[e]->counted ? 1 : 0;
    }
    return entries;
}

// Where the plan's three arrays lie in one allocation: the table, the block sums, the slot sums, each
// 16-byte aligned.
struct LayerAdaptiveLayout {
    size_t table_bytes, block_sums_bytes, sums_bytes;
    size_t total() const { return table_bytes + block_sums_bytes + sums_bytes; }
};
inline size_t round_up_16(size_t bytes) { return (bytes + 15) / 16 * 16; }
inline LayerAdaptiveLayout layer_adaptive_layout(size_t entries, unsigned blocks, int slots) {
    return {round_up_16(entries * sizeof(LayerAdaptiveRunEntry)), round_up_16(2 * (size_t)blocks * sizeof(float)),
            round_up_16(2 * (size_t)slots * sizeof(float))};
}

// Device memory the plan of these runs needs (for layer_adaptive_plan_in).
inline size_t layer_adaptive_device_bytes(const LayerAdaptiveRun* runs, int count, int slots) {
    unsigned blocks = 0;
    const size_t entries = layer_adaptive_entries(runs, count, slots, &blocks).size();
    return layer_adaptive_layout(entries, blocks, slots).total();
}

// The plan in device memory the caller owns (`bytes` of it, 16-byte aligned, e.g. in the trainer's
// arena; layer_adaptive_device_bytes says how much), the table filled by a synchronous copy: call at
// set-up, not per step. Runs must not overlap.
inline LayerAdaptivePlan layer_adaptive_plan_in(void* device_memory, size_t bytes, const LayerAdaptiveRun* runs,
                                                int count, int slots) {
    LayerAdaptivePlan plan;
    const std::vector<LayerAdaptiveRunEntry> entries = layer_adaptive_entries(runs, count, slots, &plan.blocks);
    const LayerAdaptiveLayout layout = layer_adaptive_layout(entries.size(), plan.blocks, slots);
    if (layout.total() > bytes) {
        fprintf(stderr, "layer_adaptive_plan_in: the plan needs %zu bytes, given %zu\n", layout.total(), bytes);
        exit(1);
    }
    char* base = static_cast<char*>(device_memory);
    plan.table = reinterpret_cast<LayerAdaptiveRunEntry*>(base);
    plan.block_sums = reinterpret_cast<float*>(base + layout.table_bytes);
    plan.sums = reinterpret_cast<float*>(base + layout.table_bytes + layout.block_sums_bytes);
    plan.runs = (int)entries.size();
    plan.slots = slots;
    plan.second_moments = true;
    for (const LayerAdaptiveRunEntry& e : entries) plan.second_moments &= e.v != nullptr;
    if (plan.runs > 0)
        CUDA_CHECK(cudaMemcpy(plan.table, entries.data(), entries.size() * sizeof(LayerAdaptiveRunEntry),
                              cudaMemcpyHostToDevice));
    return plan;
}

// The same in memory of its own (cudaMalloc), freed by layer_adaptive_free.
inline LayerAdaptivePlan layer_adaptive_plan(const LayerAdaptiveRun* runs, int count, int slots) {
    const size_t bytes = layer_adaptive_device_bytes(runs, count, slots);
    void* memory = nullptr;
    CUDA_CHECK(cudaMalloc(&memory, bytes));
    LayerAdaptivePlan plan = layer_adaptive_plan_in(memory, bytes, runs, count, slots);
    plan.owned = memory;
    return plan;
}

inline void layer_adaptive_free(LayerAdaptivePlan& plan) {
    if (plan.owned) CUDA_CHECK(cudaFree(plan.owned));
    plan = LayerAdaptivePlan{};
}

// LAMB's constants (the per-step values come from device memory; launch 3 needs only eps).
inline AdamWKernelArgs lamb_constants(float beta1, float beta2, float eps) {
    AdamWKernelArgs s{};
    s.beta1 = beta1;
    s.beta2 = beta2;
    s.eps = eps;
    return s;
}

// LAMB needs v in every run.
inline void require_second_moments(const LayerAdaptivePlan& plan, const char* caller) {
    if (plan.second_moments) return;
    fprintf(stderr, "%s: a run of the plan has no second moment v (a LARS plan?)\n", caller);
    exit(1);
}

// Launch 1 of LAMB: m, v updated; the block sums of p² and u².
inline void lamb_moments_and_norms(const LayerAdaptivePlan& plan, float beta1, float beta2, float eps,
                                   const AdamWDeviceStep* step, cudaStream_t stream) {
    if (plan.runs == 0) return;
    require_second_moments(plan, "lamb_moments_and_norms");
    LAUNCH(layer_norms_kernel<LambMomentsPass>, plan.blocks, kAdamWBlockSize, 0, stream, plan.table, plan.runs,
           plan.block_sums, lamb_constants(beta1, beta2, eps), step);
    CUDA_CHECK(cudaGetLastError());
}

// Launch 1 of LARS: the block sums of p² and g'².
inline void lars_norms(const LayerAdaptivePlan& plan, const AdamWDeviceStep* step, cudaStream_t stream) {
    if (plan.runs == 0) return;
    LAUNCH(layer_norms_kernel<LarsNormsPass>, plan.blocks, kAdamWBlockSize, 0, stream, plan.table, plan.runs,
           plan.block_sums, AdamWKernelArgs{}, step);
    CUDA_CHECK(cudaGetLastError());
}

// Launch 2 (LAMB and LARS): plan.sums, 2 floats per slot, from launch 1's block sums.
inline void layer_norms_sum(const LayerAdaptivePlan& plan, cudaStream_t stream) {
    if (plan.slots == 0) return;
    LAUNCH(layer_norms_sum_kernel, plan.slots, kLayerNormsSumBlockSize, 0, stream, plan.sums, plan.block_sums,
           plan.table, plan.runs, plan.blocks);
    CUDA_CHECK(cudaGetLastError());
}

// Launch 3 of LAMB: the weights from plan.sums (all-reduced) and the updated m, v.
inline void lamb_apply(const LayerAdaptivePlan& plan, float eps, const AdamWDeviceStep* step, cudaStream_t stream) {
    if (plan.runs == 0) return;
    require_second_moments(plan, "lamb_apply");
    LAUNCH(lamb_apply_kernel, plan.blocks, kAdamWBlockSize, 0, stream, plan.table, plan.runs, plan.sums,
           lamb_constants(0.0f, 0.0f, eps), step);
    CUDA_CHECK(cudaGetLastError());
}

// Launch 3 of LARS: momentum μ, trust coefficient η.
inline void lars_apply(const LayerAdaptivePlan& plan, float momentum, float trust_coefficient,
                       const AdamWDeviceStep* step, cudaStream_t stream) {
    if (plan.runs == 0) return;
    LAUNCH(lars_apply_kernel, plan.blocks, kAdamWBlockSize, 0, stream, plan.table, plan.runs, plan.sums, momentum,
           trust_coefficient, step);
    CUDA_CHECK(cudaGetLastError());
}

// ---- bytes moved (reads + writes), for the benchmark's bandwidth figures: n elements, with or
// without fp32 master weights, floatX gradients.
struct LayerAdaptiveBytes {
    double norms, sum, apply;  // launches 1, 2, 3
    double total() const { return norms + sum + apply; }
};
// Launch 2: the block sums read, the slot sums written, the table read (once from memory; each
// slot's block reads it again from cache).
inline double layer_norms_sum_bytes(const LayerAdaptivePlan& plan) {
    return 2.0 * sizeof(float) * (plan.blocks + plan.slots) + (double)plan.runs * sizeof(LayerAdaptiveRunEntry);
}
inline LayerAdaptiveBytes lamb_bytes(const LayerAdaptivePlan& plan, size_t n, bool with_master) {
    const double weights = with_master ? 4.0 : sizeof(floatX);  // p as read (and as written to the master)
    const double norms = sizeof(floatX) + weights + 4 * 4;     // grads, p, m, v in; m, v out
    const double apply = weights + 2 * 4 + (with_master ? 4 : 0) + sizeof(floatX);  // p, m, v in; p (, params)
    return {norms * n, layer_norms_sum_bytes(plan), apply * n};
}
inline LayerAdaptiveBytes lars_bytes(const LayerAdaptivePlan& plan, size_t n, bool with_master) {
    const double weights = with_master ? 4.0 : sizeof(floatX);
    const double norms = sizeof(floatX) + weights;                                    // grads, p in
    const double apply = sizeof(floatX) + weights + 2 * 4 + (with_master ? 4 : 0) + sizeof(floatX);  // + b, p out
    return {norms * n, layer_norms_sum_bytes(plan), apply * n};
}
