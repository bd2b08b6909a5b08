// Shared by the two implementations of causal self-attention (kernels/attention.h, which documents
// the op): where q, k, v, out and lse live in their tensors, the backward's row correction
// D = Σ_d dout·out (its kernel and its scratch size), and the shared-memory limit helper.
#pragma once
#include <cstddef>

#include "kernels/common.h"

#ifdef __CUDACC__
#define ATTENTION_UNROLL _Pragma("unroll")
#else
#define ATTENTION_UNROLL
#endif

// ---- where things are, in elements; size_t because B·T·3C passes 2^31 for large runs.
// A token's qkv row holds its NH query heads, then its KV key heads, then its KV value heads (the
// layout of kernels/rope.h); part 0 q, 1 k, 2 v, and h the head within its part. KV == NH is plain
// multi-head attention, whose row is (B, T, 3C) with C = NH·HS.
__host__ __device__ inline size_t attention_qkv_index(int b, int t, int part, int h, int T, int NH, int KV,
                                                      int HS) {
    const int head = part == 0 ? h : part == 1 ? NH + h : NH + KV + h;
    return ((size_t)b * T + t) * ((size_t)(NH + 2 * KV) * HS) + (size_t)head * HS;
}
__host__ __device__ inline size_t attention_qkv_index(int b, int t, int part, int h, int T, int NH, int HS) {
    return attention_qkv_index(b, t, part, h, T, NH, NH, HS);
}
// Elements from one token's qkv row to the next.
__host__ __device__ inline size_t attention_qkv_stride(int NH, int KV, int HS) {
    return (size_t)(NH + 2 * KV) * HS;
}
// The key/value head that query head h reads: NH/KV consecutive query heads share one.
__host__ __device__ inline int attention_kv_head(int h, int NH, int KV) { return h / (NH / KV); }
__host__ __device__ inline size_t attention_out_index(int b, int t, int h, int T, int NH, int HS) {
    return ((size_t)b * T + t) * ((size_t)NH * HS) + (size_t)h * HS;
}
__host__ __device__ inline size_t attention_lse_index(int b, int h, int t, int T, int NH) {
    return ((size_t)b * NH + h) * T + t;
}

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// The Hopper backward's query statistics: per (b, h) a row of T pairs {lse·log2(e), D} (fp32), rows
// T2 = T rounded up to even pairs apart, so that every row starts 16-byte aligned (what a TMA load
// of a row needs). They take D's place in the backward's scratch.
__host__ __device__ inline int attention_stats_row_pairs(int T) { return (T + 1) / 2 * 2; }
__host__ __device__ inline size_t attention_stats_index(int b, int h, int t, int T, int NH) {
    return 2 * (((size_t)b * NH + h) * attention_stats_row_pairs(T) + t);
}

// Stores one row's D: into row_dot (B, NH, T), or with lse given, as the pair {lse·log2(e), D} into
// the query statistics above.
__device__ __forceinline__ void attention_store_row_dot(float* row_dot, const float* lse, int b, int h, int t,
                                                        int T, int NH, float d) {
    const size_t at = attention_lse_index(b, h, t, T, NH);
    if (lse == nullptr) {
        row_dot[at] = d;
    } else {
        const size_t pair = attention_stats_index(b, h, t, T, NH);
        row_dot[pair] = lse[at] * kLog2e;
        row_dot[pair + 1] = d;
    }
}

// D[b][h][t] = Σ_d dout·out over the head's channels (the backward's row correction).
// Vectorised: one thread per 16-byte chunk of the (B·T, C) rows, the HS/kVec consecutive lanes of a
// head summed with shuffles (HS/kVec a power of two up to 32). Other head sizes: one thread per row.
// lse nullptr: D into row_dot (B, NH, T); otherwise the query statistics.
template <typename Tio>
__global__ void attention_row_dot_kernel(float* row_dot, const float* lse, const Tio* dout, const Tio* out, int B,
                                         int T, int NH, int HS) {
    constexpr int kVec = Packed128<Tio>::size;
    const int lanes = HS / kVec;  // per head
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x,
                    chunks = (long long)B * T * NH * lanes;
    float sum = 0.0f;
    if (i < chunks) {  // no early return: the whole warp takes part in the shuffles below
        const Packed128<Tio> x = load128cs(dout + i * kVec), y = load128cs(out + i * kVec);
        for (int k = 0; k < kVec; k++) sum = fmaf(to_float(x[k]), to_float(y[k]), sum);
    }
    for (int offset = lanes / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (i < chunks && i % lanes == 0) {
        const long long row = i / lanes;  // (b·T + t)·NH + h
        const int h = (int)(row % NH), t = (int)(row / NH % T), b = (int)(row / NH / T);
        attention_store_row_dot(row_dot, lse, b, h, t, T, NH, sum);
    }
}
template <typename Tio>
__global__ void attention_row_dot_scalar_kernel(float* row_dot, const float* lse, const Tio* dout, const Tio* out,
                                                int B, int T, int NH, int HS) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // (b·T + t)·NH + h
    if (i >= (long long)B * T * NH) return;
    const int h = (int)(i % NH), t = (int)(i / NH % T), b = (int)(i / NH / T);
    const size_t at = attention_out_index(b, t, h, T, NH, HS);
    float sum = 0.0f;
    for (int d = 0; d < HS; d++) sum = fmaf(to_float(dout[at + d]), to_float(out[at + d]), sum);
    attention_store_row_dot(row_dot, lse, b, h, t, T, NH, sum);
}

// Raises a kernel's dynamic shared memory limit where it needs more than the default 48 KiB.
template <typename Kernel>
inline void attention_allow_shared_bytes(Kernel kernel, size_t bytes) {
    if (bytes > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

// Scratch of the backward pass: D (B, NH, T) fp32, or the Hopper kernels' query statistics
// (B, NH, T2) pairs, rounded up to 256 bytes.
inline size_t attention_backward_scratch_bytes(int B, int T, int NH, int HS) {
    (void)HS;
    const size_t stats_bytes = (size_t)B * NH * attention_stats_row_pairs(T) * 2 * sizeof(float);
    return (stats_bytes + 255) / 256 * 256;
}

// Launches D = Σ dout·out into row_dot (B, NH, T), or with lse given the query statistics (pairs
// {lse·log2(e), D}, attention_stats_index): the vectorised kernel where the head size allows it,
// else one thread per row.
template <typename Tio>
void attention_row_dot(float* row_dot, const Tio* dout, const Tio* out, int B, int T, int NH, int HS,
                       cudaStream_t stream, const float* lse = nullptr) {
    constexpr int kVec = Packed128<Tio>::size;
    const int lanes = HS / kVec;
    if (HS % kVec == 0 && lanes <= 32 && (lanes & (lanes - 1)) == 0) {
        const long long threads = (long long)B * T * NH * lanes;
        LAUNCH(attention_row_dot_kernel<Tio>, (unsigned)((threads + 255) / 256), 256, 0, stream, row_dot, lse,
               dout, out, B, T, NH, HS);
        CUDA_CHECK(cudaGetLastError());
    } else {
        const long long threads = (long long)B * T * NH;
        LAUNCH(attention_row_dot_scalar_kernel<Tio>, (unsigned)((threads + 255) / 256), 256, 0, stream,
               row_dot, lse, dout, out, B, T, NH, HS);
        CUDA_CHECK(cudaGetLastError());
    }
}
