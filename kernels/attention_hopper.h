// Causal self-attention on Hopper (sm_90a): warp-specialised, TMA-fed, wgmma flash attention,
// forward and backward. Same op and layouts as kernels/attention.h documents:
//   S = scale · Q·Kᵀ (causal), P = softmax_rows(S), out = P·V, lse = log Σ_j exp(S[i][j]) (natural log)
// qkv (B, T, W) bf16 with W = (NH + 2·KV)·HS: NH query heads, then KV key heads, then KV value heads
// (NH % KV == 0; KV == NH: multi-head attention, W = 3C), query head h reading key/value head
// g = h / (NH/KV); out (B, T, C) bf16 with C = NH·HS, lse (B, NH, T) fp32; head size HS = 64 or 128;
// any T. Every TMA load addresses one (W, T, B) view of qkv: Q of head h at column h·HS, K of head g
// at (NH + g)·HS, V at (NH + KV + g)·HS.
//
// Per call, N = B·NH·T²·HS: reads qkv (2·B·T·W bytes from DRAM; the K/V tiles again for every query
// block of the group's NH/KV query heads, from L2), writes out and lse (2·B·T·C + 4·B·NH·T bytes);
// FLOPs counted 2·N (tensor cores run ~2·N + a diagonal tile per 64 rows, and with 128-key tiles
// the masked half of the first consumer's diagonal tile).
//
// Forward: the block (query block of 128 rows, query head, batch) is three warpgroups:
//   - producer (warpgroup 0): one thread issues TMA loads (kernels/tma.h) of Q once and of K and V
//     tiles (kBlockK keys: 128 in the shipped kernel, 64 in the ladder's versions 6 and 7) into a
//     ring of kStages shared-memory stages, each stage guarded by mbarriers
//     (kernels/mbarrier.h): k_full / v_full (expect_tx by the producer, completed by the TMA bytes)
//     and kv_empty (one arrival per consumer warp once its wgmma reading the stage has completed);
//   - two consumers (warpgroups 1, 2), 64 query rows each: S = Q·Kᵀ with wgmma (both operands in
//     shared memory, K-major, 128-byte swizzle), causal mask and online softmax in registers, then
//     O += P·V with wgmma, P straight from the S accumulators as the A operand in registers and V
//     read MN-major from shared memory. A 128-key tile takes one softmax pass (row maxima, their
//     shuffles, the rescale of O) and one barrier round where 64-key tiles take two, and its S
//     product is one wgmma of N=128. Across the two consumers, MMAs and softmaxes interleave as
//     the warp schedulers pick (no enforced ping-pong order), while the producer keeps the next stage
//     loading. kOverlapSoftmax (off in the shipped kernel) has each consumer issue the next tile's
//     S = Q·Kᵀ before this tile's softmax, as FlashAttention-3's intra-warpgroup pipelining: on an
//     H100 it made the forward slower at every shape measured (dev/RESULTS.md).
// Causal tile skipping: the block loads key tiles up to its last row only; a consumer whose rows all
// lie before a tile skips its MMAs (still waiting and arriving, to keep the ring in step).
// Registers: 384 threads launch with 168 each; setmaxnreg moves them to where the work is: the
// producer keeps 24, each consumer thread takes 240 (O, the S tile or two, P fragments).
//
// ptxas (nvcc 13.0, sm_90a, -O3): no spills in any kernel here. Registers at entry: 168 in every
// kernel (then 24 producer / 240 consumer). No wgmma serialised and no wait added by ptxas (no
// C7510-C7517 notes). Check: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v.
//
// Shared memory (1024-byte aligned; tiles as 128-byte-swizzled panels of 64 columns, what TMA
// writes and the wgmma descriptors read): forward Q [2 consumers][HS/64 panels][64 rows][64],
// K and V [kStages][HS/64][kBlockK keys][64], then the mbarriers (113 KiB at HS 64, 225 KiB at
// HS 128); the backward's layout is at its kernel (83 and 163 KiB).
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/attention_common.h"
#include "kernels/common.h"
#include "kernels/mbarrier.h"
#include "kernels/tma.h"
#include "kernels/wgmma.h"

namespace attention_hopper {

using bf16 = __nv_bfloat16;

// kKeys: keys per K/V tile, 64 or 128 (the shipped forward: 128; dev/cuda/attention.cu's ladder
// times both).
template <int HS, int kKeys = 128>
struct ForwardTraits {
    static_assert(HS == 64 || HS == 128, "head sizes 64 and 128");
    static_assert(kKeys == 64 || kKeys == 128, "64 or 128 keys a tile");
    static constexpr int kConsumers = 2;                       // consumer warpgroups
    static constexpr int kRowsPerConsumer = 64;                // one wgmma M
    static constexpr int kBlockQ = kConsumers * kRowsPerConsumer;
    static constexpr int kBlockK = kKeys;                      // keys per tile (wgmma N of S, k16 steps of P·V)
    // K/V ring depth. Three: a block holds the SM alone (its 384 threads take the register file), so
    // shared memory is free for a deeper ring: two tiles load while one is consumed (at HS 128 with
    // 128-key tiles, 225 KiB of the 227 a block may have).
    static constexpr int kStages = 3;
    static constexpr int kThreads = 128 * (1 + kConsumers);    // producer + consumers
    static constexpr int kPanels = HS / 64;                    // 128-byte swizzle rows hold 64 bf16
    static constexpr int kQPanelBytes = 64 * 128;              // a consumer's 64 rows of one panel
    static constexpr int kQTileBytes = kPanels * kQPanelBytes;  // 64 rows × HS
    static constexpr int kQBytes = kConsumers * kQTileBytes;
    static constexpr int kPanelBytes = kBlockK * 128;          // a K or V tile's rows of one panel
    static constexpr int kTileBytes = kPanels * kPanelBytes;   // kBlockK rows × HS
    static constexpr int kBoxesPerPanel = kBlockK / 64;        // TMA boxes are 64 rows
    static constexpr int kBarrierBytes = 8 * (1 + 3 * kStages);
    // Registers per thread (setmaxnreg): the launch gives 65536 / 384 -> 168 each; the producer
    // hands back down to 24 and the consumers take 240 (128·24 + 256·240 = 384·168).
    static constexpr int kProducerRegisters = 24, kConsumerRegisters = 240;
    static constexpr size_t shared_bytes() {
        return 1024 /* alignment slack */ + kQBytes + 2 * kStages * kTileBytes + kBarrierBytes;
    }
};

// Packs two floats into a bf16 pair (low half first), the A-register format.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}

// kOverlapSoftmax: issue the next tile's S = Q·Kᵀ before this tile's softmax, so that the tensor
// cores work during it (a second set of S accumulators, kKeys/2 registers).
template <int HS, bool kOverlapSoftmax, int kKeys>
__global__ void __launch_bounds__(ForwardTraits<HS, kKeys>::kThreads, 1)
    forward_kernel(bf16* out, float* lse, const __grid_constant__ CUtensorMap qkv_map, int T, int NH, int KV) {
    using Tr = ForwardTraits<HS, kKeys>;
    static_assert(!(kOverlapSoftmax && kKeys == 128), "the softmax/MMA overlap takes 64-key tiles");
    DYNAMIC_SHARED(unsigned char, raw);
    unsigned char* smem = align_shared<unsigned char>(raw, 1024);
    unsigned char* q_tiles = smem;                                  // [kConsumers][kPanels][64][64]
    unsigned char* k_tiles = q_tiles + Tr::kQBytes;                 // [kStages][kPanels][kBlockK][64]
    unsigned char* v_tiles = k_tiles + Tr::kStages * Tr::kTileBytes;
    uint64_t* bars = reinterpret_cast<uint64_t*>(v_tiles + Tr::kStages * Tr::kTileBytes);
    uint64_t* q_full = bars;
    uint64_t* k_full = bars + 1;
    uint64_t* v_full = k_full + Tr::kStages;
    uint64_t* kv_empty = v_full + Tr::kStages;

    const int q_block = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;  // longest blocks first
    const int q0 = q_block * Tr::kBlockQ;
    const int last_row = min(q0 + Tr::kBlockQ, T) - 1;
    const int tiles = last_row / Tr::kBlockK + 1;  // key tiles up to the diagonal
    // Read through a shuffle so the compiler knows it is uniform across the warp: wgmma in code it
    // must assume divergent is serialised (ptxas C7520).
    const int warpgroup = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);

    if (threadIdx.x == 0) {
        mbarrier_init(q_full, 1);
        for (int s = 0; s < Tr::kStages; s++) {
            mbarrier_init(&k_full[s], 1);
            mbarrier_init(&v_full[s], 1);
            mbarrier_init(&kv_empty[s], Tr::kConsumers * 4);  // every consumer warp
        }
        mbarrier_init_fence();
    }
    __syncthreads();

    if (warpgroup == 0) {
        // ---- producer: one thread drives the TMA unit; the others have nothing to do.
        warpgroup_release_registers<Tr::kProducerRegisters>();
        if (threadIdx.x != 0) return;
        tma_prefetch_map(&qkv_map);
        // Coordinates in the ((NH + 2·KV)·HS, T, B) view: column head·HS + 64·panel, row t, batch b,
        // with head h for Q, NH + g for K and NH + KV + g for V (g: the key/value head of h's group).
        const int g = attention_kv_head(h, NH, KV);
        const int k_column = (NH + g) * HS, v_column = (NH + KV + g) * HS;
        mbarrier_arrive_expect_tx(q_full, Tr::kQBytes);
        for (int c = 0; c < Tr::kConsumers; c++)
            for (int p = 0; p < Tr::kPanels; p++)
                tma_load_3d(q_tiles + (c * Tr::kPanels + p) * Tr::kQPanelBytes, &qkv_map, h * HS + 64 * p,
                            q0 + c * Tr::kRowsPerConsumer, b, q_full);
        for (int j = 0; j < tiles; j++) {
            const int s = j % Tr::kStages;
            if (j >= Tr::kStages) mbarrier_wait(&kv_empty[s], (j / Tr::kStages - 1) & 1);  // stage used up
            // Each panel of the tile: kBlockK rows of 128 bytes, as 64-row boxes 8 KiB apart (the
            // 128-byte swizzle repeats every 8 rows, so the boxes join into one panel).
            mbarrier_arrive_expect_tx(&k_full[s], Tr::kTileBytes);
            for (int p = 0; p < Tr::kPanels; p++)
                for (int x = 0; x < Tr::kBoxesPerPanel; x++)
                    tma_load_3d(k_tiles + (s * Tr::kPanels + p) * Tr::kPanelBytes + x * 64 * 128, &qkv_map,
                                k_column + 64 * p, j * Tr::kBlockK + 64 * x, b, &k_full[s]);
            mbarrier_arrive_expect_tx(&v_full[s], Tr::kTileBytes);
            for (int p = 0; p < Tr::kPanels; p++)
                for (int x = 0; x < Tr::kBoxesPerPanel; x++)
                    tma_load_3d(v_tiles + (s * Tr::kPanels + p) * Tr::kPanelBytes + x * 64 * 128, &qkv_map,
                                v_column + 64 * p, j * Tr::kBlockK + 64 * x, b, &v_full[s]);
        }
        return;
    }

    // ---- consumer: 64 query rows; thread i of the warpgroup holds rows wgmma_d_element(i, r).row.
    warpgroup_claim_registers<Tr::kConsumerRegisters>();
    const int consumer = warpgroup - 1, thread = threadIdx.x % 128, lane = threadIdx.x % 32;
    const int row_base = q0 + consumer * Tr::kRowsPerConsumer;  // first query row of this consumer
    const int my_row0 = row_base + wgmma_d_element(thread, 0).row;  // the thread's rows: +0 and +8
    const bool active_rows = row_base < T;
    const unsigned char* q_tile = q_tiles + consumer * Tr::kQTileBytes;
    const float scale_log2 = kLog2e / sqrtf((float)HS);
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
    float o[HS / 2];
    ATTENTION_UNROLL
    for (int r = 0; r < HS / 2; r++) o[r] = 0.0f;

    // The tiles this consumer computes on: up to the one holding its last row (causal skipping).
    const int work_tiles = active_rows ? min(tiles, (row_base + Tr::kRowsPerConsumer - 1) / Tr::kBlockK + 1) : 0;

    // S = Q·K(j)ᵀ into acc, as one committed group: HS/16 steps of k16; within a 128-byte panel a
    // step advances 32 bytes.
    auto issue_scores = [&](float* acc, int j) {
        const int s = j % Tr::kStages;
        const unsigned char* k_tile = k_tiles + s * Tr::kTileBytes;
        mbarrier_wait(&k_full[s], (j / Tr::kStages) & 1);
        wgmma_fence();
        ATTENTION_UNROLL
        for (int ks = 0; ks < HS / 16; ks++) {
            const int step_offset = (ks % 4) * 32;  // within the 128-byte row of panel ks / 4
            const uint64_t dq = wgmma_descriptor(q_tile + (ks / 4) * Tr::kQPanelBytes + step_offset, 16, 1024,
                                                 WgmmaSwizzle::B128);
            const uint64_t dk = wgmma_descriptor(k_tile + (ks / 4) * Tr::kPanelBytes + step_offset, 16, 1024,
                                                 WgmmaSwizzle::B128);
            wgmma_ss<Tr::kBlockK>(acc, dq, dk, ks > 0);
        }
        wgmma_commit_group();
    };
    // Causal mask (and keys past T, which TMA filled with zeros), then the online softmax: acc
    // becomes P (unnormalised), the running max and sum move, O is rescaled. The mask's tests run
    // only where the tile crosses the diagonal or passes T (kMasked).
    auto softmax = [&](float* acc, int k0, auto masked) {
        constexpr bool kMasked = decltype(masked)::value;
        float tile_max[2] = {-INFINITY, -INFINITY};
        ATTENTION_UNROLL
        for (int r = 0; r < Tr::kBlockK / 2; r++) {
            const WgmmaIndex e = wgmma_d_element(thread, r);
            const int key = k0 + e.col, row = row_base + e.row;
            if (kMasked && (key > row || key >= T)) acc[r] = -INFINITY;
            tile_max[(r >> 1) & 1] = fmaxf(tile_max[(r >> 1) & 1], acc[r]);
        }
        float base[2], correction[2];
        ATTENTION_UNROLL
        for (int x = 0; x < 2; x++) {  // the 4 lanes sharing a row
            tile_max[x] = fmaxf(tile_max[x], __shfl_xor_sync(0xffffffffu, tile_max[x], 1));
            tile_max[x] = fmaxf(tile_max[x], __shfl_xor_sync(0xffffffffu, tile_max[x], 2));
            const float new_max = fmaxf(row_max[x], tile_max[x] * scale_log2);
            base[x] = new_max == -INFINITY ? 0.0f : new_max;
            correction[x] = exp2f(row_max[x] - base[x]);
            row_max[x] = new_max;
            row_sum[x] *= correction[x];
        }
        ATTENTION_UNROLL
        for (int r = 0; r < Tr::kBlockK / 2; r++) {
            acc[r] = exp2f(fmaf(acc[r], scale_log2, -base[(r >> 1) & 1]));
            row_sum[(r >> 1) & 1] += acc[r];
        }
        ATTENTION_UNROLL
        for (int r = 0; r < HS / 2; r++) o[r] *= correction[(r >> 1) & 1];
    };
    // O += P·V(j), committed: k16 step kk takes keys 16kk..16kk+15 — accumulators 8kk..8kk+7 are
    // exactly the A fragment of those columns. V is MN-major: 8 keys 1024 bytes apart (SBO),
    // 64-column panels kPanelBytes apart (LBO).
    auto accumulate_pv = [&](const float* p, int j) {
        const int s = j % Tr::kStages;
        const unsigned char* v_tile = v_tiles + s * Tr::kTileBytes;
        uint32_t p_frag[Tr::kBlockK / 16][4];  // packed before the fence: wgmma reads them
        ATTENTION_UNROLL
        for (int kk = 0; kk < Tr::kBlockK / 16; kk++)
            ATTENTION_UNROLL
            for (int x = 0; x < 4; x++) p_frag[kk][x] = pack_bf16(p[8 * kk + 2 * x], p[8 * kk + 2 * x + 1]);
        mbarrier_wait(&v_full[s], (j / Tr::kStages) & 1);
        wgmma_fence();
        ATTENTION_UNROLL
        for (int kk = 0; kk < Tr::kBlockK / 16; kk++) {
            const uint64_t dv = wgmma_descriptor(v_tile + kk * 16 * 128, Tr::kPanelBytes, 1024, WgmmaSwizzle::B128);
            wgmma_rs<HS, 1>(o, p_frag[kk], dv, 1);
        }
        wgmma_commit_group();
    };

    mbarrier_wait(q_full, 0);
    float s_cur[Tr::kBlockK / 2], s_next[Tr::kBlockK / 2];  // S, then P: 64 rows × kBlockK keys
    if (kOverlapSoftmax && work_tiles > 0) issue_scores(s_cur, 0);
    for (int j = 0; j < tiles; j++) {
        const int s = j % Tr::kStages;
        if (j < work_tiles) {
            if constexpr (kOverlapSoftmax) {
                if (j + 1 < work_tiles) {
                    issue_scores(s_next, j + 1);  // the tensor cores work on it during this softmax
                    wgmma_wait_group<1, Tr::kBlockK>(s_cur);
                } else {
                    wgmma_wait_group<0, Tr::kBlockK>(s_cur);
                }
            } else {
                issue_scores(s_cur, j);
                wgmma_wait_group<0, Tr::kBlockK>(s_cur);
            }
            const int k0 = j * Tr::kBlockK;  // keys k0.. all at or before the first row, and before T?
            if (k0 + Tr::kBlockK - 1 <= row_base && k0 + Tr::kBlockK <= T)
                softmax(s_cur, k0, std::false_type{});
            else
                softmax(s_cur, k0, std::true_type{});
            accumulate_pv(s_cur, j);
            wgmma_wait_group<0, HS>(o);
            if constexpr (kOverlapSoftmax) {
                wgmma_fence_operands(WgmmaShape<Tr::kBlockK>{}, s_next);  // complete too: keep reads after
                ATTENTION_UNROLL
                for (int r = 0; r < Tr::kBlockK / 2; r++) s_cur[r] = s_next[r];
            }
        } else {  // nothing to compute, but the stage's phases must complete before it is reused
            mbarrier_wait(&k_full[s], (j / Tr::kStages) & 1);
            mbarrier_wait(&v_full[s], (j / Tr::kStages) & 1);
        }
        __syncwarp();
        if (lane == 0) mbarrier_arrive(&kv_empty[s]);  // this warp no longer reads the stage
    }
    wgmma_wait_group<0, HS>(o);  // nothing pending; says so to ptxas, which would otherwise add a wait

    // Finish: full row sums over the 4 lanes of a row, lse, out = O / sum.
    float inv_sum[2];
    ATTENTION_UNROLL
    for (int x = 0; x < 2; x++) {
        row_sum[x] += __shfl_xor_sync(0xffffffffu, row_sum[x], 1);
        row_sum[x] += __shfl_xor_sync(0xffffffffu, row_sum[x], 2);
        inv_sum[x] = 1.0f / row_sum[x];
        const int t = my_row0 + 8 * x;
        if (lane % 4 == 0 && t < T) lse[attention_lse_index(b, h, t, T, NH)] = (row_max[x] + log2f(row_sum[x])) * kLn2;
    }
    ATTENTION_UNROLL
    for (int r = 0; r < HS / 2; r += 2) {
        const WgmmaIndex e = wgmma_d_element(thread, r);
        const int t = row_base + e.row;
        if (t < T) {
            const float inv = inv_sum[(r >> 1) & 1];
            *reinterpret_cast<__nv_bfloat162*>(out + attention_out_index(b, t, h, T, NH, HS) + e.col) =
                __floats2bfloat162_rn(o[r] * inv, o[r + 1] * inv);
        }
    }
}

// The (W, T, B) view of qkv that every TMA load addresses, W = (NH + 2·KV)·HS a token's row (3C
// for multi-head attention): boxes of 64 columns × 64 rows, 128B swizzle.
inline void make_qkv_map(CUtensorMap* map, const bf16* qkv, int B, int T, int NH, int KV, int HS) {
    const uint64_t W = attention_qkv_stride(NH, KV, HS);
    const uint64_t dims[3] = {W, (uint64_t)T, (uint64_t)B};
    const uint64_t strides[3] = {2, W * 2, (uint64_t)T * W * 2};
    const uint32_t box[3] = {64, 64, 1};
    make_tensor_map(map, qkv, 3, 2, dims, strides, box, TmaSwizzle::B128);
}

// ---- backward. Two passes, each summing every output in one thread in a fixed order (bitwise
// deterministic, no atomics), both the same machinery as the forward: a producer warpgroup loads,
// by TMA, each consumer's 64 "row" tiles once and the "column" tiles into a kStages ring; each
// consumer warpgroup owns 64 rows and, per column tile of 64, computes with wgmma
//   X = R1·C1ᵀ, Y = R2·C2ᵀ (both operands from shared memory, K-major)
// then P and dS in registers, and accumulates with P or dS as A operands from registers and the
// column tiles read MN-major from shared memory:
//   dK/dV pass (rows = keys, columns = queries, scale = 1/sqrt(HS)):
//     R1 = K, C1 = Q, R2 = V, C2 = dO:  Pᵀ = exp(scale·X − lse[q]), dSᵀ = Pᵀ ⊙ (Y − D[q]),
//     dV += Pᵀ·dO,  dK += dSᵀ·Q  (dK scaled at the end)
//   dQ pass (rows = queries, columns = keys):
//     R1 = Q, C1 = K, R2 = dO, C2 = V:  P = exp(scale·X − lse[q]), dS = P ⊙ (Y − D[q]), dQ += dS·K
// D = Σ dO·out per query head, and lse, as the query statistics {lse·log2(e), D} (attention_row_dot
// with lse, in the scratch). The dK/dV pass needs the 64 pairs of its step's query tile: the producer
// loads them by TMA with the tile (512 bytes more on the stage's barrier), so the consumers read them
// from shared memory rather than from global memory after each product; the dQ pass reads its rows'
// pairs once. Each consumer waits once a step (kPipelined, shipped): it issues the step's
// accumulation, then the next step's X and Y right behind it, then waits for both, so the tensor
// cores take the next products without a round trip through the warpgroup. (Not in the dK/dV pass
// at HS 128: the next X and Y do not fit beside dK and dV in 240 registers.) No branch may lie
// between a wgmma and its wait there (ptxas would serialise them), so steps whose tile the rows do
// not meet (a consumer's first or last step of a head) are computed fully masked rather than
// skipped; the plain schedule skips them.
// Grouped-query attention: the dK/dV pass has a block per key block of each key/value head (grid
// T/kBlockRows × KV × B). Its row tiles (K, V) load once; its column steps run over the group's
// NH/KV query heads one after another, each over its query tiles from the diagonal on, as one
// flattened sequence through the ring (producer and consumers count the same steps), with that
// head's Q, dO, lse and D; dK and dV sum in the same registers across the group and are written
// once, in a fixed order (deterministic, no atomics). The dQ pass has a block per query block of
// each query head (T/kBlockRows × NH × B), reading its group's K and V tiles. KV == NH: one head per
// group, the same steps and bits as multi-head attention.
// Per call: reads qkv, dout, lse, D (dK/dV pass: the group's Q and dO once per key block; dQ pass: K
// and V once per query block), writes dqkv (2·B·T·W bytes); FLOPs executed ~ (4 + 3)·N with
// N = B·NH·T²·HS (causal half of 2·(2+2+3) GEMMs).
template <int HS>
struct BackwardTraits {
    static_assert(HS == 64 || HS == 128, "head sizes 64 and 128");
    // Two consumers (setmaxnreg: 240 registers each, as the forward's), so that one's MMAs run while
    // the other computes P and dS. At HS 128 the key-row pass's accumulators (dV and dK, 128 floats a
    // thread) and products (64) fit the 240 without spills (ptxas -v).
    static constexpr int kConsumers = 2;
    static constexpr int kProducerRegisters = 24, kConsumerRegisters = 240;
    static constexpr int kRowsPerConsumer = 64;
    static constexpr int kBlockRows = kConsumers * kRowsPerConsumer;
    static constexpr int kBlockCols = 64;
    static constexpr int kStages = 3;  // a ring as deep as the forward's (shared memory is free here too)
    static constexpr int kThreads = 128 * (1 + kConsumers);
    static constexpr int kPanels = HS / 64;
    static constexpr int kPanelBytes = 64 * 128;
    static constexpr int kTileBytes = kPanels * kPanelBytes;  // 64 rows × HS bf16
    static constexpr int kRowBytes = 2 * kConsumers * kTileBytes;  // R1 and R2 of every consumer
    static constexpr int kStatsBytes = kBlockCols * 2 * 4;           // a column tile's query statistics
    static constexpr int kBarrierBytes = 8 * (1 + 3 * kStages);
    static constexpr size_t shared_bytes() {
        return 1024 + kRowBytes + kStages * (2 * kTileBytes + kStatsBytes) + kBarrierBytes;
    }
};

// An operand's place in the TMA views: which map (0 qkv, 1 dout) and its first column there.
struct TileSource {
    int map, column;
};

template <int HS, bool kKeyRows, bool kPipelined>
__global__ void __launch_bounds__(BackwardTraits<HS>::kThreads, 1)
    backward_kernel(bf16* dqkv, const float* stats, const __grid_constant__ CUtensorMap qkv_map,
                    const __grid_constant__ CUtensorMap dout_map, const __grid_constant__ CUtensorMap stats_map,
                    int T, int NH, int KV) {
    using Tr = BackwardTraits<HS>;
    DYNAMIC_SHARED(unsigned char, raw);
    unsigned char* smem = align_shared<unsigned char>(raw, 1024);
    unsigned char* row_tiles = smem;  // [kConsumers][2: R1, R2][kPanels][64][64]
    unsigned char* c1_tiles = row_tiles + Tr::kRowBytes;  // [kStages][kPanels][64][64]
    unsigned char* c2_tiles = c1_tiles + Tr::kStages * Tr::kTileBytes;
    float* stats_tiles = reinterpret_cast<float*>(c2_tiles + Tr::kStages * Tr::kTileBytes);  // [kStages][64][2]
    uint64_t* bars = reinterpret_cast<uint64_t*>(stats_tiles + Tr::kStages * Tr::kStatsBytes / 4);
    uint64_t* rows_full = bars;
    uint64_t* c1_full = bars + 1;
    uint64_t* c2_full = c1_full + Tr::kStages;
    uint64_t* c_empty = c2_full + Tr::kStages;

    // blockIdx.y: the key/value head (key rows) or the query head (query rows). Longest blocks
    // first: key blocks from the first (they see every later query), query blocks from the last.
    const int row_block = kKeyRows ? blockIdx.x : gridDim.x - 1 - blockIdx.x, head = blockIdx.y, b = blockIdx.z;
    const int r0 = row_block * Tr::kBlockRows;
    const int col_tiles_total = ceil_div(T, Tr::kBlockCols);
    // Column tiles this block visits: from the diagonal on (key rows) or up to it (query rows).
    const int first_tile = kKeyRows ? r0 / Tr::kBlockCols : 0;
    const int end_tile = kKeyRows ? col_tiles_total : (min(r0 + Tr::kBlockRows, T) - 1) / Tr::kBlockCols + 1;
    // Key rows walk the query heads of their group, NH/KV of them, one after another, each over the
    // column tiles first_tile..end_tile-1: one flattened sequence of steps through the stage ring,
    // the same for the producer and the consumers. Query rows: their own head's tiles.
    const int group = NH / KV, kv = kKeyRows ? head : attention_kv_head(head, NH, KV);
    const int first_head = kKeyRows ? kv * group : head;
    const int steps = (end_tile - first_tile) * (kKeyRows ? group : 1);
    // Columns in the qkv view: query head h at h·HS, key head kv at (NH + kv)·HS, value head at
    // (NH + KV + kv)·HS; dO of query head h at h·HS of the dout view.
    const TileSource k{0, (NH + kv) * HS}, v{0, (NH + KV + kv) * HS};
    const TileSource r1 = kKeyRows ? k : TileSource{0, head * HS}, r2 = kKeyRows ? v : TileSource{1, head * HS};
    const int warpgroup = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);

    if (threadIdx.x == 0) {
        mbarrier_init(rows_full, 1);
        for (int s = 0; s < Tr::kStages; s++) {
            mbarrier_init(&c1_full[s], 1);
            mbarrier_init(&c2_full[s], 1);
            mbarrier_init(&c_empty[s], Tr::kConsumers * 4);
        }
        mbarrier_init_fence();
    }
    __syncthreads();

    if (warpgroup == 0) {  // ---- producer
        warpgroup_release_registers<Tr::kProducerRegisters>();
        if (threadIdx.x != 0) return;
        tma_prefetch_map(&qkv_map);
        tma_prefetch_map(&dout_map);
        if (kKeyRows) tma_prefetch_map(&stats_map);
        auto load = [&](unsigned char* dst, TileSource src, int row, uint64_t* bar) {
            for (int p = 0; p < Tr::kPanels; p++)
                tma_load_3d(dst + p * Tr::kPanelBytes, src.map == 0 ? &qkv_map : &dout_map, src.column + 64 * p, row,
                            b, bar);
        };
        mbarrier_arrive_expect_tx(rows_full, Tr::kRowBytes);
        for (int c = 0; c < Tr::kConsumers; c++) {
            load(row_tiles + (2 * c + 0) * Tr::kTileBytes, r1, r0 + 64 * c, rows_full);
            load(row_tiles + (2 * c + 1) * Tr::kTileBytes, r2, r0 + 64 * c, rows_full);
        }
        for (int n = 0, j = first_tile, h = first_head; n < steps; n++) {
            const int s = n % Tr::kStages;
            if (n >= Tr::kStages) mbarrier_wait(&c_empty[s], (n / Tr::kStages - 1) & 1);
            const TileSource c1 = kKeyRows ? TileSource{0, h * HS} : k, c2 = kKeyRows ? TileSource{1, h * HS} : v;
            mbarrier_arrive_expect_tx(&c1_full[s], Tr::kTileBytes + (kKeyRows ? Tr::kStatsBytes : 0));
            load(c1_tiles + s * Tr::kTileBytes, c1, j * Tr::kBlockCols, &c1_full[s]);
            if (kKeyRows)  // query head h's pairs of this tile: row b·NH + h of the statistics
                tma_load_2d(stats_tiles + s * (Tr::kStatsBytes / 4), &stats_map, 2 * j * Tr::kBlockCols, b * NH + h,
                            &c1_full[s]);
            mbarrier_arrive_expect_tx(&c2_full[s], Tr::kTileBytes);
            load(c2_tiles + s * Tr::kTileBytes, c2, j * Tr::kBlockCols, &c2_full[s]);
            if (++j == end_tile) j = first_tile, h++;  // the group's next query head
        }
        return;
    }

    // ---- consumer: rows row_base .. +63 (keys or queries).
    warpgroup_claim_registers<Tr::kConsumerRegisters>();
    const int consumer = warpgroup - 1, thread = threadIdx.x % 128, lane = threadIdx.x % 32;
    const int row_base = r0 + consumer * Tr::kRowsPerConsumer;
    const bool active_rows = row_base < T;
    const unsigned char* r1_tile = row_tiles + (2 * consumer + 0) * Tr::kTileBytes;
    const unsigned char* r2_tile = row_tiles + (2 * consumer + 1) * Tr::kTileBytes;
    const float scale = 1.0f / sqrtf((float)HS), scale_log2 = scale * kLog2e;
    float acc1[HS / 2], acc2[HS / 2];  // key rows: dV, dK, summed over the group; query rows: dQ (acc2 unused)
    ATTENTION_UNROLL
    for (int r = 0; r < HS / 2; r++) acc1[r] = acc2[r] = 0.0f;
    // Query rows: the thread's two rows' lse (log2 units) and D, fixed for the whole pass.
    float row_lse[2] = {0.0f, 0.0f}, row_d[2] = {0.0f, 0.0f};
    if (!kKeyRows) {
        for (int x = 0; x < 2; x++) {
            const int t = row_base + wgmma_d_element(thread, 2 * x).row;
            if (t < T) {
                const size_t at = attention_stats_index(b, head, t, T, NH);
                row_lse[x] = stats[at], row_d[x] = stats[at + 1];
            }
        }
    }

    // A step of the walk: its stage and parity, its column tile, and whether this consumer's rows
    // meet the tile (causal skipping: it still waits and arrives, to keep the ring in step).
    struct Step {
        int stage;
        uint32_t parity;
        int tile, col0;
        bool compute;
    };
    const auto step_on = [&](int stage, uint32_t parity, int tile) {
        const int col0 = tile * Tr::kBlockCols;
        const bool meets = kKeyRows ? col0 + Tr::kBlockCols - 1 >= row_base
                                    : col0 <= row_base + Tr::kRowsPerConsumer - 1;
        return Step{stage, parity, tile, col0, active_rows && meets};
    };
    // The step after st: the next stage of the ring (the parity flips as it wraps), the next column
    // tile (back to the first one at the group's next query head).
    const auto step_after = [&](const Step& st) {
        const bool wraps = st.stage + 1 == Tr::kStages;
        return step_on(wraps ? 0 : st.stage + 1, wraps ? st.parity ^ 1u : st.parity,
                       st.tile + 1 == end_tile ? first_tile : st.tile + 1);
    };
    const Step first_step = step_on(0, 0, first_tile);
    float x[Tr::kBlockCols / 2], y[Tr::kBlockCols / 2];                       // X, Y; then P, dS
    uint32_t p_frag[Tr::kBlockCols / 16][4], ds_frag[Tr::kBlockCols / 16][4];  // P, dS as A operands

    // X = R1·C1ᵀ and Y = R2·C2ᵀ of a step, once its tiles have landed: one committed group.
    // (always: issue the products whether or not the rows meet the tile, their P then all masked)
    const auto issue_products = [&](const Step& st, auto always) {
        mbarrier_wait(&c1_full[st.stage], st.parity);
        mbarrier_wait(&c2_full[st.stage], st.parity);
        if (!decltype(always)::value && !st.compute) return;
        const unsigned char* c1_tile = c1_tiles + st.stage * Tr::kTileBytes;
        const unsigned char* c2_tile = c2_tiles + st.stage * Tr::kTileBytes;
        wgmma_fence();
        ATTENTION_UNROLL
        for (int ks = 0; ks < HS / 16; ks++) {
            const int offset = (ks / 4) * Tr::kPanelBytes + (ks % 4) * 32;
            wgmma_ss<Tr::kBlockCols>(x, wgmma_descriptor(r1_tile + offset, 16, 1024, WgmmaSwizzle::B128),
                                     wgmma_descriptor(c1_tile + offset, 16, 1024, WgmmaSwizzle::B128), ks > 0);
        }
        ATTENTION_UNROLL
        for (int ks = 0; ks < HS / 16; ks++) {
            const int offset = (ks / 4) * Tr::kPanelBytes + (ks % 4) * 32;
            wgmma_ss<Tr::kBlockCols>(y, wgmma_descriptor(r2_tile + offset, 16, 1024, WgmmaSwizzle::B128),
                                     wgmma_descriptor(c2_tile + offset, 16, 1024, WgmmaSwizzle::B128), ks > 0);
        }
        wgmma_commit_group();
    };
    // Once X and Y are in: P and dS, then the accumulating products, issued as one committed group.
    const auto issue_accumulation = [&](const Step& st) {
        // Key rows: this step's query statistics, {lse·log2(e), D} per query of the tile.
        const float* stats_tile = stats_tiles + st.stage * (Tr::kStatsBytes / 4);
        // P = exp(scale·S − lse) (0 where masked) and dS = P ⊙ (dP − D), in place. Only tiles that
        // cross the diagonal or pass T test each element (kMasked); the others, most of them, skip
        // the tests.
        const auto probabilities = [&](auto masked) {
            constexpr bool kMasked = decltype(masked)::value;
            ATTENTION_UNROLL
            for (int r = 0; r < Tr::kBlockCols / 2; r++) {
                const WgmmaIndex e = wgmma_d_element(thread, r);
                const int row = row_base + e.row, col = st.col0 + e.col;
                const int query = kKeyRows ? col : row, key = kKeyRows ? row : col;
                float p = 0.0f, d = 0.0f;
                if (!kMasked || (key <= query && query < T)) {
                    const float l = kKeyRows ? stats_tile[2 * e.col] : row_lse[(r >> 1) & 1];
                    d = kKeyRows ? stats_tile[2 * e.col + 1] : row_d[(r >> 1) & 1];
                    p = exp2f(fmaf(x[r], scale_log2, -l));
                }
                x[r] = p;
                y[r] = p * (y[r] - d);
            }
        };
        // This tile's keys k0..k0+nk-1 and queries q0..q0+nq-1: every key at or before every query,
        // and every query before T?
        const int k0 = kKeyRows ? row_base : st.col0, q0 = kKeyRows ? st.col0 : row_base;
        constexpr int nk = kKeyRows ? Tr::kRowsPerConsumer : Tr::kBlockCols;
        constexpr int nq = kKeyRows ? Tr::kBlockCols : Tr::kRowsPerConsumer;
        if (k0 + nk - 1 <= q0 && q0 + nq <= T)
            probabilities(std::false_type{});
        else
            probabilities(std::true_type{});
        ATTENTION_UNROLL
        for (int kk = 0; kk < Tr::kBlockCols / 16; kk++)
            ATTENTION_UNROLL
            for (int i = 0; i < 4; i++) {
                p_frag[kk][i] = pack_bf16(x[8 * kk + 2 * i], x[8 * kk + 2 * i + 1]);
                ds_frag[kk][i] = pack_bf16(y[8 * kk + 2 * i], y[8 * kk + 2 * i + 1]);
            }
        // Accumulate: the column tiles MN-major (64 columns per panel, LBO; 8 rows, SBO).
        const unsigned char* c1_tile = c1_tiles + st.stage * Tr::kTileBytes;
        const unsigned char* c2_tile = c2_tiles + st.stage * Tr::kTileBytes;
        wgmma_fence();
        ATTENTION_UNROLL
        for (int kk = 0; kk < Tr::kBlockCols / 16; kk++) {
            const uint64_t d1 = wgmma_descriptor(c1_tile + kk * 16 * 128, Tr::kPanelBytes, 1024, WgmmaSwizzle::B128);
            if (kKeyRows) {
                const uint64_t d2 = wgmma_descriptor(c2_tile + kk * 16 * 128, Tr::kPanelBytes, 1024, WgmmaSwizzle::B128);
                wgmma_rs<HS, 1>(acc1, p_frag[kk], d2, 1);   // dV += Pᵀ·dO
                wgmma_rs<HS, 1>(acc2, ds_frag[kk], d1, 1);  // dK += dSᵀ·Q
            } else {
                wgmma_rs<HS, 1>(acc1, ds_frag[kk], d1, 1);  // dQ += dS·K
            }
        }
        wgmma_commit_group();
    };
    // Waits for every group this warpgroup issued; the compiler is told every operand changed.
    const auto wait_all = [&]() {
        wgmma_wait_group<0, Tr::kBlockCols>(x);
        wgmma_fence_operands(WgmmaShape<Tr::kBlockCols>{}, y);
        wgmma_fence_operands(WgmmaShape<HS>{}, acc1);
        wgmma_fence_operands(WgmmaShape<HS>{}, acc2);
    };
    // A step's stage is free once this warp's products reading it have completed.
    const auto release = [&](const Step& st) {
        __syncwarp();
        if (lane == 0) mbarrier_arrive(&c_empty[st.stage]);
    };

    mbarrier_wait(rows_full, 0);
    if constexpr (!kPipelined) {
        // Each step in turn: its products, P and dS, the accumulation, then the stage back.
        Step st = first_step;
        for (int n = 0; n < steps; n++, st = step_after(st)) {
            issue_products(st, std::false_type{});
            if (st.compute) {
                wait_all();
                issue_accumulation(st);
                wait_all();
            }
            release(st);
        }
    } else {
        // The next step's products are issued right behind this step's accumulation, and one wait
        // takes both: the tensor cores go from one to the other without waiting for this warpgroup.
        // No branch may separate a product's issue from its wait (ptxas would serialise every
        // wgmma, C7514/C7515): so every step computes, those whose tile the rows do not meet with
        // every P masked to 0, and the last step's accumulation is taken out of the loop.
        Step st = first_step;
        issue_products(st, std::true_type{});
        wait_all();
        for (int n = 0; n + 1 < steps; n++) {
            const Step next = step_after(st);
            issue_accumulation(st);
            issue_products(next, std::true_type{});
            wait_all();  // this step's accumulation, the next step's X and Y
            release(st);
            st = next;
        }
        issue_accumulation(st);
        wait_all();
        release(st);
    }

    // Write, once: key rows dK (scaled) and dV of key/value head kv; query rows dQ (scaled).
    ATTENTION_UNROLL
    for (int r = 0; r < HS / 2; r += 2) {
        const WgmmaIndex e = wgmma_d_element(thread, r);
        const int t = row_base + e.row;
        if (t >= T) continue;
        if (kKeyRows) {
            *reinterpret_cast<__nv_bfloat162*>(dqkv + attention_qkv_index(b, t, 1, kv, T, NH, KV, HS) + e.col) =
                __floats2bfloat162_rn(acc2[r] * scale, acc2[r + 1] * scale);
            *reinterpret_cast<__nv_bfloat162*>(dqkv + attention_qkv_index(b, t, 2, kv, T, NH, KV, HS) + e.col) =
                __floats2bfloat162_rn(acc1[r], acc1[r + 1]);
        } else {
            *reinterpret_cast<__nv_bfloat162*>(dqkv + attention_qkv_index(b, t, 0, head, T, NH, KV, HS) + e.col) =
                __floats2bfloat162_rn(acc1[r] * scale, acc1[r + 1] * scale);
        }
    }
}

// The (C, T, B) view of dout, boxes as make_qkv_map's.
inline void make_dout_map(CUtensorMap* map, const bf16* dout, int B, int T, int C) {
    const uint64_t dims[3] = {(uint64_t)C, (uint64_t)T, (uint64_t)B};
    const uint64_t strides[3] = {2, (uint64_t)C * 2, (uint64_t)T * C * 2};
    const uint32_t box[3] = {64, 64, 1};
    make_tensor_map(map, dout, 3, 2, dims, strides, box, TmaSwizzle::B128);
}

// The (2·T, B·NH) fp32 view of the query statistics (attention_stats_index: rows 2·T2 floats
// apart): boxes of one row's 64 pairs, unswizzled; pairs past T read as zeros.
template <int HS>
inline void make_stats_map(CUtensorMap* map, const float* stats, int B, int T, int NH) {
    const uint64_t dims[2] = {2 * (uint64_t)T, (uint64_t)B * NH};
    const uint64_t strides[2] = {4, 2 * (uint64_t)attention_stats_row_pairs(T) * 4};
    const uint32_t box[2] = {2 * BackwardTraits<HS>::kBlockCols, 1};
    make_tensor_map(map, stats, 2, 4, dims, strides, box, TmaSwizzle::None);
}

}  // namespace attention_hopper

// dqkv (B, T, (NH + 2·KV)·HS) overwritten; scratch: attention_backward_scratch_bytes() bytes (the
// query statistics). KV key/value heads (NH % KV == 0; KV == NH: multi-head attention, dqkv
// (B, T, 3C)). kPipelined (shipped): each step's products issued behind the step before's
// accumulation, in the dQ pass and at HS 64 in the dK/dV pass (at HS 128 the next products do not fit
// the registers beside dK and dV: ptxas spills and serialises the wgmmas, C7512); false:
// dev/cuda/attention.cu's ladder.
template <int HS, bool kPipelined = true>
void attention_backward_hopper(__nv_bfloat16* dqkv, void* scratch, const __nv_bfloat16* dout,
                               const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* qkv, int B, int T,
                               int NH, int KV, cudaStream_t stream) {
    using namespace attention_hopper;
    using Tr = BackwardTraits<HS>;
    constexpr bool kKeyRowsPipelined = kPipelined && HS == 64;
    static const bool once =
        (attention_allow_shared_bytes(backward_kernel<HS, true, kKeyRowsPipelined>, Tr::shared_bytes()),
         attention_allow_shared_bytes(backward_kernel<HS, false, kPipelined>, Tr::shared_bytes()), true);
    (void)once;
    float* stats = static_cast<float*>(scratch);
    attention_row_dot(stats, dout, out, B, T, NH, HS, stream, lse);
    CUtensorMap qkv_map, dout_map, stats_map;
    make_qkv_map(&qkv_map, qkv, B, T, NH, KV, HS);
    make_dout_map(&dout_map, dout, B, T, NH * HS);
    make_stats_map<HS>(&stats_map, stats, B, T, NH);
    // dK/dV: a block per key block of each key/value head; dQ: a block per query block of each query head.
    LAUNCH((backward_kernel<HS, true, kKeyRowsPipelined>), dim3(ceil_div(T, Tr::kBlockRows), KV, B), Tr::kThreads,
           Tr::shared_bytes(), stream, dqkv, stats, qkv_map, dout_map, stats_map, T, NH, KV);
    LAUNCH((backward_kernel<HS, false, kPipelined>), dim3(ceil_div(T, Tr::kBlockRows), NH, B), Tr::kThreads,
           Tr::shared_bytes(), stream, dqkv, stats, qkv_map, dout_map, stats_map, T, NH, KV);
}

// The shipped forward: 128-key tiles, no softmax/MMA overlap. kKeys 64 and kOverlapSoftmax true:
// dev/cuda/attention.cu's ladder (the overlap only with 64-key tiles, where its second S fits).
// KV key/value heads (NH % KV == 0; KV == NH: multi-head attention, qkv (B, T, 3C)).
template <int HS, bool kOverlapSoftmax = false, int kKeys = (kOverlapSoftmax ? 64 : 128)>
void attention_forward_hopper(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T, int NH,
                              int KV, cudaStream_t stream) {
    using namespace attention_hopper;
    using Tr = ForwardTraits<HS, kKeys>;
    static const bool once =
        (attention_allow_shared_bytes(forward_kernel<HS, kOverlapSoftmax, kKeys>, Tr::shared_bytes()), true);
    (void)once;
    CUtensorMap map;
    make_qkv_map(&map, qkv, B, T, NH, KV, HS);
    LAUNCH((forward_kernel<HS, kOverlapSoftmax, kKeys>), dim3(ceil_div(T, Tr::kBlockQ), NH, B), Tr::kThreads,
           Tr::shared_bytes(), stream, out, lse, map, T, NH, KV);
}
