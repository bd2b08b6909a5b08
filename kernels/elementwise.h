// Small element-wise ops the trainer needs, and the 128-bit "groups of 8" machinery that the
// element-wise kernels here, in adamw.h and in global_norm.h share.
//
//   cast_array(out, in, n):    out[i] = (To) in[i]                     (float, bf16, half; any pair)
//   fill_array(out, value, n): out[i] = (floatX) value
//   scale_array(x, factor, n): x[i]   = (T) (factor · x[i])            (in place, fp32 arithmetic)
//   add_array(acc, x, n):      acc[i] = (T) (acc[i] + x[i])            (in place, fp32 arithmetic; x may
//                              be narrower than acc)
//
// Inputs and outputs are flat arrays of n elements, on the device; n is a size_t (no 2^31 limit).
// Per call: cast reads n·sizeof(From) and writes n·sizeof(To) bytes; fill writes n·sizeof(floatX);
// scale reads and writes n·sizeof(T) and does n FLOPs; add
// reads 2n·sizeof(T), writes n·sizeof(T), n FLOPs. Zeroing is cudaMemsetAsync's job.
//
// How a launch covers [0, n) with 128-bit accesses (ElementGroups): a scalar "head" of up to 7
// elements until the first pointer reaches a 16-byte boundary, then whole groups of kGroupSize = 8
// elements (16 bytes of bf16, 32 of fp32) moved with Packed128 loads/stores, then a scalar "tail"
// of up to 7 elements. One thread per group; one extra thread does the head and the tail. Slices of
// tensors (ZeRO shards) may start anywhere, so the head is what makes them vectorisable; when the
// other pointers of a call are not 16-byte aligned at the same element, the groups go element by
// element instead (same results, slower).
#pragma once
#include <cstddef>
#include <cstdint>

#include "base/errors.h"
#include "kernels/common.h"

constexpr int kGroupSize = 8;  // elements one thread moves in the vectorised paths

// ---- how [0, n) is split: head [0, head), groups [head, tail_start()), tail [tail_start(), n).
struct ElementGroups {
    size_t n = 0, head = 0, groups = 0;
    __host__ __device__ size_t group_start(size_t g) const { return head + g * kGroupSize; }
    __host__ __device__ size_t tail_start() const { return head + groups * kGroupSize; }
    // Threads a one-thread-per-group launch needs: one per group plus the head-and-tail thread.
    __host__ __device__ size_t threads() const { return groups + 1; }
};

// Splits n elements of size element_bytes starting at `anchor` so that groups start 16-byte aligned
// in anchor's array. `anchor` must be aligned to its element size (C++ guarantees that).
inline ElementGroups split_into_groups(const void* anchor, size_t element_bytes, size_t n) {
    ElementGroups split;
    split.n = n;
    const size_t misalignment = (uintptr_t)anchor % 16;
    split.head = misalignment == 0 ? 0 : (16 - misalignment) / element_bytes;
    if (split.head > n) split.head = n;
    split.groups = (n - split.head) / kGroupSize;
    return split;
}
// True when p + offset elements is 16-byte aligned (null pointers count as aligned: unused arrays).
template <typename T>
inline bool aligned16_at(const T* p, size_t offset) {
    return p == nullptr || (uintptr_t)(p + offset) % 16 == 0;
}

// The global index of this thread in a 1-D launch, as a size_t: grids of more than 2^31 threads
// (1.5B parameters / 8 per thread fits, but blockIdx.x · blockDim.x in unsigned does not always).
__host__ __device__ inline size_t flat_thread_index(unsigned block, unsigned block_dim, unsigned thread) {
    return (size_t)block * block_dim + thread;
}
__device__ inline size_t global_thread_index() {
    return flat_thread_index(blockIdx.x, blockDim.x, threadIdx.x);
}
// Blocks for a one-thread-per-group launch of `threads` threads.
inline unsigned blocks_for(size_t threads, int block_size) {
    return (unsigned)((threads + block_size - 1) / block_size);
}

// ---- a group of 8 elements through registers: loaded as floats, stored from floats or raw values.
template <typename T>
__device__ __forceinline__ void load_group(float out[kGroupSize], const T* in) {
    constexpr int per_vector = Packed128<T>::size;
    for (int j = 0; j < kGroupSize / per_vector; j++) {
        const Packed128<T> packed = load128(in + j * per_vector);
        for (int k = 0; k < per_vector; k++) out[j * per_vector + k] = to_float(packed[k]);
    }
}
template <typename T>
__device__ __forceinline__ void store_group_raw(T* out, const T in[kGroupSize]) {
    constexpr int per_vector = Packed128<T>::size;
    for (int j = 0; j < kGroupSize / per_vector; j++) {
        Packed128<T> packed;
        for (int k = 0; k < per_vector; k++) packed[k] = in[j * per_vector + k];
        store128(out + j * per_vector, packed);
    }
}
template <typename T>
__device__ __forceinline__ void store_group(T* out, const float in[kGroupSize]) {
    T values[kGroupSize];
    for (int k = 0; k < kGroupSize; k++) values[k] = from_float<T>(in[k]);
    store_group_raw(out, values);
}

// 128-bit store with the streaming (evict-first) hint: for outputs nobody reads soon, so that they
// do not push data that is about to be read again out of L2. (A candidate for kernels/common.h.)
template <typename T>
__device__ __forceinline__ void store128_streaming(T* address, const Packed128<T>& v) {
#ifdef __CUDACC__
    __stcs(reinterpret_cast<int4*>(address), *reinterpret_cast<const int4*>(&v));
#else
    store128(address, v);
#endif
}

// ---- kernels. Each thread: one group (vectorised when kVector, else element by element), or, for
// thread number `groups`, the head and the tail.
template <typename To, typename From, bool kVector>
__global__ void cast_kernel(To* out, const From* in, ElementGroups split) {
    const size_t g = global_thread_index();
    if (g < split.groups) {
        const size_t first = split.group_start(g);
        if (kVector) {
            float values[kGroupSize];
            load_group(values, in + first);
            store_group(out + first, values);
        } else {
            for (int k = 0; k < kGroupSize; k++) out[first + k] = from_float<To>(to_float(in[first + k]));
        }
    } else if (g == split.groups) {
        for (size_t i = 0; i < split.head; i++) out[i] = from_float<To>(to_float(in[i]));
        for (size_t i = split.tail_start(); i < split.n; i++) out[i] = from_float<To>(to_float(in[i]));
    }
}

template <typename T>
__global__ void fill_kernel(T* out, float value, ElementGroups split) {
    const size_t g = global_thread_index();
    const T v = from_float<T>(value);
    if (g < split.groups) {
        T values[kGroupSize];
        for (int k = 0; k < kGroupSize; k++) values[k] = v;
        store_group_raw(out + split.group_start(g), values);
    } else if (g == split.groups) {
        for (size_t i = 0; i < split.head; i++) out[i] = v;
        for (size_t i = split.tail_start(); i < split.n; i++) out[i] = v;
    }
}

template <typename T>
__global__ void scale_kernel(T* x, float factor, ElementGroups split) {
    const size_t g = global_thread_index();
    if (g < split.groups) {
        const size_t first = split.group_start(g);
        float values[kGroupSize];
        load_group(values, x + first);
        for (int k = 0; k < kGroupSize; k++) values[k] *= factor;
        store_group(x + first, values);
    } else if (g == split.groups) {
        for (size_t i = 0; i < split.head; i++) x[i] = from_float<T>(factor * to_float(x[i]));
        for (size_t i = split.tail_start(); i < split.n; i++) x[i] = from_float<T>(factor * to_float(x[i]));
    }
}

template <typename T, typename X>
__global__ void add_kernel(T* acc, const X* x, ElementGroups split) {
    const size_t g = global_thread_index();
    if (g < split.groups) {
        const size_t first = split.group_start(g);
        float a[kGroupSize], b[kGroupSize];
        load_group(a, acc + first);
        load_group(b, x + first);
        for (int k = 0; k < kGroupSize; k++) a[k] += b[k];
        store_group(acc + first, a);
    } else if (g == split.groups) {
        for (size_t i = 0; i < split.head; i++) acc[i] = from_float<T>(to_float(acc[i]) + to_float(x[i]));
        for (size_t i = split.tail_start(); i < split.n; i++)
            acc[i] = from_float<T>(to_float(acc[i]) + to_float(x[i]));
    }
}

// ---- host launch functions
constexpr int kElementwiseBlockSize = 256;

// out[i] = (To) in[i] for i < n. From and To are float, __nv_bfloat16 or __half.
template <typename To, typename From>
void cast_array(To* out, const From* in, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    const ElementGroups split = split_into_groups(out, sizeof(To), n);
    const unsigned blocks = blocks_for(split.threads(), kElementwiseBlockSize);
    if (aligned16_at(in, split.head))
        LAUNCH((cast_kernel<To, From, true>), blocks, kElementwiseBlockSize, 0, stream, out, in, split);
    else
        LAUNCH((cast_kernel<To, From, false>), blocks, kElementwiseBlockSize, 0, stream, out, in, split);
    CUDA_CHECK(cudaGetLastError());
}

// out[i] = value (rounded to floatX) for i < n.
inline void fill_array(floatX* out, float value, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    const ElementGroups split = split_into_groups(out, sizeof(floatX), n);
    LAUNCH(fill_kernel<floatX>, blocks_for(split.threads(), kElementwiseBlockSize), kElementwiseBlockSize, 0,
           stream, out, value, split);
    CUDA_CHECK(cudaGetLastError());
}

// x[i] = factor · x[i] in fp32, stored back as T (float, __nv_bfloat16 or __half), for i < n.
template <typename T>
void scale_array(T* x, float factor, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    const ElementGroups split = split_into_groups(x, sizeof(T), n);
    LAUNCH(scale_kernel<T>, blocks_for(split.threads(), kElementwiseBlockSize), kElementwiseBlockSize, 0,
           stream, x, factor, split);
    CUDA_CHECK(cudaGetLastError());
}

// acc[i] = acc[i] + x[i], summed in fp32 and stored back as T, for i < n (acc and x 16-byte aligned
// alike: at the same element, both on a 16-byte boundary). x may be narrower than acc (bf16 gradients
// added into an fp32 accumulator).
template <typename T, typename X>
void add_array(T* acc, const X* x, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    const ElementGroups split = split_into_groups(acc, sizeof(T), n);
    if (!aligned16_at(x, split.head)) fail("add_array: the two arrays are not aligned alike");
    LAUNCH((add_kernel<T, X>), blocks_for(split.threads(), kElementwiseBlockSize), kElementwiseBlockSize, 0,
           stream, acc, x, split);
    CUDA_CHECK(cudaGetLastError());
}
