// SwiGLU's elementwise step, the middle of Llama's MLP (cpu/swiglu.h), on the fused gate|up
// activation:
//   forward   h[n,j] = silu(gate[n,j]) · up[n,j],   silu(g) = g · σ(g),  σ(g) = 1 / (1 + e^(−g))
//   backward  dgate[n,j] = dh[n,j] · up[n,j] · σ(g) · (1 + g · (1 − σ(g)))
//             dup[n,j]   = dh[n,j] · silu(g)
//
// Layout: inp (N, 2F) floatX, each row its F gate values then its F up values ([gate | up], what one
// matmul with gate_proj's and up_proj's weights stacked as a (2F, C) matrix produces); h and dh
// (N, F) floatX; dinp (N, 2F) floatX, [dgate | dup] in the same layout. F must be a multiple of 8
// and every pointer 16-byte aligned: each thread moves 128 bits (8 bf16 or 4 fp32) of each array.
// N is arbitrary. The maths runs in fp32.
// Backward OVERWRITES dinp (as gelu_backward does), and dinp may be inp: each thread reads its gate
// and up values before it writes their gradients, and no thread touches another's.
// Per call, S = sizeof(floatX): forward reads 2·N·F·S and writes N·F·S bytes, ~5 FLOPs and one exp per
// h value; backward reads 3·N·F·S (dh, gate, up) and writes 2·N·F·S bytes, ~10 FLOPs and one exp per
// h value. Both are memory-bound.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "kernels/common.h"

constexpr int SWIGLU_X128 = Packed128<floatX>::size;  // floatX values per 128-bit vector
constexpr int SWIGLU_BLOCK_SIZE = 256;

__device__ __forceinline__ float swiglu_sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

// Where vector `vector` of h (the thread's 128 bits) lies: its row and first column.
struct SwigluPosition {
    size_t row;
    int column;
};
__device__ __forceinline__ SwigluPosition swiglu_position(size_t vector, int F) {
    const int vectors_per_row = F / SWIGLU_X128;
    return {vector / vectors_per_row, (int)(vector % vectors_per_row) * SWIGLU_X128};
}

// One thread per 128-bit vector of h.
static __global__ void swiglu_forward_kernel(floatX* __restrict__ h, const floatX* __restrict__ inp, int N,
                                             int F) {
    const size_t vector = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (vector >= (size_t)N * (F / SWIGLU_X128)) return;
    const SwigluPosition at = swiglu_position(vector, F);
    const floatX* gate_row = inp + at.row * 2 * F;
    const Packed128<floatX> gate = load128cs(gate_row + at.column);
    const Packed128<floatX> up = load128cs(gate_row + F + at.column);
    Packed128<floatX> out;
#pragma unroll
    for (int k = 0; k < SWIGLU_X128; k++) {
        const float g = to_float(gate[k]);
        out[k] = from_float<floatX>(g * swiglu_sigmoid(g) * to_float(up[k]));
    }
    store128(h + at.row * F + at.column, out);
}

// One thread per 128-bit vector of dh. inp and dinp may be the same array (no __restrict__).
static __global__ void swiglu_backward_kernel(floatX* dinp, const floatX* __restrict__ dh, const floatX* inp, int N,
                                              int F) {
    const size_t vector = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (vector >= (size_t)N * (F / SWIGLU_X128)) return;
    const SwigluPosition at = swiglu_position(vector, F);
    const size_t gate_at = at.row * 2 * F + at.column, up_at = gate_at + F;
    const Packed128<floatX> gate = load128cs(inp + gate_at);
    const Packed128<floatX> up = load128cs(inp + up_at);
    const Packed128<floatX> d = load128cs(dh + at.row * F + at.column);
    Packed128<floatX> dgate, dup;
#pragma unroll
    for (int k = 0; k < SWIGLU_X128; k++) {
        const float g = to_float(gate[k]), u = to_float(up[k]), dk = to_float(d[k]);
        const float sig = swiglu_sigmoid(g);
        dgate[k] = from_float<floatX>(dk * u * sig * (1.0f + g * (1.0f - sig)));
        dup[k] = from_float<floatX>(dk * g * sig);
    }
    store128(dinp + gate_at, dgate);
    store128(dinp + up_at, dup);
}

// ---- host launch functions

// Why a shape or pointer cannot be handled, or nullptr when it can.
inline const char* swiglu_shape_error(int N, int F, std::initializer_list<const void*> pointers) {
    if (N < 0) return "N must not be negative";
    if (F <= 0 || F % 8 != 0) return "F must be a positive multiple of 8 (128-bit vectors of bf16)";
    for (const void* p : pointers)
        if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return "tensors must be 16-byte aligned";
    return nullptr;
}
inline void swiglu_check(const char* function, int N, int F, std::initializer_list<const void*> pointers) {
    const char* error = swiglu_shape_error(N, F, pointers);
    if (error == nullptr) return;
    fprintf(stderr, "%s: N=%d, F=%d: %s\n", function, N, F, error);
    exit(EXIT_FAILURE);
}

// h (N, F) = silu(gate) · up from inp (N, 2F) = [gate | up].
inline void swiglu_forward(floatX* h, const floatX* inp, int N, int F, cudaStream_t stream) {
    swiglu_check("swiglu_forward", N, F, {h, inp});
    const size_t vectors = (size_t)N * (F / SWIGLU_X128);
    if (vectors == 0) return;
    LAUNCH(swiglu_forward_kernel, ceil_div(vectors, SWIGLU_BLOCK_SIZE), SWIGLU_BLOCK_SIZE, 0, stream, h, inp, N, F);
    CUDA_CHECK(cudaGetLastError());
}

// dinp (N, 2F) = [dgate | dup] from dh (N, F) and the forward's inp; OVERWRITES dinp (may be inp).
inline void swiglu_backward(floatX* dinp, const floatX* dh, const floatX* inp, int N, int F, cudaStream_t stream) {
    swiglu_check("swiglu_backward", N, F, {dinp, dh, inp});
    const size_t vectors = (size_t)N * (F / SWIGLU_X128);
    if (vectors == 0) return;
    LAUNCH(swiglu_backward_kernel, ceil_div(vectors, SWIGLU_BLOCK_SIZE), SWIGLU_BLOCK_SIZE, 0, stream, dinp, dh,
           inp, N, F);
    CUDA_CHECK(cudaGetLastError());
}
