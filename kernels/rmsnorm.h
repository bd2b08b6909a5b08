// RMSNorm over the C channels of each of N = B·T rows (Llama's input_layernorm,
// post_attention_layernorm and final norm), and the residual add that feeds it.
//
//   forward    rstd[n]  = 1 / sqrt((1/C) Σ_c x[n,c]² + eps)
//              out[n,c] = x[n,c] · rstd[n] · weight[c]
//   fused      x = floatX(inp1 + inp2) is stored as residual_out, then normalised as above
//   backward   xhat = x·rstd,  g = dout·weight
//              dinp[n,c]  += rstd[n] · (g[n,c] − xhat[n,c] · mean_c(g[n,:]·xhat[n,:]))
//              dweight[c] += Σ_n dout[n,c]·xhat[n,c]
//              (the fused forward's backward is the same call on residual_out: the add passes the
//              gradient through unchanged, and dinp is the residual stream's gradient)
//
// Shapes and types: inp, out, inp1, inp2, residual_out, dout, dinp are (N, C) floatX; weight and
// dweight are (C) floatX; rstd is (N) fp32. C must be a multiple of 8 and every pointer 16-byte
// aligned (128-bit accesses); N is arbitrary. Arithmetic is fp32 throughout.
//
// Per call, with S = sizeof(floatX) (2 for bf16) and P the backward's thread blocks (a few per SM):
//   rmsnorm_forward           reads N·C·S,   writes N·C·S + 4N bytes           ~4·N·C FLOPs
//   residual_rmsnorm_forward  reads 2·N·C·S, writes 2·N·C·S + 4N bytes         ~5·N·C FLOPs
//   rmsnorm_backward          reads 3·N·C·S + 4N (dout, inp, dinp, rstd), writes N·C·S,
//                             plus P·C fp32 partial sums written and read      ~9·N·C FLOPs
// (weight, C·S bytes, is read by every row but comes from the L1 cache.)
//
// Design: kernels/layernorm.h's, without the mean. A warp takes a whole row, held in registers
// (128-bit loads, lane i holding vectors i, i+32, ...) for rows of up to LAYERNORM_MAX_VECS vectors
// per lane (forward) or LAYERNORM_BACKWARD_MAX_VECS (backward); longer rows take "wide" kernels that
// re-read the row from cache. The backward's dweight is summed without float atomics, with
// layernorm.h's scheme: each warp adds into its own C-float slice of shared memory, each block sums
// its slices in warp order into one row of `scratch`, and layernorm_sum_partials_kernel (sums = 1)
// adds those rows in block order into dweight: bitwise the same every run on a given GPU.
#pragma once
#include <initializer_list>

#include "kernels/common.h"
#include "kernels/layernorm.h"

constexpr int RMSNORM_FORWARD_THREADS = 256;  // 8 warps: 8 rows per block (at most)

// One output vector: x·rstd·w per element, rounded to floatX.
__device__ __forceinline__ Packed128<floatX> rmsnorm_apply128(const Packed128<floatX>& x, float rstd,
                                                              const Packed128<floatX>& w) {
    Packed128<floatX> o;
#pragma unroll
    for (int k = 0; k < LAYERNORM_X128; k++) o[k] = from_float<floatX>(to_float(x[k]) * rstd * to_float(w[k]));
    return o;
}
// Σ x² over one vector.
__device__ __forceinline__ float rmsnorm_squares128(const Packed128<floatX>& x) {
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < LAYERNORM_X128; k++) sum += to_float(x[k]) * to_float(x[k]);
    return sum;
}
// The row's rstd from every lane's partial Σ x².
__device__ __forceinline__ float rmsnorm_rstd(float lane_squares, int C, float eps) {
    return rsqrtf(warp_reduce_sum(lane_squares) / (float)C + eps);
}

// ------------------------------------------------------------------------------------------------
// Forward

// One warp per row, the row in registers. FUSED: the row is inp1 + inp2, rounded to floatX and
// stored to residual_out first; otherwise it is inp1 (inp2 and residual_out are unused).
template <int VECS, bool FUSED>
__global__ void __launch_bounds__(RMSNORM_FORWARD_THREADS)
    rmsnorm_forward_kernel(floatX* __restrict__ out, float* __restrict__ rstd, floatX* __restrict__ residual_out,
                           const floatX* __restrict__ inp1, const floatX* __restrict__ inp2,
                           const floatX* __restrict__ weight, int N, int C, float eps) {
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // the whole warp leaves together
    const int vecs = C / LAYERNORM_X128;
    const size_t offset = layernorm_row_offset(row, C);

    Packed128<floatX> x[VECS];
    float squares = 0.0f;
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
        squares += rmsnorm_squares128(x[i]);
    }
    const float row_rstd = rmsnorm_rstd(squares, C, eps);

#pragma unroll
    for (int i = 0; i < VECS; i++) {
        const int v = lane + 32 * i;
        if (v >= vecs) break;
        const Packed128<floatX> w = load128(weight + v * LAYERNORM_X128);
        store128(out + offset + v * LAYERNORM_X128, rmsnorm_apply128(x[i], row_rstd, w));
    }
    if (lane == 0 && rstd != nullptr) rstd[row] = row_rstd;
}

// Rows too long for registers: one warp per row, two passes, the second re-reading the row (for the
// fused kernel, the residual this lane just stored) from cache. inp2 and residual_out are nullptr
// for plain RMSNorm.
static __global__ void __launch_bounds__(RMSNORM_FORWARD_THREADS)
    rmsnorm_forward_wide_kernel(floatX* __restrict__ out, float* __restrict__ rstd, floatX* residual_out,
                                const floatX* inp1, const floatX* __restrict__ inp2,
                                const floatX* __restrict__ weight, int N, int C, float eps) {
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const int vecs = C / LAYERNORM_X128;
    const size_t offset = layernorm_row_offset(row, C);
    const floatX* x_row = inp2 != nullptr ? residual_out + offset : inp1 + offset;

    float squares = 0.0f;
    for (int v = lane; v < vecs; v += 32) {
        Packed128<floatX> x = load128(inp1 + offset + v * LAYERNORM_X128);
        if (inp2 != nullptr) {
            x = layernorm_add128(x, load128(inp2 + offset + v * LAYERNORM_X128));
            store128(residual_out + offset + v * LAYERNORM_X128, x);
        }
        squares += rmsnorm_squares128(x);
    }
    const float row_rstd = rmsnorm_rstd(squares, C, eps);
    for (int v = lane; v < vecs; v += 32) {
        const Packed128<floatX> x = load128(x_row + v * LAYERNORM_X128);
        const Packed128<floatX> w = load128(weight + v * LAYERNORM_X128);
        store128(out + offset + v * LAYERNORM_X128, rmsnorm_apply128(x, row_rstd, w));
    }
    if (lane == 0 && rstd != nullptr) rstd[row] = row_rstd;
}

// ------------------------------------------------------------------------------------------------
// Backward

// One vector's share of the row sum Σ g·x (g = dout·weight; rstd is applied once, to the total).
__device__ __forceinline__ float rmsnorm_gx128(const Packed128<floatX>& d, const Packed128<floatX>& x,
                                               const Packed128<floatX>& w) {
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < LAYERNORM_X128; k++) sum += to_float(d[k]) * to_float(w[k]) * to_float(x[k]);
    return sum;
}
// One vector's gradients: dx += rstd·(g − xhat·mean_gx) in place, and dout·xhat added into this
// warp's slice of shared memory at `channel` (128-bit shared accesses, 4 channels at once).
__device__ __forceinline__ void rmsnorm_vector_gradients(Packed128<floatX>& dx, float* warp_dweight, int channel,
                                                         const Packed128<floatX>& d, const Packed128<floatX>& x,
                                                         const Packed128<floatX>& w, float rstd, float mean_gx) {
    float dw[LAYERNORM_X128];
#pragma unroll
    for (int k = 0; k < LAYERNORM_X128; k++) {
        const float dk = to_float(d[k]);
        const float xhat = to_float(x[k]) * rstd;
        dx[k] = from_float<floatX>(to_float(dx[k]) + rstd * (dk * to_float(w[k]) - xhat * mean_gx));
        dw[k] = dk * xhat;
    }
#pragma unroll
    for (int k = 0; k < LAYERNORM_X128; k += 4) {
        float4 w4 = *reinterpret_cast<float4*>(warp_dweight + channel + k);
        w4.x += dw[k], w4.y += dw[k + 1], w4.z += dw[k + 2], w4.w += dw[k + 3];
        *reinterpret_cast<float4*>(warp_dweight + channel + k) = w4;
    }
}

// One warp per row (rows strided over the whole grid), dout and x in registers. Dynamic shared
// memory: warps · C floats. Writes one partial row of C floats per block into `partials`.
template <int VECS>
__global__ void __launch_bounds__(32 * LAYERNORM_BACKWARD_MAX_WARPS)
    rmsnorm_backward_kernel(floatX* __restrict__ dinp, float* __restrict__ partials,
                            const floatX* __restrict__ dout, const floatX* __restrict__ inp,
                            const floatX* __restrict__ weight, const float* __restrict__ rstd, int N, int C) {
    DYNAMIC_SHARED(float, slices);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const int vecs = C / LAYERNORM_X128;
    float* warp_dweight = slices + warp * C;
    layernorm_zero_warp_slice(warp_dweight, lane, C);

    for (int row = blockIdx.x * warps + warp; row < N; row += gridDim.x * warps) {
        const size_t offset = layernorm_row_offset(row, C);
        // As in layernorm_backward_kernel: every load of the row first, dinp's too up to 8 vectors
        // per lane; above that the three arrays would not fit the registers, and dinp is loaded
        // where it is updated.
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
        const float row_rstd = rstd[row];
        float sum_gx = 0.0f;
#pragma unroll
        for (int i = 0; i < VECS; i++) {
            const int v = lane + 32 * i;
            if (v >= vecs) break;
            sum_gx += rmsnorm_gx128(d[i], x[i], load128(weight + v * LAYERNORM_X128));
        }
        const float mean_gx = warp_reduce_sum(sum_gx) * row_rstd / (float)C;  // mean of g·xhat

#pragma unroll
        for (int i = 0; i < VECS; i++) {
            const int v = lane + 32 * i;
            if (v >= vecs) break;
            Packed128<floatX>& dxi = dx[kEarlyDinp ? i : 0];
            if constexpr (!kEarlyDinp) dxi = load128(dinp + offset + v * LAYERNORM_X128);
            rmsnorm_vector_gradients(dxi, warp_dweight, v * LAYERNORM_X128, d[i], x[i],
                                     load128(weight + v * LAYERNORM_X128), row_rstd, mean_gx);
            store128(dinp + offset + v * LAYERNORM_X128, dxi);
        }
    }
    layernorm_write_block_partial(partials, slices, C);
}

// Rows too long for registers: the same work in two passes over the row, the second re-reading
// dout and inp from cache.
static __global__ void __launch_bounds__(32 * LAYERNORM_BACKWARD_MAX_WARPS)
    rmsnorm_backward_wide_kernel(floatX* __restrict__ dinp, float* __restrict__ partials,
                                 const floatX* __restrict__ dout, const floatX* __restrict__ inp,
                                 const floatX* __restrict__ weight, const float* __restrict__ rstd, int N, int C) {
    DYNAMIC_SHARED(float, slices);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const int vecs = C / LAYERNORM_X128;
    float* warp_dweight = slices + warp * C;
    layernorm_zero_warp_slice(warp_dweight, lane, C);

    for (int row = blockIdx.x * warps + warp; row < N; row += gridDim.x * warps) {
        const size_t offset = layernorm_row_offset(row, C);
        const float row_rstd = rstd[row];
        float sum_gx = 0.0f;
        for (int v = lane; v < vecs; v += 32)
            sum_gx += rmsnorm_gx128(load128(dout + offset + v * LAYERNORM_X128),
                                    load128(inp + offset + v * LAYERNORM_X128), load128(weight + v * LAYERNORM_X128));
        const float mean_gx = warp_reduce_sum(sum_gx) * row_rstd / (float)C;
        for (int v = lane; v < vecs; v += 32) {
            Packed128<floatX> dx = load128(dinp + offset + v * LAYERNORM_X128);
            rmsnorm_vector_gradients(dx, warp_dweight, v * LAYERNORM_X128, load128(dout + offset + v * LAYERNORM_X128),
                                     load128(inp + offset + v * LAYERNORM_X128),
                                     load128(weight + v * LAYERNORM_X128), row_rstd, mean_gx);
            store128(dinp + offset + v * LAYERNORM_X128, dx);
        }
    }
    layernorm_write_block_partial(partials, slices, C);
}

// ------------------------------------------------------------------------------------------------
// Host launch functions (shape checks: layernorm_shape_error, the same rules)

template <bool FUSED>
inline void rmsnorm_forward_launch(floatX* out, float* rstd, floatX* residual_out, const floatX* inp1,
                                   const floatX* inp2, const floatX* weight, int N, int C, float eps,
                                   cudaStream_t stream) {
    if (N == 0) return;
    layernorm_with_vecs_per_lane(C, [&](auto vecs_per_lane) {
        constexpr int VECS = decltype(vecs_per_lane)::value;
        // Rows per block as layernorm's forward (fewer for rows of 12+ vectors a lane: occupancy).
        constexpr int rows = VECS > 0 ? layernorm_forward_rows_per_block(VECS) : RMSNORM_FORWARD_THREADS / 32;
        const int blocks = ceil_div(N, rows), threads = 32 * rows;
        if constexpr (VECS > 0)
            LAUNCH((rmsnorm_forward_kernel<VECS, FUSED>), blocks, threads, 0, stream, out, rstd, residual_out,
                   inp1, inp2, weight, N, C, eps);
        else
            LAUNCH(rmsnorm_forward_wide_kernel, blocks, threads, 0, stream, out, rstd,
                   FUSED ? residual_out : nullptr, inp1, FUSED ? inp2 : nullptr, weight, N, C, eps);
    });
    CUDA_CHECK(cudaGetLastError());
}

// out = RMSNorm(inp)·weight per row; saves rstd (may be nullptr when no backward follows). For the
// first layer, whose input is the embedding itself.
inline void rmsnorm_forward(floatX* out, float* rstd, const floatX* inp, const floatX* weight, int N, int C,
                            float eps, cudaStream_t stream) {
    layernorm_check("rmsnorm_forward", N, C, {out, inp, weight});
    rmsnorm_forward_launch<false>(out, rstd, nullptr, inp, nullptr, weight, N, C, eps, stream);
}

// residual_out = inp1 + inp2 (rounded to floatX), out = RMSNorm(residual_out)·weight: one pass over
// memory.
inline void residual_rmsnorm_forward(floatX* residual_out, floatX* out, float* rstd, const floatX* inp1,
                                     const floatX* inp2, const floatX* weight, int N, int C, float eps,
                                     cudaStream_t stream) {
    layernorm_check("residual_rmsnorm_forward", N, C, {residual_out, out, inp1, inp2, weight});
    rmsnorm_forward_launch<true>(out, rstd, residual_out, inp1, inp2, weight, N, C, eps, stream);
}

// The backward's launch shape for (N, C), as layernorm_backward_plan chooses it: the kernel, up to
// 8 warps per block (as many as the shared memory holds), and a persistent grid of as many blocks
// as run at once, never more than the rows need.
struct RmsnormBackwardPlan {
    void (*kernel)(floatX*, float*, const floatX*, const floatX*, const floatX*, const float*, int, int);
    int warps, shared_bytes, blocks;
};
inline RmsnormBackwardPlan rmsnorm_backward_plan(int N, int C) {
    // The trainer asks for the same shape every layer: remember the last answer (device queries
    // cost as much as a small kernel).
    thread_local int cached_device = -1, cached_N = -1, cached_C = -1;
    thread_local RmsnormBackwardPlan cached{};
    const int device = layernorm_current_device();
    if (device == cached_device && N == cached_N && C == cached_C) return cached;

    RmsnormBackwardPlan plan{};
    layernorm_with_vecs_per_lane(C, [&](auto vecs_per_lane) {
        constexpr int VECS = decltype(vecs_per_lane)::value;
        if constexpr (VECS > 0 && VECS <= LAYERNORM_BACKWARD_MAX_VECS)
            plan.kernel = rmsnorm_backward_kernel<VECS>;
        else
            plan.kernel = rmsnorm_backward_wide_kernel;
    });
    layernorm_backward_grid("rmsnorm_backward", plan.kernel, device, N, C, plan.warps, plan.shared_bytes,
                            plan.blocks);
    cached_device = device, cached_N = N, cached_C = C, cached = plan;
    return plan;
}

// Device scratch rmsnorm_backward needs: one fp32 row of C partial sums per block. Enough for any
// call with the same C and at most N rows.
inline size_t rmsnorm_backward_scratch_bytes(int N, int C) {
    layernorm_check("rmsnorm_backward_scratch_bytes", N, C, {});
    return (size_t)rmsnorm_backward_plan(N, C).blocks * C * sizeof(float);
}

// Adds the gradients of RMSNorm into dinp (N, C) and dweight (C). inp is what the forward normalised
// (residual_out for the fused forward), rstd what it saved. `scratch` holds
// rmsnorm_backward_scratch_bytes(N, C) bytes of device memory.
inline void rmsnorm_backward(floatX* dinp, floatX* dweight, void* scratch, const floatX* dout, const floatX* inp,
                             const floatX* weight, const float* rstd, int N, int C, cudaStream_t stream) {
    layernorm_check("rmsnorm_backward", N, C, {dinp, dweight, scratch, dout, inp, weight});
    if (N == 0) return;
    const RmsnormBackwardPlan plan = rmsnorm_backward_plan(N, C);
    float* partials = static_cast<float*>(scratch);
    LAUNCH(plan.kernel, plan.blocks, 32 * plan.warps, plan.shared_bytes, stream, dinp, partials, dout, inp, weight,
           rstd, N, C);
    CUDA_CHECK(cudaGetLastError());
    LAUNCH(layernorm_sum_partials_kernel, ceil_div(C, 32), 32 * LAYERNORM_SUM_WARPS, 0, stream, dweight, nullptr,
           nullptr, partials, plan.blocks, C, 1);
    CUDA_CHECK(cudaGetLastError());
}
