// Causal multi-head self-attention, flash-attention style: tiled over queries and keys with an
// online softmax, so nothing of size T×T ever reaches global memory.
//
// Per batch b and head h, with Q, K, V the head's (T × HS) slices of qkv and scale = 1/sqrt(HS):
//   S = scale · Q·Kᵀ,  S[i][j] = -inf for j > i (causal),  P = softmax_rows(S),  out = P·V
//   lse[i] = log Σ_j exp(S[i][j])                      (saved for backward: P = exp(S - lse))
// Backward, with dO = dout and D[i] = Σ_d dO[i][d]·out[i][d] = Σ_j P[i][j]·(dO·Vᵀ)[i][j]:
//   dV = Pᵀ·dO,  dS = P ⊙ (dO·Vᵀ − D),  dQ = scale · dS·K,  dK = scale · dSᵀ·Q
//
// Layouts (as cpu/attention.h): qkv (B, T, 3C) floatX with C = NH·HS, q, k and v side by side, head
// h at channels [h·HS, (h+1)·HS) of each; out, dout (B, T, C) floatX; lse (B, NH, T) fp32 (natural
// log); dqkv (B, T, 3C) floatX, overwritten.
//
// Per call (bf16, causal), N = B·NH·T²·HS:
//   forward:  reads qkv (6·B·T·C bytes) and writes out and lse (2·B·T·C + 4·B·NH·T bytes); the K/V
//             tiles are re-read by every query block, mostly from L2. FLOPs counted as 2·N (the two
//             causal products, 2·2·N/2); the tensor cores run ~2.2·N with tile granularity.
//   backward: reads qkv, out, dout, lse, writes dqkv and D (scratch, 4·B·NH·T bytes). FLOPs counted
//             as 2.5 × forward = 5·N; executed ~7·N: a dK/dV pass over key blocks (S, dP, dV, dK)
//             and a separate dQ pass over query blocks (S, dP, dQ), which keeps every sum in one
//             block and the result bitwise deterministic (no float atomics).
//
// Two implementations:
//   - tensor cores (bf16 build, HS = 32, 64, 128): FlashAttention-2 style. A block of 4 warps takes
//     64 rows, 16 per warp; tiles stream through swizzled shared memory by cp.async, double-buffered;
//     ldmatrix feeds mma.sync m16n8k16 (kernels/mma.h); the probabilities stay in registers and feed
//     the next product directly; tiles above the diagonal are skipped, and within the diagonal tile
//     each warp skips the 16×16 blocks that lie wholly above its rows. Template parameter kRecipe
//     switches the later ideas off for dev/cuda/attention.cu.
//   - CUDA cores, fp32 arithmetic (the fp32 build, and other head sizes up to 256): a warp per row,
//     one key per lane, K/V tiles in shared memory.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "kernels/common.h"

#ifdef __CUDACC__
#define ATTENTION_UNROLL _Pragma("unroll")
#else
#define ATTENTION_UNROLL
#endif

// ---- where things are, in elements; size_t because B·T·3C passes 2^31 for large runs.
__host__ __device__ inline size_t attention_qkv_index(int b, int t, int part, int h, int T, int NH, int HS) {
    const size_t C = (size_t)NH * HS;  // part: 0 q, 1 k, 2 v
    return ((size_t)b * T + t) * 3 * C + (size_t)part * C + (size_t)h * HS;
}
__host__ __device__ inline size_t attention_out_index(int b, int t, int h, int T, int NH, int HS) {
    return ((size_t)b * T + t) * ((size_t)NH * HS) + (size_t)h * HS;
}
__host__ __device__ inline size_t attention_lse_index(int b, int h, int t, int T, int NH) {
    return ((size_t)b * NH + h) * T + t;
}

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

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
__device__ void stage_rows(float* dst, int pitch, const Tio* src, size_t stride, int rows, int valid, int HS) {
    for (int i = threadIdx.x; i < rows * HS; i += blockDim.x) {
        const int r = i / HS, d = i % HS;
        dst[r * pitch + d] = r < valid ? to_float(src[r * stride + d]) : 0.0f;
    }
}

// Forward: block (query block, head, batch), 16 query rows; heavy (late) query blocks first.
// Shared: q [16][HS], k [32][HS+1] (padded: lanes read different rows), v [32][HS], p [4][32].
template <typename Tio, int kDims>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(Tio* out, float* lse, const Tio* qkv, int T, int NH, int HS, float scale) {
    DYNAMIC_SHARED(float, smem);
    float* q_s = smem;
    float* k_s = q_s + kRows * HS;
    float* v_s = k_s + kTile * (HS + 1);
    float* p_s = v_s + kTile * HS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows, h = blockIdx.y, b = blockIdx.z;
    const int C = NH * HS;
    const size_t stride = 3 * (size_t)C;
    const Tio* q_g = qkv + attention_qkv_index(b, 0, 0, h, T, NH, HS);
    stage_rows(q_s, HS, q_g + q0 * stride, stride, kRows, T - q0, HS);

    float o[kRowsPerWarp][kDims] = {}, row_max[kRowsPerWarp], row_sum[kRowsPerWarp];
    for (int r = 0; r < kRowsPerWarp; r++) row_max[r] = -INFINITY, row_sum[r] = 0.0f;
    const int last_row = min(q0 + kRows, T) - 1;
    for (int k0 = 0; k0 <= last_row; k0 += kTile) {
        __syncthreads();  // the previous tile is used up (and q_s is staged)
        stage_rows(k_s, HS + 1, q_g + C + k0 * stride, stride, kTile, T - k0, HS);
        stage_rows(v_s, HS, q_g + 2 * C + k0 * stride, stride, kTile, T - k0, HS);
        __syncthreads();
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
            for (int i = 0; i < kDims; i++) {
                const int d = lane + 32 * i;
                if (d >= HS) break;
                float acc = o[r][i] * correction;
                for (int j = 0; j < kTile; j++) acc = fmaf(p_s[warp * 32 + j], v_s[j * HS + d], acc);
                o[r][i] = acc;
            }
            __syncwarp();  // p_s is rewritten for the next row
        }
    }
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

// Backward, dK and dV: block (key block, head, batch), 16 key rows; walks the query tiles at and
// after its keys. Shared: k, v [16][HS]; q, dO [32][HS+1]; lse, D [32]; p, dS [4][32].
template <typename Tio, int kDims>
__global__ void __launch_bounds__(kThreads)
    backward_dkdv_kernel(Tio* dqkv, const Tio* dout, const float* lse, const float* row_dot, const Tio* qkv,
                         int T, int NH, int HS, float scale) {
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
    const int k0 = blockIdx.x * kRows, h = blockIdx.y, b = blockIdx.z;
    const int C = NH * HS;
    const size_t stride = 3 * (size_t)C;
    const Tio* q_g = qkv + attention_qkv_index(b, 0, 0, h, T, NH, HS);
    const Tio* do_g = dout + attention_out_index(b, 0, h, T, NH, HS);
    const float* lse_g = lse + attention_lse_index(b, h, 0, T, NH);
    const float* d_g = row_dot + attention_lse_index(b, h, 0, T, NH);
    stage_rows(k_s, HS, q_g + C + k0 * stride, stride, kRows, T - k0, HS);
    stage_rows(v_s, HS, q_g + 2 * C + k0 * stride, stride, kRows, T - k0, HS);

    float dk[kRowsPerWarp][kDims] = {}, dv[kRowsPerWarp][kDims] = {};
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
            for (int i = 0; i < kDims; i++) {
                const int d = lane + 32 * i;
                if (d >= HS) break;
                float acc_v = dv[r][i], acc_k = dk[r][i];
                for (int j = 0; j < kTile; j++) {
                    acc_v = fmaf(p_s[warp * 32 + j], do_s[j * (HS + 1) + d], acc_v);
                    acc_k = fmaf(ds_s[warp * 32 + j], q_s[j * (HS + 1) + d], acc_k);
                }
                dv[r][i] = acc_v, dk[r][i] = acc_k;
            }
            __syncwarp();
        }
    }
    for (int r = 0; r < kRowsPerWarp; r++) {
        const int key = k0 + warp * kRowsPerWarp + r;
        if (key >= T) continue;
        Tio* dk_g = dqkv + attention_qkv_index(b, key, 1, h, T, NH, HS);
        Tio* dv_g = dqkv + attention_qkv_index(b, key, 2, h, T, NH, HS);
        for (int i = 0; i < kDims; i++) {
            const int d = lane + 32 * i;
            if (d >= HS) continue;
            dk_g[d] = from_float<Tio>(scale * dk[r][i]);
            dv_g[d] = from_float<Tio>(dv[r][i]);
        }
    }
}

// Backward, dQ: block (query block, head, batch), 16 query rows, walks the key tiles up to its
// last row. Shared: q, dO [16][HS]; k, v [32][HS+1]; dS [4][32].
template <typename Tio, int kDims>
__global__ void __launch_bounds__(kThreads)
    backward_dq_kernel(Tio* dqkv, const Tio* dout, const float* lse, const float* row_dot, const Tio* qkv,
                       int T, int NH, int HS, float scale) {
    DYNAMIC_SHARED(float, smem);
    float* q_s = smem;
    float* do_s = q_s + kRows * HS;
    float* k_s = do_s + kRows * HS;
    float* v_s = k_s + kTile * (HS + 1);
    float* ds_s = v_s + kTile * (HS + 1);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows, h = blockIdx.y, b = blockIdx.z;
    const int C = NH * HS;
    const size_t stride = 3 * (size_t)C;
    const Tio* q_g = qkv + attention_qkv_index(b, 0, 0, h, T, NH, HS);
    stage_rows(q_s, HS, q_g + q0 * stride, stride, kRows, T - q0, HS);
    stage_rows(do_s, HS, dout + attention_out_index(b, q0, h, T, NH, HS), C, kRows, T - q0, HS);
    float row_lse[kRowsPerWarp], row_d[kRowsPerWarp];
    for (int r = 0; r < kRowsPerWarp; r++) {
        const int t = q0 + warp * kRowsPerWarp + r;
        row_lse[r] = t < T ? lse[attention_lse_index(b, h, t, T, NH)] : 0.0f;
        row_d[r] = t < T ? row_dot[attention_lse_index(b, h, t, T, NH)] : 0.0f;
    }

    float dq[kRowsPerWarp][kDims] = {};
    const int last_row = min(q0 + kRows, T) - 1;
    for (int k0 = 0; k0 <= last_row; k0 += kTile) {
        __syncthreads();
        stage_rows(k_s, HS + 1, q_g + C + k0 * stride, stride, kTile, T - k0, HS);
        stage_rows(v_s, HS + 1, q_g + 2 * C + k0 * stride, stride, kTile, T - k0, HS);
        __syncthreads();
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
            for (int i = 0; i < kDims; i++) {
                const int d = lane + 32 * i;
                if (d >= HS) break;
                float acc = dq[r][i];
                for (int j = 0; j < kTile; j++) acc = fmaf(ds_s[warp * 32 + j], k_s[j * (HS + 1) + d], acc);
                dq[r][i] = acc;
            }
            __syncwarp();
        }
    }
    for (int r = 0; r < kRowsPerWarp; r++) {
        const int t = q0 + warp * kRowsPerWarp + r;
        if (t >= T) continue;
        Tio* dq_g = dqkv + attention_qkv_index(b, t, 0, h, T, NH, HS);
        for (int i = 0; i < kDims; i++) {
            const int d = lane + 32 * i;
            if (d < HS) dq_g[d] = from_float<Tio>(scale * dq[r][i]);
        }
    }
}

inline size_t forward_shared_bytes(int HS) { return sizeof(float) * (kRows * HS + kTile * (2 * HS + 1) + 4 * 32); }
inline size_t dkdv_shared_bytes(int HS) {
    return sizeof(float) * (2 * kRows * HS + 2 * kTile * (HS + 1) + 2 * kTile + 2 * 4 * 32);
}
inline size_t dq_shared_bytes(int HS) { return sizeof(float) * (2 * kRows * HS + 2 * kTile * (HS + 1) + 4 * 32); }
}  // namespace attention_simple

// D[b][h][t] = Σ_d dout·out over the head's channels (the backward's row correction), one thread
// per (b, t, h); 128-bit loads when the head size allows.
template <typename Tio>
__global__ void attention_row_dot_kernel(float* row_dot, const Tio* dout, const Tio* out, int B, int T, int NH,
                                         int HS) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // (b·T + t)·NH + h
    if (i >= (long long)B * T * NH) return;
    const int h = (int)(i % NH), t = (int)(i / NH % T), b = (int)(i / NH / T);
    const size_t at = attention_out_index(b, t, h, T, NH, HS);
    float sum = 0.0f;
    constexpr int kVec = Packed128<Tio>::size;
    if (HS % kVec == 0) {
        for (int d = 0; d < HS; d += kVec) {
            const Packed128<Tio> x = load128cs(dout + at + d), y = load128cs(out + at + d);
            for (int k = 0; k < kVec; k++) sum = fmaf(to_float(x[k]), to_float(y[k]), sum);
        }
    } else {
        for (int d = 0; d < HS; d++) sum = fmaf(to_float(dout[at + d]), to_float(out[at + d]), sum);
    }
    row_dot[attention_lse_index(b, h, t, T, NH)] = sum;
}


// =============================================================================================
// Host launch functions.
// =============================================================================================

// Raises a kernel's dynamic shared memory limit where it needs more than the default 48 KiB.
template <typename Kernel>
inline void attention_allow_shared_bytes(Kernel kernel, size_t bytes) {
    if (bytes > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

// Head sizes the kernels take: 32, 64 and 128 on tensor cores (bf16 build); any other up to 256
// through the CUDA-core path (slower). The trainer refuses others at start-up.
inline bool attention_supports_head_size(int HS) { return HS >= 1 && HS <= attention_simple::kMaxHeadSize; }
inline bool attention_uses_tensor_cores(int HS) {
    (void)HS;
    return false;  // not yet
}

inline void attention_check_shape(int B, int T, int NH, int HS) {
    if (B < 1 || T < 1 || NH < 1 || !attention_supports_head_size(HS) || B > 65535 || NH > 65535) {
        fprintf(stderr, "attention: unsupported shape B=%d T=%d NH=%d HS=%d (head size 1..%d)\n", B, T, NH, HS,
                attention_simple::kMaxHeadSize);
        exit(1);
    }
}

// Scratch of the backward pass: D (B, NH, T) fp32, rounded up to 256 bytes.
inline size_t attention_backward_scratch_bytes(int B, int T, int NH, int HS) {
    (void)HS;
    return ((size_t)B * NH * T * sizeof(float) + 255) / 256 * 256;
}

// ---- the CUDA-core path (any floatX, head sizes up to 256)
template <typename Tio, int kDims>
void attention_forward_simple_launch(Tio* out, float* lse, const Tio* qkv, int B, int T, int NH, int HS,
                                     cudaStream_t stream) {
    using namespace attention_simple;
    const size_t smem = forward_shared_bytes(HS);
    attention_allow_shared_bytes(forward_kernel<Tio, kDims>, smem);
    LAUNCH((forward_kernel<Tio, kDims>), dim3(ceil_div(T, kRows), NH, B), kThreads, smem, stream, out, lse, qkv, T,
           NH, HS, 1.0f / sqrtf((float)HS));
}
template <typename Tio>
void attention_forward_simple(Tio* out, float* lse, const Tio* qkv, int B, int T, int NH, int HS, cudaStream_t stream) {
    if (HS <= 32) attention_forward_simple_launch<Tio, 1>(out, lse, qkv, B, T, NH, HS, stream);
    else if (HS <= 64) attention_forward_simple_launch<Tio, 2>(out, lse, qkv, B, T, NH, HS, stream);
    else if (HS <= 128) attention_forward_simple_launch<Tio, 4>(out, lse, qkv, B, T, NH, HS, stream);
    else attention_forward_simple_launch<Tio, 8>(out, lse, qkv, B, T, NH, HS, stream);
}

template <typename Tio>
void attention_row_dot(float* row_dot, const Tio* dout, const Tio* out, int B, int T, int NH, int HS,
                       cudaStream_t stream) {
    const long long n = (long long)B * T * NH;
    LAUNCH(attention_row_dot_kernel<Tio>, (unsigned)((n + 255) / 256), 256, 0, stream, row_dot, dout, out, B, T, NH,
           HS);
}

template <typename Tio, int kDims>
void attention_backward_simple_launch(Tio* dqkv, const float* row_dot, const Tio* dout, const float* lse,
                                      const Tio* qkv, int B, int T, int NH, int HS, cudaStream_t stream) {
    using namespace attention_simple;
    const float scale = 1.0f / sqrtf((float)HS);
    const dim3 grid(ceil_div(T, kRows), NH, B);
    attention_allow_shared_bytes(backward_dkdv_kernel<Tio, kDims>, dkdv_shared_bytes(HS));
    attention_allow_shared_bytes(backward_dq_kernel<Tio, kDims>, dq_shared_bytes(HS));
    LAUNCH((backward_dkdv_kernel<Tio, kDims>), grid, kThreads, dkdv_shared_bytes(HS), stream, dqkv, dout, lse,
           row_dot, qkv, T, NH, HS, scale);
    LAUNCH((backward_dq_kernel<Tio, kDims>), grid, kThreads, dq_shared_bytes(HS), stream, dqkv, dout, lse, row_dot,
           qkv, T, NH, HS, scale);
}
template <typename Tio>
void attention_backward_simple(Tio* dqkv, void* scratch, const Tio* dout, const Tio* out, const float* lse,
                               const Tio* qkv, int B, int T, int NH, int HS, cudaStream_t stream) {
    float* row_dot = static_cast<float*>(scratch);
    attention_row_dot(row_dot, dout, out, B, T, NH, HS, stream);
    if (HS <= 32) attention_backward_simple_launch<Tio, 1>(dqkv, row_dot, dout, lse, qkv, B, T, NH, HS, stream);
    else if (HS <= 64) attention_backward_simple_launch<Tio, 2>(dqkv, row_dot, dout, lse, qkv, B, T, NH, HS, stream);
    else if (HS <= 128) attention_backward_simple_launch<Tio, 4>(dqkv, row_dot, dout, lse, qkv, B, T, NH, HS, stream);
    else attention_backward_simple_launch<Tio, 8>(dqkv, row_dot, dout, lse, qkv, B, T, NH, HS, stream);
}

// ---- what the trainer calls
// Causal self-attention forward: out (B,T,C) and lse (B,NH,T) fp32 (natural log of the row sums
// of exp(scale·q·k)). Nothing of size T×T in global memory.
inline void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int HS,
                              cudaStream_t stream) {
    attention_check_shape(B, T, NH, HS);
    attention_forward_simple(out, lse, qkv, B, T, NH, HS, stream);
}

// dqkv (B,T,3C) overwritten with dQ, dK, dV; scratch: attention_backward_scratch_bytes() bytes.
// Deterministic: every value is summed by one thread in a fixed order.
inline void attention_backward(floatX* dqkv, void* scratch, const floatX* dout, const floatX* out, const float* lse,
                               const floatX* qkv, int B, int T, int NH, int HS, cudaStream_t stream) {
    attention_check_shape(B, T, NH, HS);
    attention_backward_simple(dqkv, scratch, dout, out, lse, qkv, B, T, NH, HS, stream);
}
