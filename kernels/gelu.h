// GELU, tanh form, elementwise over n values:
//   forward   y = x/2 · (1 + tanh u),   u = √(2/π) · (x + 0.044715 x³)
//   backward  dx = dy · gelu'(x),       gelu'(x) = (1 + tanh u)/2 + x/2 · (1 − tanh² u) · du/dx,
//                                       du/dx = √(2/π) · (1 + 3 · 0.044715 x²)
// Inputs and outputs are floatX arrays of n elements (any n; contiguous; in GPT-2 the MLP's hidden
// activation, B·T·4C values). The math runs in fp32.
// Per call: forward reads n and writes n floatX (4n bytes in bf16), ~20 FLOPs and one tanh per
// element; backward reads 2n and writes n floatX (6n bytes in bf16), ~30 FLOPs and one tanh per
// element. Both are memory-bound: each thread moves 128 bits at a time (8 bf16 or 4 fp32).
//
// In the trainer the forward GELU is usually fused into the fc matmul's epilogue and the backward
// into the fcproj matmul's (kernels/matmul.h); these kernels serve the unfused path and recomputation.
#pragma once
#include <cstdint>

#include "kernels/common.h"

constexpr float GELU_SQRT_2_OVER_PI = 0.7978845608028654f;
constexpr float GELU_CUBIC = 0.044715f;

__device__ __forceinline__ float gelu_of(float x) {
    const float u = GELU_SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

__device__ __forceinline__ float gelu_derivative_of(float x) {
    const float u = GELU_SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
    const float th = tanhf(u);
    const float du_dx = GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_CUBIC * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du_dx;
}

// Index of the first element that thread `thread` of block `block` handles, when every thread
// handles `per_thread` consecutive elements. size_t: n reaches B·T·4C = 2e8 at B=64, T=1024, C=768
// and more for larger models, so products are taken in 64 bits.
__host__ __device__ inline size_t gelu_first_element(unsigned block, unsigned block_size, unsigned thread,
                                                     int per_thread) {
    return ((size_t)block * block_size + thread) * (size_t)per_thread;
}

// ---- forward

// One thread per 128-bit vector of elements; the thread holding the ragged end of the array (n not
// a multiple of the vector width) finishes it element by element. Pointers must be 16-byte aligned.
template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, size_t n) {
    constexpr int V = Packed128<T>::size;
    const size_t first = gelu_first_element(blockIdx.x, blockDim.x, threadIdx.x, V);
    if (first + V <= n) {
        const Packed128<T> x = load128cs(inp + first);
        Packed128<T> y;
        for (int k = 0; k < V; k++) y[k] = from_float<T>(gelu_of(to_float(x[k])));
        store128(out + first, y);
    } else {
        for (size_t i = first; i < n; i++) out[i] = from_float<T>(gelu_of(to_float(inp[i])));
    }
}

// One thread per element, no alignment needed: the fallback for pointers that are not 16-byte
// aligned (and version 1 of dev/cuda/gelu.cu).
template <typename T>
__global__ void gelu_forward_scalar_kernel(T* out, const T* inp, size_t n) {
    const size_t i = gelu_first_element(blockIdx.x, blockDim.x, threadIdx.x, 1);
    if (i < n) out[i] = from_float<T>(gelu_of(to_float(inp[i])));
}

// ---- backward. dinp may be the same array as dout: each thread reads its elements before it
// writes them, and no thread touches another's.

template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, size_t n) {
    constexpr int V = Packed128<T>::size;
    const size_t first = gelu_first_element(blockIdx.x, blockDim.x, threadIdx.x, V);
    if (first + V <= n) {
        const Packed128<T> x = load128cs(inp + first);
        const Packed128<T> dy = load128(dout + first);
        Packed128<T> dx;
        for (int k = 0; k < V; k++)
            dx[k] = from_float<T>(to_float(dy[k]) * gelu_derivative_of(to_float(x[k])));
        store128(dinp + first, dx);
    } else {
        for (size_t i = first; i < n; i++)
            dinp[i] = from_float<T>(to_float(dout[i]) * gelu_derivative_of(to_float(inp[i])));
    }
}

template <typename T>
__global__ void gelu_backward_scalar_kernel(T* dinp, const T* inp, const T* dout, size_t n) {
    const size_t i = gelu_first_element(blockIdx.x, blockDim.x, threadIdx.x, 1);
    if (i < n) dinp[i] = from_float<T>(to_float(dout[i]) * gelu_derivative_of(to_float(inp[i])));
}

// ---- host launch functions

constexpr int GELU_BLOCK_SIZE = 256;

inline bool gelu_aligned_16(const void* p) { return ((uintptr_t)p & 15) == 0; }

// out = gelu(inp), n elements. out may equal inp.
inline void gelu_forward(floatX* out, const floatX* inp, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    if (gelu_aligned_16(out) && gelu_aligned_16(inp)) {
        const size_t vectors = (n + Packed128<floatX>::size - 1) / Packed128<floatX>::size;
        LAUNCH(gelu_forward_kernel<floatX>, ceil_div(vectors, GELU_BLOCK_SIZE), GELU_BLOCK_SIZE, 0, stream,
               out, inp, n);
    } else {
        LAUNCH(gelu_forward_scalar_kernel<floatX>, ceil_div(n, GELU_BLOCK_SIZE), GELU_BLOCK_SIZE, 0, stream,
               out, inp, n);
    }
    CUDA_CHECK(cudaGetLastError());
}

// dinp = dout · gelu'(inp), n elements; OVERWRITES dinp (dinp may equal dout).
inline void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n,
                          cudaStream_t stream) {
    if (n == 0) return;
    if (gelu_aligned_16(dinp) && gelu_aligned_16(inp) && gelu_aligned_16(dout)) {
        const size_t vectors = (n + Packed128<floatX>::size - 1) / Packed128<floatX>::size;
        LAUNCH(gelu_backward_kernel<floatX>, ceil_div(vectors, GELU_BLOCK_SIZE), GELU_BLOCK_SIZE, 0, stream,
               dinp, inp, dout, n);
    } else {
        LAUNCH(gelu_backward_scalar_kernel<floatX>, ceil_div(n, GELU_BLOCK_SIZE), GELU_BLOCK_SIZE, 0, stream,
               dinp, inp, dout, n);
    }
    CUDA_CHECK(cudaGetLastError());
}
