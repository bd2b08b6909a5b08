// Squared L2 norm of a gradient slice, added into an fp32 total:
//   *out += Σ_{i<n} grads[i]²
// grads: n floatX (or fp32: gradients accumulated in fp32) on the device (any alignment); out: one float on the device; scratch:
// global_norm_scratch_bytes() bytes of device memory, owned by the caller. The trainer zeroes *out,
// calls this for each slice (or for its ZeRO shard, then all-reduces), and takes the square root.
//
// Deterministic (bitwise, run to run, whatever n): a grid of kGlobalNormBlocks blocks sweeps the slice
// with a grid-stride loop, each thread squaring and summing its elements in fp32 in a fixed order; each
// block writes its sum to scratch; then one block adds the partials in a fixed order and adds the total
// into *out. No float atomics. A slice too small to give every thread of the full grid a group of
// elements launches only the blocks that have one (global_norm_blocks): the blocks left out would
// each have written a partial of exactly 0, so the sum, hence the bits, are those of the full grid,
// without idle blocks (a tiny model's slices take a few blocks instead of 1024).
// Per call: reads n·sizeof(T) bytes (+ 4 KiB of partials), 2n FLOPs. Memory bound.
//
// Then, on the device, the clipping factor AdamW multiplies the gradients by (global_norm_clip_scale):
//   norm = sqrt(norm²) (in double),  scale = norm > clip ? clip / norm : 1
// one thread, 8 bytes moved; the same double arithmetic as the host loop, so the same float. The
// update (adamw_update_multi_tensor) reads the scale from device memory: no host read-back of the
// norm is needed before the update.
#pragma once
#include <cmath>
#include <cstddef>

#include "kernels/common.h"
#include "kernels/elementwise.h"

// 1024 blocks of 256 threads: resident all at once on an H100 (132 SMs × 8 blocks of 256), so the
// sweep is one wave; the count is fixed so that the summation order, hence the bits, do not depend
// on the device or on n.
constexpr int kGlobalNormBlocks = 1024;
constexpr int kGlobalNormBlockSize = 256;
constexpr int kGlobalNormFinalBlockSize = 1024;

inline size_t global_norm_scratch_bytes() { return kGlobalNormBlocks * sizeof(float); }

// The blocks a slice of `groups` vector groups needs: those of the full grid's threads that get a group
// (thread t takes group t first), at least one (the head and tail go to thread 0).
inline int global_norm_blocks(size_t groups) {
    const size_t needed = (groups + kGlobalNormBlockSize - 1) / kGlobalNormBlockSize;
    return needed < 1 ? 1 : needed > (size_t)kGlobalNormBlocks ? kGlobalNormBlocks : (int)needed;
}

// Pass 1: partial[block] = Σ of the squares this block's threads visit. Thread t of the grid takes
// groups t, t + T, t + 2T, ... (T threads in the grid): neighbouring threads read neighbouring 16-byte
// vectors. The grid's thread 0 also takes the head and the tail.
template <bool kVector, typename T>
__global__ void __launch_bounds__(kGlobalNormBlockSize, 8)
    global_norm_partial_kernel(float* partial, const T* grads, ElementGroups split) {
    const size_t thread = global_thread_index();
    const size_t grid_threads = (size_t)gridDim.x * blockDim.x;
    float sum = 0.0f;
    for (size_t g = thread; g < split.groups; g += grid_threads) {
        const size_t first = split.group_start(g);
        float x[kGroupSize];
        if (kVector) {
            load_group(x, grads + first);
        } else {
            for (int k = 0; k < kGroupSize; k++) x[k] = to_float(grads[first + k]);
        }
        for (int k = 0; k < kGroupSize; k++) sum += x[k] * x[k];
    }
    if (thread == 0) {
        for (size_t i = 0; i < split.head; i++) sum += to_float(grads[i]) * to_float(grads[i]);
        for (size_t i = split.tail_start(); i < split.n; i++) sum += to_float(grads[i]) * to_float(grads[i]);
    }
    sum = block_reduce_sum(sum);
    if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// Pass 2 (one block): *out += Σ partial[0 .. count), in a fixed order.
static __global__ void global_norm_final_kernel(float* out, const float* partial, int count) {
    float sum = 0.0f;
    for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partial[i];
    sum = block_reduce_sum(sum);
    if (threadIdx.x == 0) *out += sum;
}

// *out += Σ grads[i]² over i < n (T: floatX or float). scratch: global_norm_scratch_bytes() bytes.
template <typename T>
void global_norm_squared(float* out, const T* grads, size_t n, void* scratch, cudaStream_t stream) {
    if (n == 0) return;
    float* partial = static_cast<float*>(scratch);
    // Any alignment: the head brings the vector loads to a 16-byte boundary.
    const ElementGroups split = split_into_groups(grads, sizeof(T), n);
    const int blocks = global_norm_blocks(split.groups);
    LAUNCH((global_norm_partial_kernel<true, T>), blocks, kGlobalNormBlockSize, 0, stream, partial, grads, split);
    CUDA_CHECK(cudaGetLastError());
    LAUNCH(global_norm_final_kernel, 1, kGlobalNormFinalBlockSize, 0, stream, out, partial, blocks);
    CUDA_CHECK(cudaGetLastError());
}

// *grad_scale = norm > clip ? (float)(clip / norm) : 1, norm = sqrt((double)*norm_squared); optionally
// *norm_out = (float)norm (null: not wanted). A non-finite norm² gives 1 (NaN) or 0 (+inf): a trainer
// that skips such steps must still check the norm (read back later, or asynchronously).
static __global__ void global_norm_clip_scale_kernel(float* grad_scale, float* norm_out, const float* norm_squared,
                                              float clip) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const double norm = sqrt((double)*norm_squared);
    *grad_scale = norm > (double)clip ? (float)((double)clip / norm) : 1.0f;
    if (norm_out != nullptr) *norm_out = (float)norm;
}

// Host-side twin of the kernel's arithmetic, for tests and for trainers that read the norm back.
inline float global_norm_clip_scale_host(float norm_squared, float clip) {
    const double norm = std::sqrt((double)norm_squared);
    return norm > (double)clip ? (float)((double)clip / norm) : 1.0f;
}

// One launch of one thread: grad_scale (device float) from norm_squared (device float, the total of
// global_norm_squared after any all-reduce). norm_out: device float or null.
inline void global_norm_clip_scale(float* grad_scale, const float* norm_squared, float clip, cudaStream_t stream,
                                   float* norm_out = nullptr) {
    LAUNCH(global_norm_clip_scale_kernel, 1, 32, 0, stream, grad_scale, norm_out, norm_squared, clip);
    CUDA_CHECK(cudaGetLastError());
}
