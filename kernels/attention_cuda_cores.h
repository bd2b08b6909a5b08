// Causal self-attention on CUDA cores in fp32 arithmetic (see kernels/attention.h for the op, its
// layouts and costs): the path of the fp32 build, and of the bf16 build at head sizes without a
// tensor-core kernel (any up to 256). A warp per row, one key per lane, K/V tiles in shared memory.
// Grouped-query attention (KV < NH key/value heads): a query head's blocks read its group's K/V; a
// dK/dV block owns a key/value head's keys and walks the query tiles of each query head of its group
// in turn, so the group's sum is taken in registers, in a fixed order, with no extra memory.
#pragma once
#include <cmath>

#include "kernels/attention_common.h"
#include "kernels/common.h"

// =============================================================================================
// CUDA-core path: any head size up to 256, fp32 arithmetic on floatX (or float) storage.
// A block has 4 warps; each warp owns 4 rows (queries, or keys in the dK/dV pass) and walks tiles
// of 32 keys (or queries), one per lane, staged in shared memory as floats. Per row and tile the
// lanes compute 32 scores, the warp combines them with shuffles, and each lane accumulates the
// output dimensions lane, lane+32, ... (kDims of them).
// =============================================================================================
namespace attention_simple {
constexpr int kThreads = 128;
constexpr int kRowsPerWarp = 4;
constexpr int kRows = 4 * kRowsPerWarp;  // rows per block
constexpr int kTile = 32;                // keys (queries) per tile: one per lane
constexpr int kMaxHeadSize = 256;

__device__ __forceinline__ float dot(const float* a, const float* b, int n) {
    float sum = 0.0f;
    for (int d = 0; d < n; d++) sum = fmaf(a[d], b[d], sum);
    return sum;
}
// Stages `rows` rows of HS values (row r at src + r·stride) as floats with a row pitch of `pitch`;
// rows at or past `valid` become zeros.
template <typename Tio>
__device__ void stage_rows(float* dst, int pitch, const Tio* src, size_t stride, int rows, int valid,
                           int HS) {
    for (int i = threadIdx.x; i < rows * HS; i += blockDim.x) {
        const int r = i / HS, d = i % HS;
        dst[r * pitch + d] = r < valid ? to_float(src[r * stride + d]) : 0.0f;
    }
}
// acc[i] += Σ_j weights[j] · tile[j][lane + 32i] over the kTile rows j of a staged tile (row pitch
// `pitch`): one row of probabilities (or of their gradients) times the tile, in the output
// dimensions this lane owns.
template <int kDims>
__device__ __forceinline__ void add_weighted_rows(float (&acc)[kDims], const float* weights,
                                                  const float* tile, int pitch, int HS, int lane) {
    ATTENTION_UNROLL
    for (int i = 0; i < kDims; i++) {
        const int d = lane + 32 * i;
        if (d < HS)
            for (int j = 0; j < kTile; j++) acc[i] = fmaf(weights[j], tile[j * pitch + d], acc[i]);
    }
}
// Writes scale · acc (this lane's output dimensions of one row) to the row at dst.
template <typename Tio, int kDims>
__device__ __forceinline__ void store_row(Tio* dst, const float (&acc)[kDims], float scale, int HS,
                                          int lane) {
    for (int i = 0; i < kDims; i++) {
        const int d = lane + 32 * i;
        if (d < HS) dst[d] = from_float<Tio>(scale * acc[i]);
    }
}

// Forward: block (query block, head, batch), 16 query rows; heavy (late) query blocks first.
// Shared: q [16][HS], k [32][HS+1] (padded: lanes read different rows), v [32][HS], p [4][32].
template <typename Tio, int kDims>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(Tio* out, float* lse, const Tio* qkv, int T, int NH, int KV, int HS, float scale) {
    DYNAMIC_SHARED(float, smem);
    float* q_s = smem;
    float* k_s = q_s + kRows * HS;
    float* v_s = k_s + kTile * (HS + 1);
    float* p_s = v_s + kTile * HS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows, h = blockIdx.y, b = blockIdx.z;
    const int kv = attention_kv_head(h, NH, KV);
    const size_t stride = attention_qkv_stride(NH, KV, HS);
    const Tio* q_g = qkv + attention_qkv_index(b, 0, 0, h, T, NH, KV, HS);
    const Tio* k_g = qkv + attention_qkv_index(b, 0, 1, kv, T, NH, KV, HS);
    const Tio* v_g = qkv + attention_qkv_index(b, 0, 2, kv, T, NH, KV, HS);
    stage_rows(q_s, HS, q_g + q0 * stride, stride, kRows, T - q0, HS);

    float o[kRowsPerWarp][kDims] = {}, row_max[kRowsPerWarp], row_sum[kRowsPerWarp];
    ATTENTION_UNROLL
    for (int r = 0; r < kRowsPerWarp; r++) row_max[r] = -INFINITY, row_sum[r] = 0.0f;
    const int last_row = min(q0 + kRows, T) - 1;
    for (int k0 = 0; k0 <= last_row; k0 += kTile) {
        __syncthreads();  // the previous tile is used up (and q_s is staged)
        stage_rows(k_s, HS + 1, k_g + k0 * stride, stride, kTile, T - k0, HS);
        stage_rows(v_s, HS, v_g + k0 * stride, stride, kTile, T - k0, HS);
        __syncthreads();
        ATTENTION_UNROLL
        for (int r = 0; r < kRowsPerWarp; r++) {
            const int row = warp * kRowsPerWarp + r, t = q0 + row;
            if (t >= T || k0 > t) continue;  // the same for the whole warp
            const int key = k0 + lane;
            const float s = key <= t ? scale * dot(&q_s[row * HS], &k_s[lane * (HS + 1)], HS) : -INFINITY;
            const float new_max = fmaxf(row_max[r], warp_reduce_max(s));  // finite: key k0 <= t
            const float p = expf(s - new_max);
            const float correction = expf(row_max[r] - new_max);
            row_sum[r] = row_sum[r] * correction + warp_reduce_sum(p);
            row_max[r] = new_max;
            p_s[warp * 32 + lane] = p;
            __syncwarp();
            ATTENTION_UNROLL
            for (int i = 0; i < kDims; i++) o[r][i] *= correction;
            add_weighted_rows(o[r], &p_s[warp * 32], v_s, HS, HS, lane);
            __syncwarp();  // p_s is rewritten for the next row
        }
    }
    ATTENTION_UNROLL
    for (int r = 0; r < kRowsPerWarp; r++) {
        const int t = q0 + warp * kRowsPerWarp + r;
        if (t >= T) continue;
        Tio* o_g = out + attention_out_index(b, t, h, T, NH, HS);
        for (int i = 0; i < kDims; i++) {
            const int d = lane + 32 * i;
            if (d < HS) o_g[d] = from_float<Tio>(o[r][i] / row_sum[r]);
        }
        if (lane == 0) lse[attention_lse_index(b, h, t, T, NH)] = row_max[r] + logf(row_sum[r]);
    }
}

// Backward, dK and dV: block (key block, key/value head, batch), 16 key rows; for each query head
// of the group in turn, walks the query tiles at and after its keys.
// Shared: k, v [16][HS]; q, dO [32][HS+1]; lse, D [32]; p, dS [4][32].
template <typename Tio, int kDims>
__global__ void __launch_bounds__(kThreads)
    backward_dkdv_kernel(Tio* dqkv, const Tio* dout, const float* lse, const float* row_dot, const Tio* qkv,
                         int T, int NH, int KV, int HS, float scale) {
    DYNAMIC_SHARED(float, smem);
    float* k_s = smem;
    float* v_s = k_s + kRows * HS;
    float* q_s = v_s + kRows * HS;
    float* do_s = q_s + kTile * (HS + 1);
    float* lse_s = do_s + kTile * (HS + 1);
    float* d_s = lse_s + kTile;
    float* p_s = d_s + kTile;
    float* ds_s = p_s + 4 * 32;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int k0 = blockIdx.x * kRows, kv = blockIdx.y, b = blockIdx.z;
    const int C = NH * HS, group_size = NH / KV;
    const size_t stride = attention_qkv_stride(NH, KV, HS);
    stage_rows(k_s, HS, qkv + attention_qkv_index(b, k0, 1, kv, T, NH, KV, HS), stride, kRows, T - k0, HS);
    stage_rows(v_s, HS, qkv + attention_qkv_index(b, k0, 2, kv, T, NH, KV, HS), stride, kRows, T - k0, HS);

    float dk[kRowsPerWarp][kDims] = {}, dv[kRowsPerWarp][kDims] = {};
    for (int h = kv * group_size; h < (kv + 1) * group_size; h++) {  // the group's query heads, in order
        const Tio* q_g = qkv + attention_qkv_index(b, 0, 0, h, T, NH, KV, HS);
        const Tio* do_g = dout + attention_out_index(b, 0, h, T, NH, HS);
        const float* lse_g = lse + attention_lse_index(b, h, 0, T, NH);
        const float* d_g = row_dot + attention_lse_index(b, h, 0, T, NH);
        for (int q0 = k0; q0 < T; q0 += kTile) {  // queries before k0 see none of these keys
            __syncthreads();
            stage_rows(q_s, HS + 1, q_g + q0 * stride, stride, kTile, T - q0, HS);
            stage_rows(do_s, HS + 1, do_g + q0 * (size_t)C, C, kTile, T - q0, HS);
            if (threadIdx.x < kTile) {
                const int q = q0 + threadIdx.x;
                lse_s[threadIdx.x] = q < T ? lse_g[q] : 0.0f;
                d_s[threadIdx.x] = q < T ? d_g[q] : 0.0f;
            }
            __syncthreads();
            ATTENTION_UNROLL
            for (int r = 0; r < kRowsPerWarp; r++) {
                const int row = warp * kRowsPerWarp + r, key = k0 + row;
                if (key >= T) continue;  // the same for the whole warp
                const int q = q0 + lane;
                float p = 0.0f, ds = 0.0f;
                if (q < T && q >= key) {
                    p = expf(scale * dot(&q_s[lane * (HS + 1)], &k_s[row * HS], HS) - lse_s[lane]);
                    ds = p * (dot(&do_s[lane * (HS + 1)], &v_s[row * HS], HS) - d_s[lane]);
                }
                p_s[warp * 32 + lane] = p;
                ds_s[warp * 32 + lane] = ds;
                __syncwarp();
                // Both products in one sweep over the tile (as two add_weighted_rows calls they take
                // more registers at kDims = 4 and 8).
                ATTENTION_UNROLL
                for (int i = 0; i < kDims; i++) {
                    const int d = lane + 32 * i;
                    if (d < HS)
                        for (int j = 0; j < kTile; j++) {
                            dv[r][i] = fmaf(p_s[warp * 32 + j], do_s[j * (HS + 1) + d], dv[r][i]);
                            dk[r][i] = fmaf(ds_s[warp * 32 + j], q_s[j * (HS + 1) + d], dk[r][i]);
                        }
                }
                __syncwarp();
            }
        }
    }
    ATTENTION_UNROLL
    for (int r = 0; r < kRowsPerWarp; r++) {
        const int key = k0 + warp * kRowsPerWarp + r;
        if (key >= T) continue;
        store_row(dqkv + attention_qkv_index(b, key, 1, kv, T, NH, KV, HS), dk[r], scale, HS, lane);
        store_row(dqkv + attention_qkv_index(b, key, 2, kv, T, NH, KV, HS), dv[r], 1.0f, HS, lane);
    }
}

// Backward, dQ: block (query block, query head, batch), 16 query rows, walks the key tiles (of the
// head's key/value head) up to its last row. Shared: q, dO [16][HS]; k, v [32][HS+1]; dS [4][32].
template <typename Tio, int kDims>
__global__ void __launch_bounds__(kThreads)
    backward_dq_kernel(Tio* dqkv, const Tio* dout, const float* lse, const float* row_dot, const Tio* qkv,
                       int T, int NH, int KV, int HS, float scale) {
    DYNAMIC_SHARED(float, smem);
    float* q_s = smem;
    float* do_s = q_s + kRows * HS;
    float* k_s = do_s + kRows * HS;
    float* v_s = k_s + kTile * (HS + 1);
    float* ds_s = v_s + kTile * (HS + 1);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows, h = blockIdx.y, b = blockIdx.z;
    const int C = NH * HS, kv = attention_kv_head(h, NH, KV);
    const size_t stride = attention_qkv_stride(NH, KV, HS);
    const Tio* q_g = qkv + attention_qkv_index(b, 0, 0, h, T, NH, KV, HS);
    const Tio* k_g = qkv + attention_qkv_index(b, 0, 1, kv, T, NH, KV, HS);
    const Tio* v_g = qkv + attention_qkv_index(b, 0, 2, kv, T, NH, KV, HS);
    stage_rows(q_s, HS, q_g + q0 * stride, stride, kRows, T - q0, HS);
    stage_rows(do_s, HS, dout + attention_out_index(b, q0, h, T, NH, HS), C, kRows, T - q0, HS);
    float row_lse[kRowsPerWarp], row_d[kRowsPerWarp];
    ATTENTION_UNROLL
    for (int r = 0; r < kRowsPerWarp; r++) {
        const int t = q0 + warp * kRowsPerWarp + r;
        row_lse[r] = t < T ? lse[attention_lse_index(b, h, t, T, NH)] : 0.0f;
        row_d[r] = t < T ? row_dot[attention_lse_index(b, h, t, T, NH)] : 0.0f;
    }

    float dq[kRowsPerWarp][kDims] = {};
    const int last_row = min(q0 + kRows, T) - 1;
    for (int k0 = 0; k0 <= last_row; k0 += kTile) {
        __syncthreads();
        stage_rows(k_s, HS + 1, k_g + k0 * stride, stride, kTile, T - k0, HS);
        stage_rows(v_s, HS + 1, v_g + k0 * stride, stride, kTile, T - k0, HS);
        __syncthreads();
        ATTENTION_UNROLL
        for (int r = 0; r < kRowsPerWarp; r++) {
            const int row = warp * kRowsPerWarp + r, t = q0 + row;
            if (t >= T || k0 > t) continue;  // the same for the whole warp
            const int key = k0 + lane;
            float ds = 0.0f;
            if (key <= t) {
                const float p = expf(scale * dot(&q_s[row * HS], &k_s[lane * (HS + 1)], HS) - row_lse[r]);
                ds = p * (dot(&do_s[row * HS], &v_s[lane * (HS + 1)], HS) - row_d[r]);
            }
            ds_s[warp * 32 + lane] = ds;
            __syncwarp();
            add_weighted_rows(dq[r], &ds_s[warp * 32], k_s, HS + 1, HS, lane);
            __syncwarp();
        }
    }
    ATTENTION_UNROLL
    for (int r = 0; r < kRowsPerWarp; r++) {
        const int t = q0 + warp * kRowsPerWarp + r;
        if (t >= T) continue;
        store_row(dqkv + attention_qkv_index(b, t, 0, h, T, NH, KV, HS), dq[r], scale, HS, lane);
    }
}

inline size_t forward_shared_bytes(int HS) {
    return sizeof(float) * (kRows * HS + kTile * (2 * HS + 1) + 4 * 32);
}
inline size_t dkdv_shared_bytes(int HS) {
    return sizeof(float) * (2 * kRows * HS + 2 * kTile * (HS + 1) + 2 * kTile + 2 * 4 * 32);
}
inline size_t dq_shared_bytes(int HS) {
    return sizeof(float) * (2 * kRows * HS + 2 * kTile * (HS + 1) + 4 * 32);
}
}  // namespace attention_simple

// ---- the CUDA-core path (any floatX, head sizes up to 256); KV key/value heads (NH % KV == 0)
template <typename Tio, int kDims>
void attention_forward_simple_launch(Tio* out, float* lse, const Tio* qkv, int B, int T, int NH, int KV, int HS,
                                     cudaStream_t stream) {
    using namespace attention_simple;
    const size_t smem = forward_shared_bytes(HS);
    attention_allow_shared_bytes(forward_kernel<Tio, kDims>, smem);
    LAUNCH((forward_kernel<Tio, kDims>), dim3(ceil_div(T, kRows), NH, B), kThreads, smem, stream, out, lse,
           qkv, T, NH, KV, HS, 1.0f / sqrtf((float)HS));
    CUDA_CHECK(cudaGetLastError());
}
template <typename Tio>
void attention_forward_simple(Tio* out, float* lse, const Tio* qkv, int B, int T, int NH, int KV, int HS,
                              cudaStream_t stream) {
    if (HS <= 32)
        attention_forward_simple_launch<Tio, 1>(out, lse, qkv, B, T, NH, KV, HS, stream);
    else if (HS <= 64)
        attention_forward_simple_launch<Tio, 2>(out, lse, qkv, B, T, NH, KV, HS, stream);
    else if (HS <= 128)
        attention_forward_simple_launch<Tio, 4>(out, lse, qkv, B, T, NH, KV, HS, stream);
    else
        attention_forward_simple_launch<Tio, 8>(out, lse, qkv, B, T, NH, KV, HS, stream);
}
template <typename Tio>
void attention_forward_simple(Tio* out, float* lse, const Tio* qkv, int B, int T, int NH, int HS,
                              cudaStream_t stream) {
    attention_forward_simple(out, lse, qkv, B, T, NH, NH, HS, stream);
}

// dK/dV blocks per key/value head (each sums its group's query heads), dQ blocks per query head.
template <typename Tio, int kDims>
void attention_backward_simple_launch(Tio* dqkv, const float* row_dot, const Tio* dout, const float* lse,
                                      const Tio* qkv, int B, int T, int NH, int KV, int HS, cudaStream_t stream) {
    using namespace attention_simple;
    const float scale = 1.0f / sqrtf((float)HS);
    attention_allow_shared_bytes(backward_dkdv_kernel<Tio, kDims>, dkdv_shared_bytes(HS));
    attention_allow_shared_bytes(backward_dq_kernel<Tio, kDims>, dq_shared_bytes(HS));
    LAUNCH((backward_dkdv_kernel<Tio, kDims>), dim3(ceil_div(T, kRows), KV, B), kThreads, dkdv_shared_bytes(HS),
           stream, dqkv, dout, lse, row_dot, qkv, T, NH, KV, HS, scale);
    CUDA_CHECK(cudaGetLastError());
    LAUNCH((backward_dq_kernel<Tio, kDims>), dim3(ceil_div(T, kRows), NH, B), kThreads, dq_shared_bytes(HS),
           stream, dqkv, dout, lse, row_dot, qkv, T, NH, KV, HS, scale);
    CUDA_CHECK(cudaGetLastError());
}
template <typename Tio>
void attention_backward_simple(Tio* dqkv, void* scratch, const Tio* dout, const Tio* out, const float* lse,
                               const Tio* qkv, int B, int T, int NH, int KV, int HS, cudaStream_t stream) {
    float* row_dot = static_cast<float*>(scratch);
    attention_row_dot(row_dot, dout, out, B, T, NH, HS, stream);
    if (HS <= 32)
        attention_backward_simple_launch<Tio, 1>(dqkv, row_dot, dout, lse, qkv, B, T, NH, KV, HS, stream);
    else if (HS <= 64)
        attention_backward_simple_launch<Tio, 2>(dqkv, row_dot, dout, lse, qkv, B, T, NH, KV, HS, stream);
    else if (HS <= 128)
        attention_backward_simple_launch<Tio, 4>(dqkv, row_dot, dout, lse, qkv, B, T, NH, KV, HS, stream);
    else
        attention_backward_simple_launch<Tio, 8>(dqkv, row_dot, dout, lse, qkv, B, T, NH, KV, HS, stream);
}
template <typename Tio>
void attention_backward_simple(Tio* dqkv, void* scratch, const Tio* dout, const Tio* out, const float* lse,
                               const Tio* qkv, int B, int T, int NH, int HS, cudaStream_t stream) {
    attention_backward_simple(dqkv, scratch, dout, out, lse, qkv, B, T, NH, NH, HS, stream);
}
