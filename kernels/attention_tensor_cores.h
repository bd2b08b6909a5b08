// Causal self-attention on tensor cores, bf16, head sizes 32, 64 and 128 (see kernels/attention.h
// for the op, its layouts and costs): FlashAttention-2 style. A block of 4 warps takes 64 rows, 16
// per warp; tiles stream through swizzled shared memory by cp.async, double-buffered; ldmatrix feeds
// mma.sync m16n8k16 (kernels/mma.h); the probabilities stay in registers and feed the next product
// directly; tiles above the diagonal are skipped, and within the diagonal tile each warp skips the
// 16×16 blocks that lie wholly above its rows. Template parameter kRecipe switches the later ideas
// off for dev/cuda/attention.cu.
// Grouped-query attention (KV < NH key/value heads): forward and dQ blocks belong to a query head and
// read its group's K/V tiles (so each K/V tile is read by NH/KV query heads' blocks, mostly from L2);
// a dK/dV block owns 64 keys of a key/value head and streams the query tiles of every query head of
// its group through one pipeline, one head after another, summing into the same registers: the
// group's sum in a fixed order, no atomics, no partials in memory. Its grid has KV·B·T/64 blocks,
// each reading NH/KV times the Q, dO, lse and D of plain attention's.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/attention_common.h"
#include "kernels/common.h"
#include "kernels/cp_async.h"
#include "kernels/ldmatrix.h"
#include "kernels/mma.h"

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
    forward_kernel(bf16* out, float* lse, const bf16* qkv, int T, int NH, int KV) {
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
    const int q0 = q_block * kBlockQ, C = NH * HS, kv = attention_kv_head(h, NH, KV);
    const size_t stride = attention_qkv_stride(NH, KV, HS);
    const bf16* q_g = qkv + attention_qkv_index(b, 0, 0, h, T, NH, KV, HS);
    const bf16* k_g = qkv + attention_qkv_index(b, 0, 1, kv, T, NH, KV, HS);
    const bf16* v_g = qkv + attention_qkv_index(b, 0, 2, kv, T, NH, KV, HS);
    const int tiles = q_block + 1;  // key tiles up to the diagonal (kBlockK == kBlockQ)
    CpAsyncQueue copies;
    auto load_kv = [&](int tile, int stage) {
        load_kv_tiles<Tile, kBlockK, kAsync>(k_tiles, v_tiles, k_g, v_g, stride, T, tile, stage, copies);
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

// ---- backward, dK and dV: block (key block, key/value head, batch), 64 keys (16 per warp) against
// query tiles of kBlockQ from the diagonal on, of each query head of the group in turn. Per tile,
// with the warp's keys as rows (transposed products, so that every product has its A operand in
// registers):
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
                         const bf16* qkv, int T, int NH, int KV) {
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
    const int k0 = blockIdx.x * kBlockK, kv = blockIdx.y, b = blockIdx.z, C = NH * HS;
    const size_t stride = attention_qkv_stride(NH, KV, HS);
    // Step s: query head kv·group_size + s / tiles, its query tile first_tile + s % tiles (queries
    // from k0 on; those before see none of these keys).
    const int group_size = NH / KV, first_tile = k0 / kBlockQ, tiles = ceil_div(T, kBlockQ) - first_tile;
    const int steps = group_size * tiles;
    CpAsyncQueue copies;
    auto load_queries = [&](int step, int stage) {
        const int h = kv * group_size + step / tiles, q0 = (first_tile + step % tiles) * kBlockQ;
        load_tile<Tile, kBlockQ, kAsync>(q_tiles + stage * Tile::elements(kBlockQ),
                                         qkv + attention_qkv_index(b, q0, 0, h, T, NH, KV, HS), stride, T - q0,
                                         copies);
        load_tile<Tile, kBlockQ, kAsync>(do_tiles + stage * Tile::elements(kBlockQ),
                                         dout + attention_out_index(b, q0, h, T, NH, HS), C, T - q0, copies);
        load_floats<kBlockQ, kAsync>(lse_s + stage * kBlockQ, lse + attention_lse_index(b, h, q0, T, NH), T - q0,
                                     copies);
        load_floats<kBlockQ, kAsync>(d_s + stage * kBlockQ, row_dot + attention_lse_index(b, h, q0, T, NH),
                                     T - q0, copies);
    };

    load_tile<Tile, kBlockK, kAsync>(k_tile, qkv + attention_qkv_index(b, k0, 1, kv, T, NH, KV, HS), stride,
                                     T - k0, copies);
    load_tile<Tile, kBlockK, kAsync>(v_tile, qkv + attention_qkv_index(b, k0, 2, kv, T, NH, KV, HS), stride,
                                     T - k0, copies);
    load_queries(0, 0);
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

    for (int step = 0; step < steps; step++) {
        next_tile<kAsync>(step, step, steps, load_queries, copies);
        const int stage = step % Config::kStages, q0 = (first_tile + step % tiles) * kBlockQ;
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
    store_rows<Tile, HS>(dqkv + attention_qkv_index(b, row0, 1, kv, T, NH, KV, HS), stride, T - row0, dk,
                         scale, k_tile, warp * 16);
    store_rows<Tile, HS>(dqkv + attention_qkv_index(b, row0, 2, kv, T, NH, KV, HS), stride, T - row0, dv,
                         1.0f, v_tile, warp * 16);
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
                       int T, int NH, int KV) {
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
    const int q0 = q_block * kBlockQ, C = NH * HS, kv = attention_kv_head(h, NH, KV);
    const size_t stride = attention_qkv_stride(NH, KV, HS);
    const bf16* q_g = qkv + attention_qkv_index(b, 0, 0, h, T, NH, KV, HS);
    const bf16* k_g = qkv + attention_qkv_index(b, 0, 1, kv, T, NH, KV, HS);
    const bf16* v_g = qkv + attention_qkv_index(b, 0, 2, kv, T, NH, KV, HS);
    const int tiles = (min(q0 + kBlockQ, T) - 1) / kBlockK + 1;  // key tiles up to the last row
    CpAsyncQueue copies;
    auto load_kv = [&](int tile, int stage) {
        load_kv_tiles<Tile, kBlockK, kAsync>(k_tiles, v_tiles, k_g, v_g, stride, T, tile, stage, copies);
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
    store_rows<Tile, HS>(dqkv + attention_qkv_index(b, row0, 0, h, T, NH, KV, HS), stride, T - row0, dq,
                         scale, q_tile, warp * 16);
}

}  // namespace attention_tc

// ---- the tensor-core path (bf16, HS 32/64/128), kRecipe as attention_tc::Recipe; KV key/value heads
// (NH % KV == 0), NH when not given.
template <int HS, int kRecipe>
void attention_forward_tensor_cores(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T,
                                    int NH, int KV, cudaStream_t stream) {
    using namespace attention_tc;
    using Config = ForwardConfig<HS, kRecipe>;
    static const bool once =
        (attention_allow_shared_bytes(forward_kernel<HS, kRecipe>, Config::shared_bytes()), true);
    (void)once;
    LAUNCH((forward_kernel<HS, kRecipe>), dim3(ceil_div(T, Config::kBlockQ), NH, B), kThreads,
           Config::shared_bytes(), stream, out, lse, qkv, T, NH, KV);
    CUDA_CHECK(cudaGetLastError());
}
template <int HS, int kRecipe>
void attention_forward_tensor_cores(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T,
                                    int NH, cudaStream_t stream) {
    attention_forward_tensor_cores<HS, kRecipe>(out, lse, qkv, B, T, NH, NH, stream);
}

// dK/dV blocks per key/value head (each sums its group's query heads), dQ blocks per query head.
template <int HS, int kRecipe>
void attention_backward_tensor_cores(__nv_bfloat16* dqkv, void* scratch, const __nv_bfloat16* dout,
                                     const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* qkv,
                                     int B, int T, int NH, int KV, cudaStream_t stream) {
    using namespace attention_tc;
    using DkDv = DkDvConfig<HS, kRecipe>;
    using Dq = DqConfig<HS, kRecipe>;
    static const bool once =
        (attention_allow_shared_bytes(backward_dkdv_kernel<HS, kRecipe>, DkDv::shared_bytes()),
         attention_allow_shared_bytes(backward_dq_kernel<HS, kRecipe>, Dq::shared_bytes()), true);
    (void)once;
    float* row_dot = static_cast<float*>(scratch);
    attention_row_dot(row_dot, dout, out, B, T, NH, HS, stream);
    LAUNCH((backward_dkdv_kernel<HS, kRecipe>), dim3(ceil_div(T, DkDv::kBlockK), KV, B), kThreads,
           DkDv::shared_bytes(), stream, dqkv, dout, lse, row_dot, qkv, T, NH, KV);
    CUDA_CHECK(cudaGetLastError());
    LAUNCH((backward_dq_kernel<HS, kRecipe>), dim3(ceil_div(T, Dq::kBlockQ), NH, B), kThreads,
           Dq::shared_bytes(), stream, dqkv, dout, lse, row_dot, qkv, T, NH, KV);
    CUDA_CHECK(cudaGetLastError());
}
template <int HS, int kRecipe>
void attention_backward_tensor_cores(__nv_bfloat16* dqkv, void* scratch, const __nv_bfloat16* dout,
                                     const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* qkv,
                                     int B, int T, int NH, cudaStream_t stream) {
    attention_backward_tensor_cores<HS, kRecipe>(dqkv, scratch, dout, out, lse, qkv, B, T, NH, NH, stream);
}
