// LayerNorm over the C channels of each of N = B·T rows, and the residual add that feeds it.
//
//   forward    mean[n] = (1/C) Σ_c x[n,c]
//              rstd[n] = 1 / sqrt((1/C) Σ_c (x[n,c] − mean[n])² + 1e-5)
//              out[n,c] = (x[n,c] − mean[n]) · rstd[n] · weight[c] + bias[c]
//   fused      x = floatX(inp1 + inp2) is stored as residual_out, then normalised as above
//   backward   xhat = (x − mean)·rstd,  g = dout·weight
//              dinp[n,c]  += rstd[n] · (g[n,c] − mean_c(g[n,:]) − xhat[n,c] · mean_c(g[n,:]·xhat[n,:]))
//              dweight[c] += Σ_n dout[n,c]·xhat[n,c],   dbias[c] += Σ_n dout[n,c]
//              optionally dinput_bias[c] += Σ_n dinp[n,c] (after the update): the gradient of a bias that
//              was added into inp, e.g. the bias of the projection whose output the residual add
//              brought in, which the LayerNorm's backward finishes anyway (no separate pass over dinp)
//   residual   out = a + b
//
// Shapes and types: inp, out, inp1, inp2, residual_out, dout, dinp are (N, C) floatX; weight, bias,
// dweight, dbias are (C) floatX; mean and rstd are (N) fp32. C must be a multiple of 8 and every
// pointer 16-byte aligned (128-bit accesses); N is arbitrary. Arithmetic is fp32 throughout.
//
// Per call, with S = sizeof(floatX) (2 for bf16) and P the backward's thread blocks (a few per SM):
//   layernorm_forward           reads N·C·S,   writes N·C·S + 8N bytes          ~7·N·C FLOPs
//   residual_layernorm_forward  reads 2·N·C·S, writes 2·N·C·S + 8N bytes        ~8·N·C FLOPs
//   layernorm_backward          reads 3·N·C·S + 8N (dout, inp, dinp, mean, rstd), writes N·C·S,
//                               plus 2·P·C fp32 partial sums written and read    ~16·N·C FLOPs
//                               (3·P·C with dinput_bias, and N·C more FLOPs)
//   residual_forward            reads 2·n·S, writes n·S                          n FLOPs
// (weight and bias, 2·C·S bytes, are read by every row but come from the L1 cache.)
//
// Design. Every kernel gives one warp a whole row. The forward kernels load the row once into
// registers with 128-bit loads (lane i holds vectors i, i+32, i+64, ... of the row), reduce the mean
// and then the variance around it with warp shuffles (two passes over registers, not over memory),
// and write the output: one read and one write of each element. The register array's length is a
// template parameter (VECS vectors per lane); rows longer than the largest instantiation take a
// "wide" kernel that re-reads the row from the L1/L2 cache instead.
// Backward also takes a row per warp: it reduces Σg and Σg·xhat with shuffles, updates dinp, and adds
// dout·xhat and dout into this warp's fp32 slice of shared memory. At the end each block sums its
// warps' slices in warp order into one row of `scratch`; a second small kernel sums those rows in
// block order into dweight and dbias (and dinput_bias: then each slice and row holds 3C floats). No float atomics: the result is bitwise the same every run
// (on a given GPU, whose SM count fixes the number of blocks).
#pragma once
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/common.h"

// ------------------------------------------------------------------------------------------------
// Shared helpers

constexpr float LAYERNORM_EPS = 1e-5f;
constexpr int LAYERNORM_X128 = Packed128<floatX>::size;  // floatX values per 128-bit vector
constexpr int LAYERNORM_FORWARD_THREADS = 256;           // 8 warps: 8 rows per block (at most)
constexpr int LAYERNORM_BACKWARD_MAX_WARPS = 8;          // warps per block (fewer for very wide rows)
constexpr int LAYERNORM_MAX_VECS = 16;                   // longest row held in registers: 32·16 vectors
// The backward holds two or three arrays of the row (dout, x, dinp) where the forward holds one: on
// sm_90 its 16-vector version spills (255 registers, 84 bytes stored, 352 loaded per thread, ptxas
// -v), so rows of more than 32·12 vectors (bf16: C > 3072) take the wide backward kernel instead.
constexpr int LAYERNORM_BACKWARD_MAX_VECS = 12;

// Offset of row `row` in an (N, C) tensor: 64-bit, since N·C passes 2^31 for large batches.
__host__ __device__ inline size_t layernorm_row_offset(int row, int C) { return (size_t)row * (size_t)C; }

// Number of 128-bit vectors a lane holds for a row of C channels, rounded up to an instantiated
// register-array length; 0 when the row is too long for registers (the wide kernels take it).
inline int layernorm_vecs_per_lane(int C) {
    const int per_lane = ceil_div(C / LAYERNORM_X128, 32);
    for (int candidate : {1, 2, 3, 4, 6, 8, 12, 16})
        if (per_lane <= candidate) return candidate;
    return 0;
}

// Calls f(std::integral_constant<int, V>()) for V = layernorm_vecs_per_lane(C), the register-array
// length the kernels are instantiated with, or for V = 0 when the row is too long for registers.
template <typename F>
inline void layernorm_with_vecs_per_lane(int C, F&& f) {
    switch (layernorm_vecs_per_lane(C)) {
        case 1:
            return f(std::integral_constant<int, 1>());
        case 2:
            return f(std::integral_constant<int, 2>());
        case 3:
            return f(std::integral_constant<int, 3>());
        case 4:
            return f(std::integral_constant<int, 4>());
        case 6:
            return f(std::integral_constant<int, 6>());
        case 8:
            return f(std::integral_constant<int, 8>());
        case 12:
            return f(std::integral_constant<int, 12>());
        case 16:
            return f(std::integral_constant<int, 16>());
        default:
            return f(std::integral_constant<int, 0>());
    }
}

// Rows (warps) per block of the forward kernels that hold the row in registers: 8, but 2 for rows
// of 12 or 16 vectors a lane. Those take 118 to 214 registers a thread (ptxas -v, sm_90: LayerNorm
// 118/158, fused 119/214; RMSNorm 119-120/150), so a block of 8 of them fits once or twice per SM,
// and all the SM's warps load, reduce and then store at the same time; blocks of 2 fit 4 to 8 times,
// each in its own phase (and where registers allow, more warps fit: 12 instead of 8 at 150 a thread).
__host__ __device__ constexpr int layernorm_forward_rows_per_block(int vecs) {
    return vecs >= 12 ? 2 : LAYERNORM_FORWARD_THREADS / 32;
}

// One output element: normalised, scaled and shifted; one definition for every forward kernel.
__device__ __forceinline__ float layernorm_apply(float x, float mean, float rstd, float w, float b) {
    return (x - mean) * rstd * w + b;
}
// The same for one 128-bit vector of the row, with its weight and bias vectors.
__device__ __forceinline__ Packed128<floatX> layernorm_apply128(const Packed128<floatX>& x, float mean,
                                                                float rstd, const Packed128<floatX>& w,
                                                                const Packed128<floatX>& b) {
    Packed128<floatX> o;
#pragma unroll
    for (int k = 0; k < LAYERNORM_X128; k++)
        o[k] =
            from_float<floatX>(layernorm_apply(to_float(x[k]), mean, rstd, to_float(w[k]), to_float(b[k])));
    return o;
}
// a + b for one 128-bit vector: fp32 sums rounded to floatX (the residual stream).
__device__ __forceinline__ Packed128<floatX> layernorm_add128(const Packed128<floatX>& a,
                                                              const Packed128<floatX>& b) {
    Packed128<floatX> sum;
#pragma unroll
    for (int k = 0; k < LAYERNORM_X128; k++) sum[k] = from_float<floatX>(to_float(a[k]) + to_float(b[k]));
    return sum;
}

// ------------------------------------------------------------------------------------------------
// Forward

// The row's mean and rstd from the VECS vectors each lane holds (vectors >= vecs are padding).
template <int VECS>
__device__ __forceinline__ void layernorm_row_statistics(const Packed128<floatX> (&x)[VECS], int lane,
                                                         int vecs, int C, float& mean, float& rstd) {
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < VECS; i++) {
        if (lane + 32 * i >= vecs) break;
#pragma unroll
        for (int k = 0; k < LAYERNORM_X128; k++) sum += to_float(x[i][k]);
    }
    mean = warp_reduce_sum(sum) / (float)C;
    float squares = 0.0f;
#pragma unroll
    for (int i = 0; i < VECS; i++) {
        if (lane + 32 * i >= vecs) break;
#pragma unroll
        for (int k = 0; k < LAYERNORM_X128; k++) {
            const float d = to_float(x[i][k]) - mean;
            squares += d * d;
        }
    }
    rstd = rsqrtf(warp_reduce_sum(squares) / (float)C + LAYERNORM_EPS);
}

// One warp per row, the row in registers. FUSED: the row is inp1 + inp2, rounded to floatX and
// stored to residual_out first; otherwise it is inp1 (inp2 and residual_out are unused).
template <int VECS, bool FUSED>
__global__ void __launch_bounds__(LAYERNORM_FORWARD_THREADS)
    layernorm_forward_kernel(floatX* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                             floatX* __restrict__ residual_out, const floatX* __restrict__ inp1,
                             const floatX* __restrict__ inp2, const floatX* __restrict__ weight,
                             const floatX* __restrict__ bias, int N, int C) {
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // the whole warp leaves together
    const int vecs = C / LAYERNORM_X128;
    const size_t offset = layernorm_row_offset(row, C);

    // Load the row: every load of the row is issued before the first one is used.
    Packed128<floatX> x[VECS];
#pragma unroll
    for (int i = 0; i < VECS; i++) {
        const int v = lane + 32 * i;
        if (v >= vecs) break;
        if (FUSED) {
            x[i] = layernorm_add128(load128cs(inp1 + offset + v * LAYERNORM_X128),
                                    load128cs(inp2 + offset + v * LAYERNORM_X128));
            store128(residual_out + offset + v * LAYERNORM_X128, x[i]);
        } else {
            x[i] = load128cs(inp1 + offset + v * LAYERNORM_X128);
        }
    }

    float row_mean, row_rstd;
    layernorm_row_statistics<VECS>(x, lane, vecs, C, row_mean, row_rstd);

    // Normalise and write; weight and bias are shared by all rows and stay in L1.
#pragma unroll
    for (int i = 0; i < VECS; i++) {
        const int v = lane + 32 * i;
        if (v >= vecs) break;
        const Packed128<floatX> w = load128(weight + v * LAYERNORM_X128);
        const Packed128<floatX> b = load128(bias + v * LAYERNORM_X128);
        store128(out + offset + v * LAYERNORM_X128, layernorm_apply128(x[i], row_mean, row_rstd, w, b));
    }
    if (lane == 0 && mean != nullptr) mean[row] = row_mean;
    if (lane == 0 && rstd != nullptr) rstd[row] = row_rstd;
}

// Rows too long for registers (C > 4096 in bf16, > 2048 in fp32): one warp per row, three passes,
// the second and third re-reading the row (the fused kernel re-reads the residual it just stored)
// from cache. `residual_out` and `inp2` are nullptr for plain LayerNorm.
static __global__ void __launch_bounds__(LAYERNORM_FORWARD_THREADS)
    layernorm_forward_wide_kernel(floatX* __restrict__ out, float* __restrict__ mean,
                                  float* __restrict__ rstd, floatX* residual_out, const floatX* inp1,
                                  const floatX* __restrict__ inp2, const floatX* __restrict__ weight,
                                  const floatX* __restrict__ bias, int N, int C) {
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const int vecs = C / LAYERNORM_X128;
    const size_t offset = layernorm_row_offset(row, C);
    const floatX* x_row = inp2 != nullptr ? residual_out + offset : inp1 + offset;

    float sum = 0.0f;
    for (int v = lane; v < vecs; v += 32) {
        Packed128<floatX> x = load128(inp1 + offset + v * LAYERNORM_X128);
        if (inp2 != nullptr) {
            x = layernorm_add128(x, load128(inp2 + offset + v * LAYERNORM_X128));
            store128(residual_out + offset + v * LAYERNORM_X128, x);  // re-read below by this lane
        }
        for (int k = 0; k < LAYERNORM_X128; k++) sum += to_float(x[k]);
    }
    const float row_mean = warp_reduce_sum(sum) / (float)C;
    float squares = 0.0f;
    for (int v = lane; v < vecs; v += 32) {
        const Packed128<floatX> x = load128(x_row + v * LAYERNORM_X128);
        for (int k = 0; k < LAYERNORM_X128; k++) {
            const float d = to_float(x[k]) - row_mean;
            squares += d * d;
        }
    }
    const float row_rstd = rsqrtf(warp_reduce_sum(squares) / (float)C + LAYERNORM_EPS);
    for (int v = lane; v < vecs; v += 32) {
        const Packed128<floatX> x = load128(x_row + v * LAYERNORM_X128);
        const Packed128<floatX> w = load128(weight + v * LAYERNORM_X128);
        const Packed128<floatX> b = load128(bias + v * LAYERNORM_X128);
        store128(out + offset + v * LAYERNORM_X128, layernorm_apply128(x, row_mean, row_rstd, w, b));
    }
    if (lane == 0 && mean != nullptr) mean[row] = row_mean;
    if (lane == 0 && rstd != nullptr) rstd[row] = row_rstd;
}

// out = a + b over n elements: one 128-bit vector per thread, scalar for a tail shorter than one.
static __global__ void residual_forward_kernel(floatX* __restrict__ out, const floatX* __restrict__ a,
                                        const floatX* __restrict__ b, size_t n) {
    const size_t first = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * LAYERNORM_X128;
    if (first + LAYERNORM_X128 <= n) {
        store128(out + first, layernorm_add128(load128cs(a + first), load128cs(b + first)));
    } else {
        for (size_t i = first; i < n; i++) out[i] = from_float<floatX>(to_float(a[i]) + to_float(b[i]));
    }
}

// ------------------------------------------------------------------------------------------------
// Backward

// Every lane adds its channels' dout·xhat and dout into its warp's slice of shared memory
// (dweight part then dbias part, C floats each). 128-bit shared accesses, 8 or 4 channels at once.
__device__ __forceinline__ void layernorm_accumulate_parameter_grads(float* warp_dweight, float* warp_dbias,
                                                                     int channel,
                                                                     const float (&dw)[LAYERNORM_X128],
                                                                     const float (&db)[LAYERNORM_X128]) {
#pragma unroll
    for (int k = 0; k < LAYERNORM_X128; k += 4) {
        float4 w4 = *reinterpret_cast<float4*>(warp_dweight + channel + k);
        float4 b4 = *reinterpret_cast<float4*>(warp_dbias + channel + k);
        w4.x += dw[k], w4.y += dw[k + 1], w4.z += dw[k + 2], w4.w += dw[k + 3];
        b4.x += db[k], b4.y += db[k + 1], b4.z += db[k + 2], b4.w += db[k + 3];
        *reinterpret_cast<float4*>(warp_dweight + channel + k) = w4;
        *reinterpret_cast<float4*>(warp_dbias + channel + k) = b4;
    }
}
// With dinput_bias, the third C floats of the slice sum the updated dinp as stored (rounded to floatX).
__device__ __forceinline__ void layernorm_accumulate_dinp(float* warp_dinput_bias, int channel,
                                                          const Packed128<floatX>& dx) {
#pragma unroll
    for (int k = 0; k < LAYERNORM_X128; k += 4) {
        float4 r4 = *reinterpret_cast<float4*>(warp_dinput_bias + channel + k);
        r4.x += to_float(dx[k]), r4.y += to_float(dx[k + 1]), r4.z += to_float(dx[k + 2]), r4.w += to_float(dx[k + 3]);
        *reinterpret_cast<float4*>(warp_dinput_bias + channel + k) = r4;
    }
}

// Zeroes this warp's slice of sums·C floats (only this warp uses it until the block's final sum),
// and at the end writes the block's partial row: the sum over warps, in warp order, of every slice.
__device__ __forceinline__ void layernorm_zero_warp_slice(float* warp_slice, int lane, int width) {
    for (int c = lane * 4; c < width; c += 32 * 4)
        *reinterpret_cast<float4*>(warp_slice + c) = make_float4(0, 0, 0, 0);
    __syncwarp();  // lanes then add into channels other lanes zeroed
}
__device__ __forceinline__ void layernorm_write_block_partial(float* __restrict__ partials,
                                                              const float* slices, int width) {
    __syncthreads();
    const int warps = blockDim.x / 32;
    float* block_row = partials + (size_t)blockIdx.x * width;
    for (int c = threadIdx.x; c < width; c += blockDim.x) {
        float sum = 0.0f;
        for (int w = 0; w < warps; w++) sum += slices[w * width + c];
        block_row[c] = sum;
    }
}

// One 128-bit vector's share of the row sums Σ g and Σ g·xhat, with g = dout·weight.
__device__ __forceinline__ void layernorm_add_row_sums(const Packed128<floatX>& d, const Packed128<floatX>& x,
                                                       const Packed128<floatX>& w, float mean, float rstd,
                                                       float& sum_g, float& sum_gx) {
#pragma unroll
    for (int k = 0; k < LAYERNORM_X128; k++) {
        const float g = to_float(d[k]) * to_float(w[k]);
        sum_g += g;
        sum_gx += g * (to_float(x[k]) - mean) * rstd;
    }
}
// One 128-bit vector's gradients, from the row's mean_g and mean_gx: dx += rstd·(g − mean_g −
// xhat·mean_gx) in place, and its terms of the parameter gradients, dw = dout·xhat and db = dout.
__device__ __forceinline__ void layernorm_vector_gradients(Packed128<floatX>& dx, float (&dw)[LAYERNORM_X128],
                                                           float (&db)[LAYERNORM_X128],
                                                           const Packed128<floatX>& d,
                                                           const Packed128<floatX>& x,
                                                           const Packed128<floatX>& w, float mean, float rstd,
                                                           float mean_g, float mean_gx) {
#pragma unroll
    for (int k = 0; k < LAYERNORM_X128; k++) {
        const float dk = to_float(d[k]);
        const float xhat = (to_float(x[k]) - mean) * rstd;
        const float g = dk * to_float(w[k]);
        dx[k] = from_float<floatX>(to_float(dx[k]) + rstd * (g - mean_g - xhat * mean_gx));
        dw[k] = dk * xhat;
        db[k] = dk;
    }
}

// One warp per row (rows strided over the whole grid), dout and x in registers. Dynamic shared
// memory: warps · sums·C floats. Writes one partial row of sums·C floats per block into `partials`
// (sums = 2: dweight, dbias; 3: and dinput_bias).
template <int VECS>
__global__ void __launch_bounds__(32 * LAYERNORM_BACKWARD_MAX_WARPS)
    layernorm_backward_kernel(floatX* __restrict__ dinp, float* __restrict__ partials,
                              const floatX* __restrict__ dout, const floatX* __restrict__ inp,
                              const floatX* __restrict__ weight, const float* __restrict__ mean,
                              const float* __restrict__ rstd, int N, int C, int sums) {
    DYNAMIC_SHARED(float, slices);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const int vecs = C / LAYERNORM_X128;
    float* warp_dweight = slices + warp * sums * C;
    float* warp_dbias = warp_dweight + C;
    float* warp_dinput_bias = sums == 3 ? warp_dbias + C : nullptr;
    layernorm_zero_warp_slice(warp_dweight, lane, sums * C);

    for (int row = blockIdx.x * warps + warp; row < N; row += gridDim.x * warps) {
        const size_t offset = layernorm_row_offset(row, C);
        // All of the row's loads first (dinp too, although it is needed only at the end), so that
        // their latencies overlap. Above 8 vectors per lane (bf16 rows of 2049..3072 channels) the
        // three arrays do not fit in 255 registers on sm_90 (ptxas spilled 42 bytes at 12 vectors):
        // there dinp is loaded where it is updated instead (246 registers, no spill).
        constexpr bool kEarlyDinp = VECS <= 8;
        Packed128<floatX> d[VECS], x[VECS], dx[kEarlyDinp ? VECS : 1];
#pragma unroll
        for (int i = 0; i < VECS; i++) {
            const int v = lane + 32 * i;
            if (v >= vecs) break;
            d[i] = load128cs(dout + offset + v * LAYERNORM_X128);
            x[i] = load128cs(inp + offset + v * LAYERNORM_X128);
            if constexpr (kEarlyDinp) dx[i] = load128(dinp + offset + v * LAYERNORM_X128);
        }
        const float row_mean = mean[row], row_rstd = rstd[row];

        // Σ g and Σ g·xhat over the row, then their means.
        float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
        for (int i = 0; i < VECS; i++) {
            const int v = lane + 32 * i;
            if (v >= vecs) break;
            layernorm_add_row_sums(d[i], x[i], load128(weight + v * LAYERNORM_X128), row_mean, row_rstd,
                                   sum_g, sum_gx);
        }
        const float mean_g = warp_reduce_sum(sum_g) / (float)C;
        const float mean_gx = warp_reduce_sum(sum_gx) / (float)C;

        // dinp += rstd·(g − mean_g − xhat·mean_gx); parameter gradients into shared memory.
#pragma unroll
        for (int i = 0; i < VECS; i++) {
            const int v = lane + 32 * i;
            if (v >= vecs) break;
            float dw[LAYERNORM_X128], db[LAYERNORM_X128];
            Packed128<floatX>& dxi = dx[kEarlyDinp ? i : 0];
            if constexpr (!kEarlyDinp) dxi = load128(dinp + offset + v * LAYERNORM_X128);
            layernorm_vector_gradients(dxi, dw, db, d[i], x[i], load128(weight + v * LAYERNORM_X128),
                                       row_mean, row_rstd, mean_g, mean_gx);
            store128(dinp + offset + v * LAYERNORM_X128, dxi);
            layernorm_accumulate_parameter_grads(warp_dweight, warp_dbias, v * LAYERNORM_X128, dw, db);
            if (warp_dinput_bias) layernorm_accumulate_dinp(warp_dinput_bias, v * LAYERNORM_X128, dxi);
        }
    }
    layernorm_write_block_partial(partials, slices, sums * C);
}

// Rows too long for registers: the same work in two passes over the row, the second re-reading
// dout and inp from cache.
static __global__ void __launch_bounds__(32 * LAYERNORM_BACKWARD_MAX_WARPS)
    layernorm_backward_wide_kernel(floatX* __restrict__ dinp, float* __restrict__ partials,
                                   const floatX* __restrict__ dout, const floatX* __restrict__ inp,
                                   const floatX* __restrict__ weight, const float* __restrict__ mean,
                                   const float* __restrict__ rstd, int N, int C, int sums) {
    DYNAMIC_SHARED(float, slices);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const int vecs = C / LAYERNORM_X128;
    float* warp_dweight = slices + warp * sums * C;
    float* warp_dbias = warp_dweight + C;
    float* warp_dinput_bias = sums == 3 ? warp_dbias + C : nullptr;
    layernorm_zero_warp_slice(warp_dweight, lane, sums * C);

    for (int row = blockIdx.x * warps + warp; row < N; row += gridDim.x * warps) {
        const size_t offset = layernorm_row_offset(row, C);
        const float row_mean = mean[row], row_rstd = rstd[row];
        float sum_g = 0.0f, sum_gx = 0.0f;
        for (int v = lane; v < vecs; v += 32) {
            const Packed128<floatX> d = load128(dout + offset + v * LAYERNORM_X128);
            const Packed128<floatX> x = load128(inp + offset + v * LAYERNORM_X128);
            layernorm_add_row_sums(d, x, load128(weight + v * LAYERNORM_X128), row_mean, row_rstd, sum_g,
                                   sum_gx);
        }
        const float mean_g = warp_reduce_sum(sum_g) / (float)C;
        const float mean_gx = warp_reduce_sum(sum_gx) / (float)C;
        for (int v = lane; v < vecs; v += 32) {
            const Packed128<floatX> d = load128(dout + offset + v * LAYERNORM_X128);
            const Packed128<floatX> x = load128(inp + offset + v * LAYERNORM_X128);
            const Packed128<floatX> w = load128(weight + v * LAYERNORM_X128);
            Packed128<floatX> dx = load128(dinp + offset + v * LAYERNORM_X128);
            float dw[LAYERNORM_X128], db[LAYERNORM_X128];
            layernorm_vector_gradients(dx, dw, db, d, x, w, row_mean, row_rstd, mean_g, mean_gx);
            store128(dinp + offset + v * LAYERNORM_X128, dx);
            layernorm_accumulate_parameter_grads(warp_dweight, warp_dbias, v * LAYERNORM_X128, dw, db);
            if (warp_dinput_bias) layernorm_accumulate_dinp(warp_dinput_bias, v * LAYERNORM_X128, dx);
        }
    }
    layernorm_write_block_partial(partials, slices, sums * C);
}

// Sums the backward's per-block partial rows (blocks × sums·C floats) in block order and adds the
// result into dweight (first C columns), dbias (next C) and, with sums = 3, dinput_bias (last C). A
// block takes 32 columns; its warps take every warps-th partial row, then warp 0 adds the warps' sums
// in warp order.
constexpr int LAYERNORM_SUM_WARPS = 16;
static __global__ void __launch_bounds__(32 * LAYERNORM_SUM_WARPS)
    layernorm_sum_partials_kernel(floatX* __restrict__ dweight, floatX* __restrict__ dbias,
                                  floatX* __restrict__ dinput_bias, const float* __restrict__ partials, int blocks,
                                  int C, int sums) {
    __shared__ float warp_sums[LAYERNORM_SUM_WARPS][32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int column = blockIdx.x * 32 + lane, width = sums * C;
    float sum = 0.0f;
    if (column < width) {
#pragma unroll 4
        for (int p = warp; p < blocks; p += LAYERNORM_SUM_WARPS) sum += partials[(size_t)p * width + column];
    }
    warp_sums[warp][lane] = sum;
    __syncthreads();
    if (warp != 0 || column >= width) return;
    float total = 0.0f;
    for (int w = 0; w < LAYERNORM_SUM_WARPS; w++) total += warp_sums[w][lane];
    floatX* target = column < C ? dweight + column : column < 2 * C ? dbias + (column - C) : dinput_bias + (column - 2 * C);
    *target = from_float<floatX>(to_float(*target) + total);
}

// ------------------------------------------------------------------------------------------------
// Host launch functions

// Why a shape or pointer cannot be handled, or nullptr when it can. The launch functions exit with
// this message; tests call it directly.
inline bool layernorm_aligned(std::initializer_list<const void*> pointers) {
    for (const void* p : pointers)
        if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
    return true;
}
inline const char* layernorm_shape_error(int N, int C, std::initializer_list<const void*> pointers) {
    if (N < 0) return "N must not be negative";
    if (C <= 0 || C % 8 != 0) return "C must be a positive multiple of 8 (128-bit vectors of bf16)";
    if (!layernorm_aligned(pointers)) return "tensors must be 16-byte aligned";
    return nullptr;
}
inline void layernorm_check(const char* function, int N, int C, std::initializer_list<const void*> pointers) {
    const char* error = layernorm_shape_error(N, C, pointers);
    if (error == nullptr) return;
    fprintf(stderr, "%s: N=%d, C=%d: %s\n", function, N, C, error);
    exit(EXIT_FAILURE);
}

// The forward launch shared by layernorm_forward and residual_layernorm_forward: picks the
// register-array length for C (or the wide kernel).
template <bool FUSED>
inline void layernorm_forward_launch(floatX* out, float* mean, float* rstd, floatX* residual_out,
                                     const floatX* inp1, const floatX* inp2, const floatX* weight,
                                     const floatX* bias, int N, int C, cudaStream_t stream) {
    if (N == 0) return;
    layernorm_with_vecs_per_lane(C, [&](auto vecs_per_lane) {
        constexpr int VECS = decltype(vecs_per_lane)::value;
        constexpr int rows = VECS > 0 ? layernorm_forward_rows_per_block(VECS) : LAYERNORM_FORWARD_THREADS / 32;
        const int blocks = ceil_div(N, rows), threads = 32 * rows;
        if constexpr (VECS > 0)
            LAUNCH((layernorm_forward_kernel<VECS, FUSED>), blocks, threads, 0, stream, out, mean, rstd,
                   residual_out, inp1, inp2, weight, bias, N, C);
        else
            LAUNCH(layernorm_forward_wide_kernel, blocks, threads, 0, stream, out, mean, rstd,
                   FUSED ? residual_out : nullptr, inp1, FUSED ? inp2 : nullptr, weight, bias, N, C);
    });
    CUDA_CHECK(cudaGetLastError());
}

// out = LayerNorm(inp)·weight + bias per row; saves mean and rstd (either may be nullptr when no
// backward follows).
inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight,
                              const floatX* bias, int N, int C, cudaStream_t stream) {
    layernorm_check("layernorm_forward", N, C, {out, inp, weight, bias});
    layernorm_forward_launch<false>(out, mean, rstd, nullptr, inp, nullptr, weight, bias, N, C, stream);
}

// residual_out = inp1 + inp2 (rounded to floatX), out = LayerNorm(residual_out): one pass over memory.
inline void residual_layernorm_forward(floatX* residual_out, floatX* out, float* mean, float* rstd,
                                       const floatX* inp1, const floatX* inp2, const floatX* weight,
                                       const floatX* bias, int N, int C, cudaStream_t stream) {
    layernorm_check("residual_layernorm_forward", N, C, {residual_out, out, inp1, inp2, weight, bias});
    layernorm_forward_launch<true>(out, mean, rstd, residual_out, inp1, inp2, weight, bias, N, C, stream);
}

// out = a + b over n elements (any n; 16-byte aligned pointers).
inline void residual_forward(floatX* out, const floatX* a, const floatX* b, size_t n, cudaStream_t stream) {
    if (!layernorm_aligned({out, a, b})) {
        fprintf(stderr, "residual_forward: tensors must be 16-byte aligned\n");
        exit(EXIT_FAILURE);
    }
    if (n == 0) return;
    const int threads = 256;
    const size_t vectors = (n + LAYERNORM_X128 - 1) / LAYERNORM_X128;
    LAUNCH(residual_forward_kernel, (unsigned)((vectors + threads - 1) / threads), threads, 0, stream, out, a,
           b, n);
    CUDA_CHECK(cudaGetLastError());
}

// The current CUDA device, or NO_LAYERNORM_DEVICE where the runtime has none (no GPU or no driver:
// only a memory plan asks then, for its scratch sizes).
constexpr int NO_LAYERNORM_DEVICE = -1;
inline int layernorm_current_device() {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
        (void)cudaGetLastError();
        return NO_LAYERNORM_DEVICE;
    }
    return device;
}

// The backward's launch shape for (N, C): the kernel, warps per block (as many as fit the shared
// memory, at most 8: bigger blocks leave fewer partial rows to sum), shared bytes, and the number
// of blocks: as many as run at once on the GPU (a persistent grid: each block's partial row covers
// many rows), never more than the rows need.
// `sums`: 2 (dweight, dbias) or 3 (and dinput_bias), the C-wide column sums each warp keeps.
// The grid of a backward kernel that keeps a slice of `slice_floats` fp32 sums per warp in shared
// memory (this file's, and kernels/rmsnorm.h's): warps per block, shared bytes, and blocks.
template <typename Kernel>
inline void layernorm_backward_grid(const char* function, Kernel kernel, int device, int N, int slice_floats,
                                    int& warps, int& shared_bytes, int& blocks) {
    // Without a device (a --dry-run on a machine with no GPU: device NO_LAYERNORM_DEVICE) the grid
    // is an H100 SXM's: 132 SMs, 227 KiB of shared memory per block, 2 blocks per SM.
    int sms = 132, max_shared = 227 * 1024;
    if (device != NO_LAYERNORM_DEVICE) {
        CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        CUDA_CHECK(cudaDeviceGetAttribute(&max_shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    }
    const int slice_bytes = slice_floats * (int)sizeof(float);
    warps = std::min(LAYERNORM_BACKWARD_MAX_WARPS, max_shared / slice_bytes);
    if (warps < 1) {
        fprintf(stderr, "%s: %d bytes of shared memory per warp needed, more than %d\n", function, slice_bytes,
                max_shared);
        exit(EXIT_FAILURE);
    }
    shared_bytes = warps * slice_bytes;
    if (device == NO_LAYERNORM_DEVICE) {
        blocks = std::max(1, std::min(sms * 2, ceil_div(N, warps)));
        return;
    }
    if (shared_bytes > 48 * 1024)  // the device's limit, not this call's: another shape may need more
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_shared));
    int blocks_per_sm = 2;  // the emulator has no occupancy calculator; 2 exercises several blocks per "SM"
#ifdef __CUDACC__
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, 32 * warps, shared_bytes));
    blocks_per_sm = std::max(blocks_per_sm, 1);
#endif
    blocks = std::max(1, std::min(sms * blocks_per_sm, ceil_div(N, warps)));
}

struct LayernormBackwardPlan {
    void (*kernel)(floatX*, float*, const floatX*, const floatX*, const floatX*, const float*, const float*,
                   int, int, int);
    int warps, shared_bytes, blocks;
};
inline LayernormBackwardPlan layernorm_backward_plan(int N, int C, int sums = 2) {
    // The trainer asks for the same two shapes every layer and step: remember the answers, since the
    // device queries below cost microseconds, as much as a small kernel.
    thread_local int cached_device[2] = {-1, -1}, cached_N[2] = {-1, -1}, cached_C[2] = {-1, -1};
    thread_local LayernormBackwardPlan cached[2] = {};
    const int device = layernorm_current_device();
    const int entry = sums - 2;
    if (device == cached_device[entry] && N == cached_N[entry] && C == cached_C[entry]) return cached[entry];

    LayernormBackwardPlan plan{};
    layernorm_with_vecs_per_lane(C, [&](auto vecs_per_lane) {
        constexpr int VECS = decltype(vecs_per_lane)::value;
        if constexpr (VECS > 0 && VECS <= LAYERNORM_BACKWARD_MAX_VECS)
            plan.kernel = layernorm_backward_kernel<VECS>;
        else
            plan.kernel = layernorm_backward_wide_kernel;
    });
    layernorm_backward_grid("layernorm_backward", plan.kernel, device, N, sums * C, plan.warps, plan.shared_bytes,
                            plan.blocks);
    cached_device[entry] = device, cached_N[entry] = N, cached_C[entry] = C, cached[entry] = plan;
    return plan;
}

// Device scratch layernorm_backward needs: one fp32 row of 2C (with dinput_bias 3C) partial sums per
// block. Enough for any call with the same C and at most N rows (the block count never grows as N
// shrinks), with or without dinput_bias.
inline size_t layernorm_backward_scratch_bytes(int N, int C) {
    layernorm_check("layernorm_backward_scratch_bytes", N, C, {});
    size_t bytes = 0;
    for (int sums : {2, 3}) bytes = std::max(bytes, (size_t)layernorm_backward_plan(N, C, sums).blocks * sums * C * sizeof(float));
    return bytes;
}

// Adds the gradients of LayerNorm into dinp (N, C), dweight (C) and dbias (C); with dinput_bias (C,
// optional) also the column sums of dinp as updated. `scratch` holds layernorm_backward_scratch_bytes(N,
// C) bytes of device memory.
inline void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, void* scratch,
                               const floatX* dout, const floatX* inp, const floatX* weight, const float* mean,
                               const float* rstd, int N, int C, cudaStream_t stream, floatX* dinput_bias = nullptr) {
    layernorm_check("layernorm_backward", N, C, {dinp, dweight, dbias, scratch, dout, inp, weight, dinput_bias});
    if (N == 0) return;
    const int sums = dinput_bias ? 3 : 2;
    const LayernormBackwardPlan plan = layernorm_backward_plan(N, C, sums);
    float* partials = static_cast<float*>(scratch);
    LAUNCH(plan.kernel, plan.blocks, 32 * plan.warps, plan.shared_bytes, stream, dinp, partials, dout, inp,
           weight, mean, rstd, N, C, sums);
    CUDA_CHECK(cudaGetLastError());
    LAUNCH(layernorm_sum_partials_kernel, ceil_div(sums * C, 32), 32 * LAYERNORM_SUM_WARPS, 0, stream, dweight,
           dbias, dinput_bias, partials, plan.blocks, C, sums);
    CUDA_CHECK(cudaGetLastError());
}

// ------------------------------------------------------------------------------------------------
// Recompute (activation recomputation, train_gpt -r 2)

// out = LayerNorm(inp) from the mean and rstd the forward saved: one 128-bit vector per thread, the
// same layernorm_apply128() as the forward kernels, so the result is bit for bit the forward's output.
// Reads N·C·S + 8N bytes (plus weight and bias from cache), writes N·C·S.
static __global__ void layernorm_recompute_kernel(floatX* __restrict__ out, const floatX* __restrict__ inp,
                                           const float* __restrict__ mean, const float* __restrict__ rstd,
                                           const floatX* __restrict__ weight, const floatX* __restrict__ bias,
                                           int N, int C) {
    const int vecs_per_row = C / LAYERNORM_X128;
    const size_t vector = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (vector >= (size_t)N * vecs_per_row) return;
    const int row = (int)(vector / vecs_per_row), column = (int)(vector % vecs_per_row) * LAYERNORM_X128;
    const size_t at = layernorm_row_offset(row, C) + column;
    const Packed128<floatX> x = load128cs(inp + at);
    const Packed128<floatX> w = load128(weight + column), b = load128(bias + column);
    store128(out + at, layernorm_apply128(x, mean[row], rstd[row], w, b));
}

inline void layernorm_recompute(floatX* out, const floatX* inp, const float* mean, const float* rstd,
                                const floatX* weight, const floatX* bias, int N, int C, cudaStream_t stream) {
    layernorm_check("layernorm_recompute", N, C, {out, inp, weight, bias});  // mean, rstd: scalar loads
    if (N == 0) return;
    const size_t vectors = (size_t)N * (C / LAYERNORM_X128);
    LAUNCH(layernorm_recompute_kernel, (unsigned)((vectors + 255) / 256), 256, 0, stream, out, inp, mean,
           rstd, weight, bias, N, C);
    CUDA_CHECK(cudaGetLastError());
}
