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
#include "kernels/cp_async.h"
#include "kernels/ldmatrix.h"
#include "kernels/mma.h"

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
    ATTENTION_UNROLL
    for (int r = 0; r < kRowsPerWarp; r++) row_max[r] = -INFINITY, row_sum[r] = 0.0f;
    const int last_row = min(q0 + kRows, T) - 1;
    for (int k0 = 0; k0 <= last_row; k0 += kTile) {
        __syncthreads();  // the previous tile is used up (and q_s is staged)
        stage_rows(k_s, HS + 1, q_g + C + k0 * stride, stride, kTile, T - k0, HS);
        stage_rows(v_s, HS, q_g + 2 * C + k0 * stride, stride, kTile, T - k0, HS);
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
            // Both products in one sweep over the tile (as two add_weighted_rows calls they take more
            // registers at kDims = 4 and 8).
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
    ATTENTION_UNROLL
    for (int r = 0; r < kRowsPerWarp; r++) {
        const int key = k0 + warp * kRowsPerWarp + r;
        if (key >= T) continue;
        store_row(dqkv + attention_qkv_index(b, key, 1, h, T, NH, HS), dk[r], scale, HS, lane);
        store_row(dqkv + attention_qkv_index(b, key, 2, h, T, NH, HS), dv[r], 1.0f, HS, lane);
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
        stage_rows(k_s, HS + 1, q_g + C + k0 * stride, stride, kTile, T - k0, HS);
        stage_rows(v_s, HS + 1, q_g + 2 * C + k0 * stride, stride, kTile, T - k0, HS);
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
        store_row(dqkv + attention_qkv_index(b, t, 0, h, T, NH, HS), dq[r], scale, HS, lane);
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

// D[b][h][t] = Σ_d dout·out over the head's channels (the backward's row correction).
// Vectorised: one thread per 16-byte chunk of the (B·T, C) rows, the HS/kVec consecutive lanes of a
// head summed with shuffles (HS/kVec a power of two up to 32). Other head sizes: one thread per row.
template <typename Tio>
__global__ void attention_row_dot_kernel(float* row_dot, const Tio* dout, const Tio* out, int B, int T,
                                         int NH, int HS) {
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
        row_dot[attention_lse_index(b, h, t, T, NH)] = sum;
    }
}
template <typename Tio>
__global__ void attention_row_dot_scalar_kernel(float* row_dot, const Tio* dout, const Tio* out, int B, int T,
                                                int NH, int HS) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // (b·T + t)·NH + h
    if (i >= (long long)B * T * NH) return;
    const int h = (int)(i % NH), t = (int)(i / NH % T), b = (int)(i / NH / T);
    const size_t at = attention_out_index(b, t, h, T, NH, HS);
    float sum = 0.0f;
    for (int d = 0; d < HS; d++) sum = fmaf(to_float(dout[at + d]), to_float(out[at + d]), sum);
    row_dot[attention_lse_index(b, h, t, T, NH)] = sum;
}

// =============================================================================================
// Tensor-core path (bf16 storage, HS = 32, 64, 128).
// =============================================================================================
namespace attention_tc {
typedef __nv_bfloat16 bf16;
constexpr int kWarps = 4, kThreads = 32 * kWarps;

// The ideas, cumulative, for dev/cuda/attention.cu; the trainer uses kCpAsyncPipeline.
enum Recipe : int {
    kMmaOnly = 0,          // mma.sync; fragments by 32-bit loads from padded shared memory; plain tile loads
    kLdmatrixSwizzle = 1,  // + ldmatrix from XOR-swizzled shared memory
    kCpAsyncPipeline = 2,  // + cp.async tile loads, double-buffered: the next tile loads during this one
};

// A row-major tile of rows of HS bf16 in shared memory: XOR-swizzled 16-byte chunks (ldmatrix reads
// 8 rows at one column without bank conflicts), or rows padded by 16 bytes (32-bit fragment loads of
// 8 rows × 4 columns without conflicts).
template <int HS, bool kSwizzled>
struct SmemTile {
    static constexpr int kChunks = HS / 8;  // 16-byte chunks per row
    static constexpr int kPitch = kSwizzled ? HS : HS + 8;
    __host__ __device__ static constexpr int elements(int rows) { return rows * kPitch; }
    static __device__ __forceinline__ int offset(int row, int col) {
        if constexpr (kSwizzled)
            return row * kPitch + swizzle_chunk<kChunks>(row, col / 8) * 8 + col % 8;
        else
            return row * kPitch + col;
    }
};

// 32-bit shared-memory accesses of bf16 pairs.
__device__ __forceinline__ uint32_t load_pair(const bf16* p) {
#ifdef __CUDACC__
    return *reinterpret_cast<const uint32_t*>(p);
#else
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#endif
}
__device__ __forceinline__ void store_pair(bf16* p, uint32_t v) {
#ifdef __CUDACC__
    *reinterpret_cast<uint32_t*>(p) = v;
#else
    memcpy((void*)p, &v, 4);
#endif
}
__device__ __forceinline__ uint32_t pack_bf16(bf16 lo, bf16 hi) {
    uint16_t l, h;
    memcpy(&l, &lo, 2);
    memcpy(&h, &hi, 2);
    return (uint32_t)l | (uint32_t)h << 16;
}
__device__ __forceinline__ uint32_t pack_floats(float lo, float hi) {
#ifdef __CUDACC__
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
#else
    return pack_bf16(__float2bfloat16(lo), __float2bfloat16(hi));
#endif
}

// Copies kRows rows of HS bf16 (row r at src + r·stride) into a tile; rows at or past `valid`
// become zeros (so that padding keys and queries are finite and contribute nothing).
template <class Tile, int kRows, bool kAsync>
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* src, size_t stride, int valid,
                                          CpAsyncQueue& copies) {
    constexpr int kPerThread = kRows * Tile::kChunks / kThreads;
    static_assert(kPerThread * kThreads == kRows * Tile::kChunks, "tile chunks must split evenly");
    ATTENTION_UNROLL
    for (int k = 0; k < kPerThread; k++) {
        const int i = threadIdx.x + k * kThreads, row = i / Tile::kChunks, col = i % Tile::kChunks * 8;
        const bool ok = row < valid;
        const bf16* from = ok ? src + row * stride + col : src;
        bf16* to = tile + Tile::offset(row, col);
        if constexpr (kAsync) {
            cp_async_16_or_zero(copies, to, from, ok);
        } else {
            Packed128<bf16> v;
            if (ok)
                v = load128(from);
            else
                memset((void*)&v, 0, sizeof v);
            store128(to, v);
        }
    }
}
// Copies kRows floats (or zeros past `valid`) into shared memory, one per thread.
template <int kRows, bool kAsync>
__device__ __forceinline__ void load_floats(float* dst, const float* src, int valid, CpAsyncQueue& copies) {
    const int i = threadIdx.x;
    if (i >= kRows) return;
    if constexpr (kAsync)
        cp_async_4_or_zero(copies, dst + i, i < valid ? src + i : src, i < valid);
    else
        dst[i] = i < valid ? src[i] : 0.0f;
}

// ---- mma operand fragments from a shared-memory tile (layouts: kernels/mma.h; group = lane/4,
// pair = lane%4). Each loads what two m16n8k16 products need.
// A: the 16×16 block at (row0, col0) of a row-major tile.
template <class Tile, bool kLdmatrix>
__device__ __forceinline__ void load_a(uint32_t a[4], const bf16* tile, int row0, int col0) {
    const int lane = threadIdx.x % 32;
    if constexpr (kLdmatrix) {  // matrices: rows 0-7/8-15 × cols 0-7, then × cols 8-15
        const int m = lane / 8, r = lane % 8;
        ldmatrix_x4(a, tile + Tile::offset(row0 + (m & 1) * 8 + r, col0 + (m >> 1) * 8));
    } else {
        const int group = lane / 4, pair = lane % 4;
        a[0] = load_pair(tile + Tile::offset(row0 + group, col0 + 2 * pair));
        a[1] = load_pair(tile + Tile::offset(row0 + group + 8, col0 + 2 * pair));
        a[2] = load_pair(tile + Tile::offset(row0 + group, col0 + 8 + 2 * pair));
        a[3] = load_pair(tile + Tile::offset(row0 + group + 8, col0 + 8 + 2 * pair));
    }
}
// B (16 k × 8 n) twice, n0..n0+7 and n0+8..n0+15, from a tile whose rows are n and columns k
// (K for S = Q·Kᵀ): b[j] is the fragment of columns n0 + 8j.
template <class Tile, bool kLdmatrix>
__device__ __forceinline__ void load_b_from_rows(uint32_t b[2][2], const bf16* tile, int n0, int k0) {
    const int lane = threadIdx.x % 32;
    if constexpr (kLdmatrix) {  // matrices (n, k): (0-7, 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15)
        const int m = lane / 8, r = lane % 8;
        uint32_t x[4];
        ldmatrix_x4(x, tile + Tile::offset(n0 + (m >> 1) * 8 + r, k0 + (m & 1) * 8));
        b[0][0] = x[0], b[0][1] = x[1], b[1][0] = x[2], b[1][1] = x[3];
    } else {
        const int group = lane / 4, pair = lane % 4;
        ATTENTION_UNROLL
        for (int j = 0; j < 2; j++) {
            b[j][0] = load_pair(tile + Tile::offset(n0 + 8 * j + group, k0 + 2 * pair));
            b[j][1] = load_pair(tile + Tile::offset(n0 + 8 * j + group, k0 + 8 + 2 * pair));
        }
    }
}
// The same from a tile whose rows are k and columns n (V for O = P·V): a transposed load.
template <class Tile, bool kLdmatrix>
__device__ __forceinline__ void load_b_from_columns(uint32_t b[2][2], const bf16* tile, int k0, int n0) {
    const int lane = threadIdx.x % 32;
    if constexpr (kLdmatrix) {  // matrices (k, n): (0-7, 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15)
        const int m = lane / 8, r = lane % 8;
        uint32_t x[4];
        ldmatrix_x4_trans(x, tile + Tile::offset(k0 + (m & 1) * 8 + r, n0 + (m >> 1) * 8));
        b[0][0] = x[0], b[0][1] = x[1], b[1][0] = x[2], b[1][1] = x[3];
    } else {
        const int group = lane / 4, pair = lane % 4;
        ATTENTION_UNROLL
        for (int j = 0; j < 2; j++) {
            const int n = n0 + 8 * j + group, k = k0 + 2 * pair;
            b[j][0] = pack_bf16(tile[Tile::offset(k, n)], tile[Tile::offset(k + 1, n)]);
            b[j][1] = pack_bf16(tile[Tile::offset(k + 8, n)], tile[Tile::offset(k + 9, n)]);
        }
    }
}
// An accumulator tile c[2j], c[2j+1] (16 rows × keys 16j..16j+15, fp32) as the A fragment of the
// next product over those keys: the C and A layouts agree row for row, two columns per register.
__device__ __forceinline__ void accumulators_as_a(uint32_t a[4], const float c0[4], const float c1[4]) {
    a[0] = pack_floats(c0[0], c0[1]);
    a[1] = pack_floats(c0[2], c0[3]);
    a[2] = pack_floats(c1[0], c1[1]);
    a[3] = pack_floats(c1[2], c1[3]);
}
__device__ __forceinline__ void mma(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    mma_m16n8k16_bf16(d, a, b, d);
}
// acc[0], acc[1] += A times the two 8-column halves of a 16-column B block taken from a tile: rows
// n0..n0+15, columns k0..k0+15 of a tile whose rows are n (K in S = Q·Kᵀ) ...
template <class Tile, bool kLdmatrix>
__device__ __forceinline__ void mma_tile_rows(float acc[][4], const uint32_t a[4], const bf16* tile, int n0,
                                              int k0) {
    uint32_t b[2][2];
    load_b_from_rows<Tile, kLdmatrix>(b, tile, n0, k0);
    mma(acc[0], a, b[0]);
    mma(acc[1], a, b[1]);
}
// ... or rows k0..k0+15, columns n0..n0+15 of a tile whose rows are k (V in O = P·V).
template <class Tile, bool kLdmatrix>
__device__ __forceinline__ void mma_tile_columns(float acc[][4], const uint32_t a[4], const bf16* tile,
                                                 int k0, int n0) {
    uint32_t b[2][2];
    load_b_from_columns<Tile, kLdmatrix>(b, tile, k0, n0);
    mma(acc[0], a, b[0]);
    mma(acc[1], a, b[1]);
}

// The tile loop of every kernel, double-buffered with cp.async: before the work on the block's
// step-th tile (`tile`, in stage step % 2), wait for its copies (issued one step earlier) and issue
// the next tile's into the other stage. Without cp.async there is one stage, loaded between two
// barriers. load(tile, stage) issues one tile's copies; the first tile is loaded before the loop.
template <bool kAsync, class LoadTile>
__device__ __forceinline__ void next_tile(int tile, int step, int tiles, const LoadTile& load,
                                          CpAsyncQueue& copies) {
    if (step > 0) {
        if constexpr (kAsync) {
            cp_async_wait_group<0>(copies);  // this tile's copies (issued last step)
            __syncthreads();                 // everyone's, and the previous tile is used up
        } else {
            __syncthreads();
            load(tile, 0);
            __syncthreads();
        }
    }
    if constexpr (kAsync) {
        if (tile + 1 < tiles) {
            load(tile + 1, (step + 1) % 2);
            cp_async_commit_group(copies);
        }
    }
}
// Issues the copies of key tile `tile` (kBlockK keys from tile·kBlockK; zeros past T) of K and V,
// whose first rows are at k_g and v_g, into stage `stage` of k_tiles and v_tiles.
template <class Tile, int kBlockK, bool kAsync>
__device__ __forceinline__ void load_kv_tiles(bf16* k_tiles, bf16* v_tiles, const bf16* k_g, const bf16* v_g,
                                              size_t stride, int T, int tile, int stage,
                                              CpAsyncQueue& copies) {
    const int k0 = tile * kBlockK;
    load_tile<Tile, kBlockK, kAsync>(k_tiles + stage * Tile::elements(kBlockK), k_g + k0 * stride, stride,
                                     T - k0, copies);
    load_tile<Tile, kBlockK, kAsync>(v_tiles + stage * Tile::elements(kBlockK), v_g + k0 * stride, stride,
                                     T - k0, copies);
}

// Stores a warp's 16 accumulator rows (16 × HS fp32, times `scale`) as bf16 to global memory rows
// row0.. (row r at dst + r·stride), staged through the warp's own 16 rows of a shared tile so that
// the global stores are 16 bytes wide; rows at or past `valid` are not written.
template <class Tile, int HS>
__device__ __forceinline__ void store_rows(bf16* dst, size_t stride, int valid, const float acc[HS / 8][4],
                                           float scale, bf16* tile, int tile_row0) {
    const int lane = threadIdx.x % 32, group = lane / 4, pair = lane % 4;
    __syncwarp();  // every lane is done reading these rows
    ATTENTION_UNROLL
    for (int n = 0; n < HS / 8; n++) {
        store_pair(tile + Tile::offset(tile_row0 + group, 8 * n + 2 * pair),
                   pack_floats(scale * acc[n][0], scale * acc[n][1]));
        store_pair(tile + Tile::offset(tile_row0 + group + 8, 8 * n + 2 * pair),
                   pack_floats(scale * acc[n][2], scale * acc[n][3]));
    }
    __syncwarp();
    ATTENTION_UNROLL
    for (int k = 0; k < 16 * Tile::kChunks / 32; k++) {
        const int i = lane + 32 * k, r = i / Tile::kChunks, col = i % Tile::kChunks * 8;
        if (r < valid) store128(dst + r * stride + col, load128(tile + Tile::offset(tile_row0 + r, col)));
    }
}

// ---- forward: block (query block, head, batch), 64 query rows (16 per warp) against key tiles of
// 64; heavy (late) query blocks are launched first. Shared: Q [64][HS]; K, V [stages][64][HS].
template <int HS, int kRecipe>
struct ForwardConfig {
    static constexpr bool kLdmatrix = kRecipe >= kLdmatrixSwizzle, kAsync = kRecipe >= kCpAsyncPipeline;
    static constexpr int kStages = kAsync ? 2 : 1;
    static constexpr int kBlockQ = 64, kBlockK = 64;
    using Tile = SmemTile<HS, kLdmatrix>;
    static constexpr size_t shared_bytes() {
        return sizeof(bf16) * (Tile::elements(kBlockQ) + 2 * kStages * Tile::elements(kBlockK));
    }
};

template <int HS, int kRecipe>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(bf16* out, float* lse, const bf16* qkv, int T, int NH) {
    using Config = ForwardConfig<HS, kRecipe>;
    using Tile = typename Config::Tile;
    constexpr bool kLdm = Config::kLdmatrix, kAsync = Config::kAsync;
    constexpr int kBlockQ = Config::kBlockQ, kBlockK = Config::kBlockK, kKeyBlocks = kBlockK / 8;
    DYNAMIC_SHARED(bf16, smem);
    bf16* q_tile = smem;
    bf16* k_tiles = q_tile + Tile::elements(kBlockQ);
    bf16* v_tiles = k_tiles + Config::kStages * Tile::elements(kBlockK);

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, pair = lane % 4;
    const int q_block = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int q0 = q_block * kBlockQ, C = NH * HS;
    const size_t stride = 3 * (size_t)C;
    const bf16* q_g = qkv + attention_qkv_index(b, 0, 0, h, T, NH, HS);
    const int tiles = q_block + 1;  // key tiles up to the diagonal (kBlockK == kBlockQ)
    CpAsyncQueue copies;
    auto load_kv = [&](int tile, int stage) {
        load_kv_tiles<Tile, kBlockK, kAsync>(k_tiles, v_tiles, q_g + C, q_g + 2 * C, stride, T, tile, stage,
                                             copies);
    };

    // Q and the first K/V tile; then this warp's Q rows stay in registers as A fragments.
    load_tile<Tile, kBlockQ, kAsync>(q_tile, q_g + q0 * stride, stride, T - q0, copies);
    load_kv(0, 0);
    if constexpr (kAsync) cp_async_wait_all(copies);
    __syncthreads();
    uint32_t q_frag[HS / 16][4];
    ATTENTION_UNROLL
    for (int ks = 0; ks < HS / 16; ks++) load_a<Tile, kLdm>(q_frag[ks], q_tile, warp * 16, ks * 16);

    // Running state of the lane's two rows (group and group + 8): max of the scores in log2 units,
    // sum of exp2(score - max) over the lane's columns, and the output accumulators.
    const float scale_log2 = kLog2e / sqrtf((float)HS);
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
    float o[HS / 8][4] = {};

    for (int tile = 0; tile < tiles; tile++) {
        // next_tile(), written out: through the helper nvcc 13 spills at HS = 64 on sm_90a.
        if (tile > 0) {
            if constexpr (kAsync) {
                cp_async_wait_group<0>(copies);  // this tile's copies (issued last iteration)
                __syncthreads();                 // everyone's, and the previous tile is used up
            } else {
                __syncthreads();
                load_kv(tile, 0);
                __syncthreads();
            }
        }
        if constexpr (kAsync) {
            if (tile + 1 < tiles) {
                load_kv(tile + 1, (tile + 1) % 2);
                cp_async_commit_group(copies);
            }
        }
        const bf16* k_tile = k_tiles + (tile % Config::kStages) * Tile::elements(kBlockK);
        const bf16* v_tile = v_tiles + (tile % Config::kStages) * Tile::elements(kBlockK);
        // On the diagonal tile, key block pairs 16j.. with j > warp lie wholly above this warp's rows.
        const bool diagonal = tile == q_block;

        // S = Q·Kᵀ for the warp's 16 rows × 64 keys.
        float s[kKeyBlocks][4] = {};
        ATTENTION_UNROLL
        for (int ks = 0; ks < HS / 16; ks++) {
            ATTENTION_UNROLL
            for (int j = 0; j < kKeyBlocks / 2; j++) {
                if (diagonal && j > warp) continue;
                mma_tile_rows<Tile, kLdm>(&s[2 * j], q_frag[ks], k_tile, 16 * j, 16 * ks);
            }
        }
        // Causal mask (the diagonal tile only: key and query blocks start at the same index).
        if (diagonal) {
            ATTENTION_UNROLL
            for (int n = 0; n < kKeyBlocks; n++) {
                ATTENTION_UNROLL
                for (int i = 0; i < 4; i++) {
                    const int key = 8 * n + 2 * pair + (i & 1), row = warp * 16 + group + 8 * (i >> 1);
                    if (key > row) s[n][i] = -INFINITY;
                }
            }
        }
        // Online softmax: new row maxima (over the 4 lanes of a row), rescale what came before.
        float tile_max[2] = {-INFINITY, -INFINITY};
        ATTENTION_UNROLL
        for (int n = 0; n < kKeyBlocks; n++) {
            ATTENTION_UNROLL
            for (int i = 0; i < 4; i++) tile_max[i >> 1] = fmaxf(tile_max[i >> 1], s[n][i]);
        }
        float base[2], correction[2];
        ATTENTION_UNROLL
        for (int r = 0; r < 2; r++) {
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
            const float new_max = fmaxf(row_max[r], tile_max[r] * scale_log2);
            base[r] = new_max == -INFINITY ? 0.0f : new_max;  // (a row with no key yet: padding rows)
            correction[r] = exp2f(row_max[r] - base[r]);
            row_max[r] = new_max;
            row_sum[r] *= correction[r];
        }
        ATTENTION_UNROLL
        for (int n = 0; n < kKeyBlocks; n++) {
            ATTENTION_UNROLL
            for (int i = 0; i < 4; i++) {
                s[n][i] = exp2f(fmaf(s[n][i], scale_log2, -base[i >> 1]));
                row_sum[i >> 1] += s[n][i];
            }
        }
        ATTENTION_UNROLL
        for (int n = 0; n < HS / 8; n++) {
            ATTENTION_UNROLL
            for (int i = 0; i < 4; i++) o[n][i] *= correction[i >> 1];
        }

        // O += P·V, the probabilities straight from the registers.
        ATTENTION_UNROLL
        for (int j = 0; j < kKeyBlocks / 2; j++) {
            if (diagonal && j > warp) continue;
            uint32_t p_frag[4];
            accumulators_as_a(p_frag, s[2 * j], s[2 * j + 1]);
            ATTENTION_UNROLL
            for (int n = 0; n < HS / 16; n++)
                mma_tile_columns<Tile, kLdm>(&o[2 * n], p_frag, v_tile, 16 * j, 16 * n);
        }
    }

    // Finish: full row sums, lse, and out = O / sum through the warp's own (no longer needed) Q rows.
    float inv_sum[2];
    ATTENTION_UNROLL
    for (int r = 0; r < 2; r++) {
        row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
        row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
        inv_sum[r] = 1.0f / row_sum[r];
        const int t = q0 + warp * 16 + group + 8 * r;
        if (pair == 0 && t < T)
            lse[attention_lse_index(b, h, t, T, NH)] = (row_max[r] + log2f(row_sum[r])) * kLn2;
    }
    ATTENTION_UNROLL
    for (int n = 0; n < HS / 8; n++) {
        ATTENTION_UNROLL
        for (int i = 0; i < 4; i++) o[n][i] *= inv_sum[i >> 1];
    }
    const int row0 = q0 + warp * 16;
    store_rows<Tile, HS>(out + attention_out_index(b, row0, h, T, NH, HS), C, T - row0, o, 1.0f, q_tile,
                         warp * 16);
}

// ---- backward, dK and dV: block (key block, head, batch), 64 keys (16 per warp) against query
// tiles of kBlockQ from the diagonal on. Per tile, with the warp's keys as rows (transposed
// products, so that every product has its A operand in registers):
//   Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, Pᵀ = exp(scale·Sᵀ − lse), dSᵀ = Pᵀ ⊙ (dPᵀ − D), dV += Pᵀ·dO, dK += dSᵀ·Q.
// Shared: K, V [64][HS]; Q, dO [stages][kBlockQ][HS]; lse, D [stages][kBlockQ].
template <int HS, int kRecipe>
struct DkDvConfig {
    static constexpr bool kLdmatrix = kRecipe >= kLdmatrixSwizzle, kAsync = kRecipe >= kCpAsyncPipeline;
    static constexpr int kStages = kAsync ? 2 : 1;
    static constexpr int kBlockK = 64, kBlockQ = HS <= 64 ? 64 : 32;  // registers: 32 per 8 queries
    static constexpr bool kKeyFragmentsInRegisters = HS <= 64;        // else re-read per tile
    using Tile = SmemTile<HS, kLdmatrix>;
    static constexpr size_t shared_bytes() {
        return sizeof(bf16) * (2 * Tile::elements(kBlockK) + 2 * kStages * Tile::elements(kBlockQ)) +
               sizeof(float) * 2 * kStages * kBlockQ;
    }
};

template <int HS, int kRecipe>
__global__ void __launch_bounds__(kThreads)
    backward_dkdv_kernel(bf16* dqkv, const bf16* dout, const float* lse, const float* row_dot,
                         const bf16* qkv, int T, int NH) {
    using Config = DkDvConfig<HS, kRecipe>;
    using Tile = typename Config::Tile;
    constexpr bool kLdm = Config::kLdmatrix, kAsync = Config::kAsync;
    constexpr int kBlockQ = Config::kBlockQ, kBlockK = Config::kBlockK, kQueryBlocks = kBlockQ / 8;
    DYNAMIC_SHARED(bf16, smem);
    bf16* k_tile = smem;
    bf16* v_tile = k_tile + Tile::elements(kBlockK);
    bf16* q_tiles = v_tile + Tile::elements(kBlockK);
    bf16* do_tiles = q_tiles + Config::kStages * Tile::elements(kBlockQ);
    float* lse_s = reinterpret_cast<float*>(do_tiles + Config::kStages * Tile::elements(kBlockQ));
    float* d_s = lse_s + Config::kStages * kBlockQ;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, pair = lane % 4;
    const int k0 = blockIdx.x * kBlockK, h = blockIdx.y, b = blockIdx.z, C = NH * HS;
    const size_t stride = 3 * (size_t)C;
    const bf16* q_g = qkv + attention_qkv_index(b, 0, 0, h, T, NH, HS);
    const bf16* do_g = dout + attention_out_index(b, 0, h, T, NH, HS);
    const float* lse_g = lse + attention_lse_index(b, h, 0, T, NH);
    const float* d_g = row_dot + attention_lse_index(b, h, 0, T, NH);
    const int first_tile = k0 / kBlockQ, tiles = ceil_div(T, kBlockQ);  // queries from k0 on
    CpAsyncQueue copies;
    auto load_queries = [&](int tile, int stage) {
        const int q0 = tile * kBlockQ;
        load_tile<Tile, kBlockQ, kAsync>(q_tiles + stage * Tile::elements(kBlockQ), q_g + q0 * stride, stride,
                                         T - q0, copies);
        load_tile<Tile, kBlockQ, kAsync>(do_tiles + stage * Tile::elements(kBlockQ), do_g + q0 * (size_t)C, C,
                                         T - q0, copies);
        load_floats<kBlockQ, kAsync>(lse_s + stage * kBlockQ, lse_g + q0, T - q0, copies);
        load_floats<kBlockQ, kAsync>(d_s + stage * kBlockQ, d_g + q0, T - q0, copies);
    };

    load_tile<Tile, kBlockK, kAsync>(k_tile, q_g + C + k0 * stride, stride, T - k0, copies);
    load_tile<Tile, kBlockK, kAsync>(v_tile, q_g + 2 * C + k0 * stride, stride, T - k0, copies);
    load_queries(first_tile, 0);
    if constexpr (kAsync) cp_async_wait_all(copies);
    __syncthreads();
    constexpr int kKeyFrags = Config::kKeyFragmentsInRegisters ? HS / 16 : 1;
    uint32_t k_frag[kKeyFrags][4], v_frag[kKeyFrags][4];
    if constexpr (Config::kKeyFragmentsInRegisters) {
        ATTENTION_UNROLL
        for (int ks = 0; ks < HS / 16; ks++) {
            load_a<Tile, kLdm>(k_frag[ks], k_tile, warp * 16, ks * 16);
            load_a<Tile, kLdm>(v_frag[ks], v_tile, warp * 16, ks * 16);
        }
    }
    const float scale = 1.0f / sqrtf((float)HS), scale_log2 = scale * kLog2e;
    float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};

    for (int tile = first_tile; tile < tiles; tile++) {
        const int step = tile - first_tile;
        next_tile<kAsync>(tile, step, tiles, load_queries, copies);
        const int stage = step % Config::kStages, q0 = tile * kBlockQ;
        const bf16* q_tile = q_tiles + stage * Tile::elements(kBlockQ);
        const bf16* do_tile = do_tiles + stage * Tile::elements(kBlockQ);
        const float* lse_t = lse_s + stage * kBlockQ;
        const float* d_t = d_s + stage * kBlockQ;
        // Query blocks 16j.. lie wholly before this warp's keys when q0 + 16j + 15 < k0 + 16·warp.
        const bool near_diagonal = q0 < k0 + kBlockK;
        auto masked_out = [&](int j) { return near_diagonal && q0 + 16 * j + 15 < k0 + 16 * warp; };

        // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ: the warp's 16 keys × kBlockQ queries.
        float st[kQueryBlocks][4] = {}, dpt[kQueryBlocks][4] = {};
        ATTENTION_UNROLL
        for (int ks = 0; ks < HS / 16; ks++) {
            uint32_t ka[4], va[4];
            if constexpr (Config::kKeyFragmentsInRegisters) {
                ATTENTION_UNROLL
                for (int i = 0; i < 4; i++) ka[i] = k_frag[ks][i], va[i] = v_frag[ks][i];
            } else {
                load_a<Tile, kLdm>(ka, k_tile, warp * 16, ks * 16);
                load_a<Tile, kLdm>(va, v_tile, warp * 16, ks * 16);
            }
            ATTENTION_UNROLL
            for (int j = 0; j < kQueryBlocks / 2; j++) {
                if (masked_out(j)) continue;
                mma_tile_rows<Tile, kLdm>(&st[2 * j], ka, q_tile, 16 * j, 16 * ks);
                mma_tile_rows<Tile, kLdm>(&dpt[2 * j], va, do_tile, 16 * j, 16 * ks);
            }
        }
        // Pᵀ (into st) and dSᵀ (into dpt). Padding queries (≥ T) have zero Q, dO, lse and D, so
        // they add nothing; the causal mask zeroes queries before the key.
        ATTENTION_UNROLL
        for (int n = 0; n < kQueryBlocks; n++) {
            ATTENTION_UNROLL
            for (int i = 0; i < 4; i++) {
                const int col = 8 * n + 2 * pair + (i & 1), query = q0 + col;
                const int key = k0 + warp * 16 + group + 8 * (i >> 1);
                float p = exp2f(fmaf(st[n][i], scale_log2, -lse_t[col] * kLog2e));
                if (near_diagonal && query < key) p = 0.0f;
                st[n][i] = p;
                dpt[n][i] = p * (dpt[n][i] - d_t[col]);
            }
        }
        // dV += Pᵀ·dO and dK += dSᵀ·Q over this tile's queries.
        ATTENTION_UNROLL
        for (int j = 0; j < kQueryBlocks / 2; j++) {
            if (masked_out(j)) continue;
            uint32_t p_frag[4], ds_frag[4];
            accumulators_as_a(p_frag, st[2 * j], st[2 * j + 1]);
            accumulators_as_a(ds_frag, dpt[2 * j], dpt[2 * j + 1]);
            ATTENTION_UNROLL
            for (int n = 0; n < HS / 16; n++) {
                mma_tile_columns<Tile, kLdm>(&dv[2 * n], p_frag, do_tile, 16 * j, 16 * n);
                mma_tile_columns<Tile, kLdm>(&dk[2 * n], ds_frag, q_tile, 16 * j, 16 * n);
            }
        }
    }

    // The warp's own K and V rows (read only by this warp) stage its dK and dV rows.
    const int row0 = k0 + warp * 16;
    store_rows<Tile, HS>(dqkv + attention_qkv_index(b, row0, 1, h, T, NH, HS), stride, T - row0, dk, scale,
                         k_tile, warp * 16);
    store_rows<Tile, HS>(dqkv + attention_qkv_index(b, row0, 2, h, T, NH, HS), stride, T - row0, dv, 1.0f,
                         v_tile, warp * 16);
}

// ---- backward, dQ: block (query block, head, batch), 64 queries (16 per warp) against key tiles of
// kBlockK up to the diagonal: S = Q·Kᵀ, dP = dO·Vᵀ, P = exp(scale·S − lse), dS = P ⊙ (dP − D),
// dQ += dS·K. Shared: Q, dO [64][HS]; K, V [stages][kBlockK][HS].
template <int HS, int kRecipe>
struct DqConfig {
    static constexpr bool kLdmatrix = kRecipe >= kLdmatrixSwizzle, kAsync = kRecipe >= kCpAsyncPipeline;
    static constexpr int kStages = kAsync ? 2 : 1;
    static constexpr int kBlockQ = 64, kBlockK = HS <= 64 ? 64 : 32;
    using Tile = SmemTile<HS, kLdmatrix>;
    static constexpr size_t shared_bytes() {
        return sizeof(bf16) * (2 * Tile::elements(kBlockQ) + 2 * kStages * Tile::elements(kBlockK));
    }
};

template <int HS, int kRecipe>
__global__ void __launch_bounds__(kThreads)
    backward_dq_kernel(bf16* dqkv, const bf16* dout, const float* lse, const float* row_dot, const bf16* qkv,
                       int T, int NH) {
    using Config = DqConfig<HS, kRecipe>;
    using Tile = typename Config::Tile;
    constexpr bool kLdm = Config::kLdmatrix, kAsync = Config::kAsync;
    constexpr int kBlockQ = Config::kBlockQ, kBlockK = Config::kBlockK, kKeyBlocks = kBlockK / 8;
    DYNAMIC_SHARED(bf16, smem);
    bf16* q_tile = smem;
    bf16* do_tile = q_tile + Tile::elements(kBlockQ);
    bf16* k_tiles = do_tile + Tile::elements(kBlockQ);
    bf16* v_tiles = k_tiles + Config::kStages * Tile::elements(kBlockK);

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, pair = lane % 4;
    const int q_block = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int q0 = q_block * kBlockQ, C = NH * HS;
    const size_t stride = 3 * (size_t)C;
    const bf16* q_g = qkv + attention_qkv_index(b, 0, 0, h, T, NH, HS);
    const int tiles = (min(q0 + kBlockQ, T) - 1) / kBlockK + 1;  // key tiles up to the last row
    CpAsyncQueue copies;
    auto load_kv = [&](int tile, int stage) {
        load_kv_tiles<Tile, kBlockK, kAsync>(k_tiles, v_tiles, q_g + C, q_g + 2 * C, stride, T, tile, stage,
                                             copies);
    };

    load_tile<Tile, kBlockQ, kAsync>(q_tile, q_g + q0 * stride, stride, T - q0, copies);
    load_tile<Tile, kBlockQ, kAsync>(do_tile, dout + attention_out_index(b, q0, h, T, NH, HS), C, T - q0,
                                     copies);
    load_kv(0, 0);
    if constexpr (kAsync) cp_async_wait_all(copies);
    __syncthreads();
    uint32_t q_frag[HS / 16][4], do_frag[HS / 16][4];
    ATTENTION_UNROLL
    for (int ks = 0; ks < HS / 16; ks++) {
        load_a<Tile, kLdm>(q_frag[ks], q_tile, warp * 16, ks * 16);
        load_a<Tile, kLdm>(do_frag[ks], do_tile, warp * 16, ks * 16);
    }
    // The lane's two rows: lse in log2 units and D (zeros for padding rows, which add nothing).
    float row_lse2[2], row_d[2];
    ATTENTION_UNROLL
    for (int r = 0; r < 2; r++) {
        const int t = q0 + warp * 16 + group + 8 * r;
        row_lse2[r] = t < T ? lse[attention_lse_index(b, h, t, T, NH)] * kLog2e : 0.0f;
        row_d[r] = t < T ? row_dot[attention_lse_index(b, h, t, T, NH)] : 0.0f;
    }
    const float scale = 1.0f / sqrtf((float)HS), scale_log2 = scale * kLog2e;
    float dq[HS / 8][4] = {};

    for (int tile = 0; tile < tiles; tile++) {
        next_tile<kAsync>(tile, tile, tiles, load_kv, copies);
        const bf16* k_tile = k_tiles + (tile % Config::kStages) * Tile::elements(kBlockK);
        const bf16* v_tile = v_tiles + (tile % Config::kStages) * Tile::elements(kBlockK);
        const int k0 = tile * kBlockK;
        // Key blocks 16j.. lie wholly after this warp's rows when k0 + 16j > q0 + 16·warp + 15.
        const bool near_diagonal = k0 + kBlockK - 1 > q0;
        auto masked_out = [&](int j) { return near_diagonal && k0 + 16 * j > q0 + 16 * warp + 15; };

        float s[kKeyBlocks][4] = {}, dp[kKeyBlocks][4] = {};
        ATTENTION_UNROLL
        for (int ks = 0; ks < HS / 16; ks++) {
            ATTENTION_UNROLL
            for (int j = 0; j < kKeyBlocks / 2; j++) {
                if (masked_out(j)) continue;
                mma_tile_rows<Tile, kLdm>(&s[2 * j], q_frag[ks], k_tile, 16 * j, 16 * ks);
                mma_tile_rows<Tile, kLdm>(&dp[2 * j], do_frag[ks], v_tile, 16 * j, 16 * ks);
            }
        }
        // dS (into dp); keys past T lie after every real row, so the causal mask covers them.
        ATTENTION_UNROLL
        for (int n = 0; n < kKeyBlocks; n++) {
            ATTENTION_UNROLL
            for (int i = 0; i < 4; i++) {
                const int key = k0 + 8 * n + 2 * pair + (i & 1), row = q0 + warp * 16 + group + 8 * (i >> 1);
                float p = exp2f(fmaf(s[n][i], scale_log2, -row_lse2[i >> 1]));
                if (near_diagonal && key > row) p = 0.0f;
                dp[n][i] = p * (dp[n][i] - row_d[i >> 1]);
            }
        }
        // dQ += dS·K.
        ATTENTION_UNROLL
        for (int j = 0; j < kKeyBlocks / 2; j++) {
            if (masked_out(j)) continue;
            uint32_t ds_frag[4];
            accumulators_as_a(ds_frag, dp[2 * j], dp[2 * j + 1]);
            ATTENTION_UNROLL
            for (int n = 0; n < HS / 16; n++)
                mma_tile_columns<Tile, kLdm>(&dq[2 * n], ds_frag, k_tile, 16 * j, 16 * n);
        }
    }
    const int row0 = q0 + warp * 16;
    store_rows<Tile, HS>(dqkv + attention_qkv_index(b, row0, 0, h, T, NH, HS), stride, T - row0, dq, scale,
                         q_tile, warp * 16);
}

}  // namespace attention_tc

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
#ifdef ENABLE_FP32
    (void)HS;
    return false;
#else
    return HS == 32 || HS == 64 || HS == 128;
#endif
}

inline void attention_check_shape(int B, int T, int NH, int HS) {
    if (B < 1 || T < 1 || NH < 1 || !attention_supports_head_size(HS) || B > 65535 || NH > 65535) {
        fprintf(stderr, "attention: unsupported shape B=%d T=%d NH=%d HS=%d (head size 1..%d)\n", B, T, NH,
                HS, attention_simple::kMaxHeadSize);
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
    LAUNCH((forward_kernel<Tio, kDims>), dim3(ceil_div(T, kRows), NH, B), kThreads, smem, stream, out, lse,
           qkv, T, NH, HS, 1.0f / sqrtf((float)HS));
}
template <typename Tio>
void attention_forward_simple(Tio* out, float* lse, const Tio* qkv, int B, int T, int NH, int HS,
                              cudaStream_t stream) {
    if (HS <= 32)
        attention_forward_simple_launch<Tio, 1>(out, lse, qkv, B, T, NH, HS, stream);
    else if (HS <= 64)
        attention_forward_simple_launch<Tio, 2>(out, lse, qkv, B, T, NH, HS, stream);
    else if (HS <= 128)
        attention_forward_simple_launch<Tio, 4>(out, lse, qkv, B, T, NH, HS, stream);
    else
        attention_forward_simple_launch<Tio, 8>(out, lse, qkv, B, T, NH, HS, stream);
}

template <typename Tio>
void attention_row_dot(float* row_dot, const Tio* dout, const Tio* out, int B, int T, int NH, int HS,
                       cudaStream_t stream) {
    constexpr int kVec = Packed128<Tio>::size;
    const int lanes = HS / kVec;
    if (HS % kVec == 0 && lanes <= 32 && (lanes & (lanes - 1)) == 0) {
        const long long threads = (long long)B * T * NH * lanes;
        LAUNCH(attention_row_dot_kernel<Tio>, (unsigned)((threads + 255) / 256), 256, 0, stream, row_dot,
               dout, out, B, T, NH, HS);
    } else {
        const long long threads = (long long)B * T * NH;
        LAUNCH(attention_row_dot_scalar_kernel<Tio>, (unsigned)((threads + 255) / 256), 256, 0, stream,
               row_dot, dout, out, B, T, NH, HS);
    }
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
    LAUNCH((backward_dq_kernel<Tio, kDims>), grid, kThreads, dq_shared_bytes(HS), stream, dqkv, dout, lse,
           row_dot, qkv, T, NH, HS, scale);
}
template <typename Tio>
void attention_backward_simple(Tio* dqkv, void* scratch, const Tio* dout, const Tio* out, const float* lse,
                               const Tio* qkv, int B, int T, int NH, int HS, cudaStream_t stream) {
    float* row_dot = static_cast<float*>(scratch);
    attention_row_dot(row_dot, dout, out, B, T, NH, HS, stream);
    if (HS <= 32)
        attention_backward_simple_launch<Tio, 1>(dqkv, row_dot, dout, lse, qkv, B, T, NH, HS, stream);
    else if (HS <= 64)
        attention_backward_simple_launch<Tio, 2>(dqkv, row_dot, dout, lse, qkv, B, T, NH, HS, stream);
    else if (HS <= 128)
        attention_backward_simple_launch<Tio, 4>(dqkv, row_dot, dout, lse, qkv, B, T, NH, HS, stream);
    else
        attention_backward_simple_launch<Tio, 8>(dqkv, row_dot, dout, lse, qkv, B, T, NH, HS, stream);
}

// ---- the tensor-core path (bf16, HS 32/64/128), kRecipe as attention_tc::Recipe
template <int HS, int kRecipe>
void attention_forward_tensor_cores(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T,
                                    int NH, cudaStream_t stream) {
    using namespace attention_tc;
    using Config = ForwardConfig<HS, kRecipe>;
    static const bool once =
        (attention_allow_shared_bytes(forward_kernel<HS, kRecipe>, Config::shared_bytes()), true);
    (void)once;
    LAUNCH((forward_kernel<HS, kRecipe>), dim3(ceil_div(T, Config::kBlockQ), NH, B), kThreads,
           Config::shared_bytes(), stream, out, lse, qkv, T, NH);
}

template <int HS, int kRecipe>
void attention_backward_tensor_cores(__nv_bfloat16* dqkv, void* scratch, const __nv_bfloat16* dout,
                                     const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* qkv,
                                     int B, int T, int NH, cudaStream_t stream) {
    using namespace attention_tc;
    using DkDv = DkDvConfig<HS, kRecipe>;
    using Dq = DqConfig<HS, kRecipe>;
    static const bool once =
        (attention_allow_shared_bytes(backward_dkdv_kernel<HS, kRecipe>, DkDv::shared_bytes()),
         attention_allow_shared_bytes(backward_dq_kernel<HS, kRecipe>, Dq::shared_bytes()), true);
    (void)once;
    float* row_dot = static_cast<float*>(scratch);
    attention_row_dot(row_dot, dout, out, B, T, NH, HS, stream);
    LAUNCH((backward_dkdv_kernel<HS, kRecipe>), dim3(ceil_div(T, DkDv::kBlockK), NH, B), kThreads,
           DkDv::shared_bytes(), stream, dqkv, dout, lse, row_dot, qkv, T, NH);
    LAUNCH((backward_dq_kernel<HS, kRecipe>), dim3(ceil_div(T, Dq::kBlockQ), NH, B), kThreads,
           Dq::shared_bytes(), stream, dqkv, dout, lse, row_dot, qkv, T, NH);
}

// ---- what the trainer calls
// Causal self-attention forward: out (B,T,C) and lse (B,NH,T) fp32 (natural log of the row sums
// of exp(scale·q·k)). Nothing of size T×T in global memory.
inline void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int HS,
                              cudaStream_t stream) {
    attention_check_shape(B, T, NH, HS);
#ifndef ENABLE_FP32
    using namespace attention_tc;
    if (HS == 32)
        return attention_forward_tensor_cores<32, kCpAsyncPipeline>(out, lse, qkv, B, T, NH, stream);
    if (HS == 64)
        return attention_forward_tensor_cores<64, kCpAsyncPipeline>(out, lse, qkv, B, T, NH, stream);
    if (HS == 128)
        return attention_forward_tensor_cores<128, kCpAsyncPipeline>(out, lse, qkv, B, T, NH, stream);
#endif
    attention_forward_simple(out, lse, qkv, B, T, NH, HS, stream);
}

// dqkv (B,T,3C) overwritten with dQ, dK, dV; scratch: attention_backward_scratch_bytes() bytes.
// Deterministic: every value is summed by one thread in a fixed order.
inline void attention_backward(floatX* dqkv, void* scratch, const floatX* dout, const floatX* out,
                               const float* lse, const floatX* qkv, int B, int T, int NH, int HS,
                               cudaStream_t stream) {
    attention_check_shape(B, T, NH, HS);
#ifndef ENABLE_FP32
    using namespace attention_tc;
    if (HS == 32)
        return attention_backward_tensor_cores<32, kCpAsyncPipeline>(dqkv, scratch, dout, out, lse, qkv, B, T,
                                                                     NH, stream);
    if (HS == 64)
        return attention_backward_tensor_cores<64, kCpAsyncPipeline>(dqkv, scratch, dout, out, lse, qkv, B, T,
                                                                     NH, stream);
    if (HS == 128)
        return attention_backward_tensor_cores<128, kCpAsyncPipeline>(dqkv, scratch, dout, out, lse, qkv, B,
                                                                      T, NH, stream);
#endif
    attention_backward_simple(dqkv, scratch, dout, out, lse, qkv, B, T, NH, HS, stream);
}
