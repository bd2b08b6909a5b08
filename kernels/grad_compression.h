// Gradient compression for data parallelism: what each rank sends instead of its fp32 gradients, and
// what it makes of what it receives. Three methods, each with error feedback: the part of the
// gradient a step's compression drops is kept in a per-rank fp32 residual e and added to the next
// step's gradient, so that nothing is lost for good, only delayed (Seide et al. 2014; Karimireddy et
// al. 2019). The CPU reference of every operation is cpu/grad_compression.h; what a rank sends per
// step is parallel/plan/compression_cost.h.
//
// ---- int8 block quantisation. x = g + e; per block of kCompressionBlock = 256 consecutive elements
//   scale = max|x| / 127            (fp32; 0 for an all-zero block)
//   q     = round(x / scale)        (round half away from zero, an int8 in [−127, 127]; 0 where scale is 0)
//   e     = x − scale·q             (one rounding: fmaf(−scale, q, x))
// and the receiver's dequantisation y = scale·q. Between the ranks, in two stages: each rank cuts its
// q and scales into R shards at block boundaries and sends shard k to rank k (an all-to-all: a
// reduce-scatter in int8); rank k sums what the R ranks sent for its shard into fp32 and requantises
// the sum (int8_sum_requantise), and the ranks all-gather the requantised shards, which every rank
// then dequantises. The second stage's error feedback is optional: pass a residual (one per shard,
// fp32, kept by the rank that owns the shard) to carry its rounding to the next step, or null to drop
// it (its error is then at most scale/2 per element, about 0.4% of the block's largest sum).
//
// ---- sign (1-bit) compression. x = g + e; per block of 256
//   scale = ‖x‖₁ / count            (count: the block's elements, 256 except in a partial last block)
//   bit   = x ≥ 0                   (packed 32 to a uint32: bit j of word w is element 32w + j)
//   e     = x − scale·sign(x)       (sign(x) = +1 where x ≥ 0, −1 elsewhere: sign(0) = sign(−0) = +1)
// The receiver's decompression is y = scale·sign; sign_average adds R ranks' decompressed blocks in
// rank order and multiplies the total by a factor (1/R for the mean). The two stages are those of
// int8: the average of a shard is compressed again with sign_compress (its residual, per shard, or
// null for none) before the all-gather.
//
// ---- PowerSGD (Vogels et al. 2019), rank r (1..32), for one gradient matrix M (n×m, fp32, row-major):
//   M = g + e                       (error_feedback_add)
//   P = M·Q                         (n×r; Q: m×r, the previous step's, or random at the start)
//   (all-reduce P)                  then orthogonalise P's columns (Gram-Schmidt, two classical passes)
//   Q = Mᵀ·P                        (m×r)
//   (all-reduce Q)                  then M̂ = P·Qᵀ, the rank-r approximation every rank applies,
//   e = M − M̂                       (powersgd_reconstruct writes M̂ and e, either or both)
//
// Conventions. Every array is on the device, fp32 unless said otherwise; n (elements) is a size_t.
// The blockwise compression kernels (int8_quantise, int8_sum_requantise, sign_compress) give each
// compression block to one warp, lane l on its elements l, l + 32, ..., l + 224, and reduce with warp
// shuffles alone (no shared memory, no barrier); element-wise kernels run one thread per element.
// Every kernel is deterministic (a fixed order of additions that does not depend on the device or the
// grid), and the int8 kernels, the sign kernels given the scales (sign_compress adds ‖x‖₁ in another
// order than the reference: see sign_compress_kernel), and powersgd_reconstruct do exactly the fp32
// operations of cpu/grad_compression.h (explicit fmaf where a product meets a sum, so a compiler
// cannot fuse differently). Non-finite values are not hidden: a block holding an inf or NaN gets a NaN
// scale (int8: and q = 0, e = x), so whatever is reduced from it is NaN and the trainer's non-finite
// check sees it (such a step should also reset the residual).
//
// Bytes moved per call, n elements (B = n/256 scales; "e" only where a residual is passed). The
// blockwise kernels read and write each element once, a warp instruction at a time: 128 bytes of fp32
// (g, e, sum), 32 bytes of int8 (q), one 4-byte sign word, one scale per warp.
//   int8_quantise         reads g 4n (+ e 4n), writes q n, scales 4B (+ e 4n)      13n + n/64 with e
//   int8_dequantise       reads q n, scales 4B, writes y 4n                          5n + n/64
//   int8_sum_requantise   reads R·(n + 4B), writes q n, scales 4B (+ sum 4n) (+ e 8n)
//   sign_compress         reads g 4n (+ e 4n), writes bits n/8, scales 4B (+ e 4n)  12.14n with e
//   sign_decompress       reads bits n/8, scales 4B, writes y 4n                     4.14n
//   sign_average          reads R·(n/8 + 4B), writes y 4n
//   error_feedback_add    reads g, e 8n, writes x 4n                                 12n
//   powersgd_project_rows     reads M 4nm, Q 4mr (from cache), writes P 4nr; 2nmr FLOPs
//   powersgd_orthogonalise    one block: about 2r² column reads and 3r column writes of P (4n bytes
//                             each, mostly from L2: P is at most 50304·32·4 = 6.4 MB), 4r²n FLOPs;
//                             3r − 2 block reductions (of up to r values each, 2 barriers each)
//   powersgd_project_columns  reads M 4nm, P 4nr, writes Q 4mr; 2nmr FLOPs
//   powersgd_reconstruct      reads P, Q (+ M 4nm for e), writes M̂ 4nm and/or e 4nm; 2nmr FLOPs
// All memory bound on an H100 except the PowerSGD products at large r (2r FLOPs per 4 bytes of M).
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "kernels/common.h"
#include "kernels/elementwise.h"

constexpr int kCompressionBlock = 256;                      // elements sharing one scale
constexpr int kSignWordsPerBlock = kCompressionBlock / 32;  // uint32 words of a block (a shard of S blocks: 8·S)
constexpr int kPowerSgdMaxRank = 32;

// Scales (compression blocks) and packed sign words of n elements.
inline size_t compression_blocks(size_t n) { return (n + kCompressionBlock - 1) / kCompressionBlock; }
inline size_t sign_words(size_t n) { return (n + 31) / 32; }

// ---- the layout of the blockwise compression kernels (int8_quantise, int8_sum_requantise,
// sign_compress): one warp per compression block, lane l on its elements l, l + 32, ..., l + 224
// (kElementsPerLane = 8: element k of a lane is the lane's bit of the block's sign word k, and each of
// the eight is one coalesced access for the warp: 128 bytes of fp32, 32 of int8). A block's maximum or
// sum is a warp reduction (shuffles only: no shared memory, no barrier), and a CUDA block of
// kCompressionThreads = 256 threads handles kCompressionWarps = 8 consecutive compression blocks.
constexpr int kElementsPerLane = kCompressionBlock / 32;
constexpr int kCompressionWarps = 8;
constexpr int kCompressionThreads = 32 * kCompressionWarps;
static_assert(kElementsPerLane == kSignWordsPerBlock, "a lane's element k lies in the block's sign word k");

// The compression block of this thread's warp: its index, its first element, and its element count
// (256, fewer in a partial last block).
struct WarpBlock {
    size_t index, first;
    int count;
};
// This warp's block; false for a warp past the last one (the whole warp then has nothing to do).
__device__ __forceinline__ bool warp_compression_block(size_t n, WarpBlock* block) {
    block->index = (size_t)blockIdx.x * kCompressionWarps + threadIdx.x / 32;
    block->first = block->index * kCompressionBlock;
    if (block->first >= n) return false;
    const size_t left = n - block->first;
    block->count = left < (size_t)kCompressionBlock ? (int)left : kCompressionBlock;
    return true;
}

// The place of this lane's element k (0..7) within its compression block: 32k + lane.
__device__ __forceinline__ int lane_element(int k) { return 32 * k + (int)(threadIdx.x % 32); }

// x = g + e (e null: x = g) of this lane's elements; 0 past the block's end, which leaves a maximum
// or a sum of magnitudes unchanged.
__device__ __forceinline__ void load_with_residual(float x[kElementsPerLane], const float* grads,
                                                   const float* residual, const WarpBlock& block) {
#pragma unroll
    for (int k = 0; k < kElementsPerLane; k++) {
        const int j = lane_element(k);
        const size_t i = block.first + j;
        x[k] = j >= block.count ? 0.0f : residual != nullptr ? grads[i] + residual[i] : grads[i];
    }
}

// |x| for a block's maximum or sum, with a non-finite x counting as +inf (fabsf(NaN) would be
// dropped by fmaxf).
__device__ __forceinline__ float magnitude_of(float x) {
    const float a = fabsf(x);
    return a <= FLT_MAX ? a : INFINITY;
}

// One element's int8 quantisation, given the block's scale.
struct Int8Element {
    int8_t q;
    float residual;  // x − scale·q
};
__device__ __forceinline__ Int8Element int8_quantise_value(float x, float scale) {
    if (!(scale > 0.0f)) return {0, x};  // all zeros (or too small to scale), or non-finite (NaN)
    const float t = fminf(fmaxf(roundf(x / scale), -127.0f), 127.0f);
    return {(int8_t)t, fmaf(-scale, t, x)};
}

// The block's scale, max|x|/127 (every lane gets it), NaN when an element is not finite. A maximum is
// exact in any order: these are the CPU reference's bits.
__device__ __forceinline__ float int8_block_scale(const float x[kElementsPerLane]) {
    float largest = 0.0f;
#pragma unroll
    for (int k = 0; k < kElementsPerLane; k++) largest = fmaxf(largest, magnitude_of(x[k]));
    largest = warp_reduce_max(largest);
    return largest <= FLT_MAX ? largest / 127.0f : NAN;
}

// The warp's block quantised: each lane writes its elements' q (and residual), lane 0 the scale.
__device__ __forceinline__ void int8_store_block(int8_t* q, float* scales, float* residual,
                                                 const float x[kElementsPerLane], const WarpBlock& block) {
    const float scale = int8_block_scale(x);
#pragma unroll
    for (int k = 0; k < kElementsPerLane; k++) {
        const int j = lane_element(k);
        if (j >= block.count) continue;
        const Int8Element e = int8_quantise_value(x[k], scale);
        q[block.first + j] = e.q;
        if (residual != nullptr) residual[block.first + j] = e.residual;
    }
    if (threadIdx.x % 32 == 0) scales[block.index] = scale;
}

// ---- int8 kernels

static __global__ void __launch_bounds__(kCompressionThreads)
    int8_quantise_kernel(int8_t* q, float* scales, float* residual, const float* grads, size_t n) {
    WarpBlock block;
    if (!warp_compression_block(n, &block)) return;
    float x[kElementsPerLane];
    load_with_residual(x, grads, residual, block);
    int8_store_block(q, scales, residual, x, block);
}

static __global__ void int8_dequantise_kernel(float* out, const int8_t* q, const float* scales, size_t n) {
    const size_t i = global_thread_index();
    if (i < n) out[i] = scales[i / kCompressionBlock] * (float)q[i];
}

// Rank r's block of element i is q_in[r·q_stride + i] with scale scales_in[r·scale_stride + i/256].
// sum = factor · Σ_r scale_r·q_r, added in rank order (an fmaf per rank from 0), then requantised.
static __global__ void __launch_bounds__(kCompressionThreads)
    int8_sum_requantise_kernel(int8_t* q_out, float* scales_out, float* residual, float* sum_out,
                               const int8_t* q_in, size_t q_stride, const float* scales_in, size_t scale_stride,
                               int ranks, size_t n, float factor) {
    WarpBlock block;
    if (!warp_compression_block(n, &block)) return;
    float sum[kElementsPerLane];
#pragma unroll
    for (int k = 0; k < kElementsPerLane; k++) sum[k] = 0.0f;
    for (int r = 0; r < ranks; r++) {
        const float scale = scales_in[r * scale_stride + block.index];
        const int8_t* q_rank = q_in + r * q_stride + block.first;
#pragma unroll
        for (int k = 0; k < kElementsPerLane; k++)
            if (lane_element(k) < block.count) sum[k] = fmaf(scale, (float)q_rank[lane_element(k)], sum[k]);
    }
    float x[kElementsPerLane];
#pragma unroll
    for (int k = 0; k < kElementsPerLane; k++) {
        const int j = lane_element(k);
        const bool valid = j < block.count;
        x[k] = valid ? __fmul_rn(factor, sum[k]) : 0.0f;  // not fused with the residual's addition below
        if (valid && sum_out != nullptr) sum_out[block.first + j] = x[k];
        if (valid && residual != nullptr) x[k] += residual[block.first + j];
    }
    int8_store_block(q_out, scales_out, residual, x, block);
}

// ---- sign kernels

// ‖x‖₁ is added in a fixed order: each lane its magnitudes k = 0..7 from 0, then the 32 lanes' sums
// by warp_reduce_sum's butterfly (offsets 16, 8, 4, 2, 1). Sign word k of the block is one ballot over
// the lanes' elements k: bit l is element 32k + l, x ≥ 0 (false past the end).
static __global__ void __launch_bounds__(kCompressionThreads)
    sign_compress_kernel(uint32_t* bits, float* scales, float* residual, const float* grads, size_t n) {
    WarpBlock block;
    if (!warp_compression_block(n, &block)) return;
    float x[kElementsPerLane];
    load_with_residual(x, grads, residual, block);
    float lane_sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kElementsPerLane; k++) lane_sum += magnitude_of(x[k]);
    const float l1 = warp_reduce_sum(lane_sum);
    // A non-finite element made l1 infinite; its scale is NaN, not inf/count.
    const float scale = l1 <= FLT_MAX ? l1 / (float)block.count : NAN;
#pragma unroll
    for (int k = 0; k < kElementsPerLane; k++) {
        const int j = lane_element(k);
        const bool valid = j < block.count;
        const uint32_t word = __ballot_sync(0xffffffffu, valid && x[k] >= 0.0f);
        if (threadIdx.x % 32 == 0 && valid) bits[block.index * kSignWordsPerBlock + k] = word;  // the word exists
        if (valid && residual != nullptr) residual[block.first + j] = x[k] >= 0.0f ? x[k] - scale : x[k] + scale;
    }
    if (threadIdx.x % 32 == 0) scales[block.index] = scale;
}

// ±scale of element i from its packed bit.
__device__ __forceinline__ float signed_scale(const uint32_t* bits, const float* scales, size_t i) {
    const float scale = scales[i / kCompressionBlock];
    return (bits[i / 32] >> (i % 32)) & 1u ? scale : -scale;
}

static __global__ void sign_decompress_kernel(float* out, const uint32_t* bits, const float* scales, size_t n) {
    const size_t i = global_thread_index();
    if (i < n) out[i] = signed_scale(bits, scales, i);
}

// out = factor · Σ_r ±scale_r, in rank order; rank r's words at bits + r·word_stride, its scales at
// scales + r·scale_stride.
static __global__ void sign_average_kernel(float* out, const uint32_t* bits, size_t word_stride, const float* scales,
                                           size_t scale_stride, int ranks, size_t n, float factor) {
    const size_t i = global_thread_index();
    if (i >= n) return;
    float sum = 0.0f;
    for (int r = 0; r < ranks; r++) sum += signed_scale(bits + r * word_stride, scales + r * scale_stride, i);
    out[i] = factor * sum;
}

// ---- error feedback for PowerSGD (and any method that adds the residual in its own pass)

static __global__ void error_feedback_add_kernel(float* x, const float* grads, const float* residual, size_t n) {
    const size_t i = global_thread_index();
    if (i < n) x[i] = grads[i] + residual[i];
}

// ---- PowerSGD kernels. A rank r is a run-time value up to kPowerSgdMaxRank: the loops run over
// all 32 slots (unrolled, so the accumulators stay in registers) and skip those at or past r.

// P = M·Q: one warp per row of M. Lane l adds M[i, j]·Q[j, :] for j = l, l + 32, ... (reads of M's
// row coalesced), then each of the r sums is a warp reduction, and lane k writes P[i, k].
constexpr int kProjectRowsBlock = 256;  // 8 rows per block
static __global__ void __launch_bounds__(kProjectRowsBlock)
    powersgd_project_rows_kernel(float* P, const float* M, const float* Q, int n, int m, int r) {
    const int lane = threadIdx.x % 32;
    const size_t row = (size_t)blockIdx.x * (kProjectRowsBlock / 32) + threadIdx.x / 32;
    if (row >= (size_t)n) return;  // the whole warp: it works on one row
    float acc[kPowerSgdMaxRank];
#pragma unroll
    for (int k = 0; k < kPowerSgdMaxRank; k++) acc[k] = 0.0f;
    const float* m_row = M + row * m;
    for (int j = lane; j < m; j += 32) {
        const float v = m_row[j];
        const float* q_row = Q + (size_t)j * r;
#pragma unroll
        for (int k = 0; k < kPowerSgdMaxRank; k++)
            if (k < r) acc[k] = fmaf(v, q_row[k], acc[k]);
    }
    float mine = 0.0f;
#pragma unroll
    for (int k = 0; k < kPowerSgdMaxRank; k++) {
        if (k >= r) break;
        const float total = warp_reduce_sum(acc[k]);
        if (lane == k) mine = total;
    }
    if (lane < r) P[row * r + lane] = mine;
}

// Q = Mᵀ·P: a block per 32 columns of M, lane l on column l of the tile; warp w adds the rows
// w, w + 8, w + 16, ... (each row's 32 columns one coalesced read), then the 8 warps' sums are added
// in warp order through shared memory.
constexpr int kProjectColumnsWarps = 8;
static __global__ void __launch_bounds__(kProjectColumnsWarps * 32)
    powersgd_project_columns_kernel(float* Q, const float* M, const float* P, int n, int m, int r) {
    __shared__ float partial[kProjectColumnsWarps][32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int column = blockIdx.x * 32 + lane;
    float acc[kPowerSgdMaxRank];
#pragma unroll
    for (int k = 0; k < kPowerSgdMaxRank; k++) acc[k] = 0.0f;
    if (column < m) {
        for (size_t i = warp; i < (size_t)n; i += kProjectColumnsWarps) {
            const float v = M[i * m + column];
            const float* p_row = P + i * r;
#pragma unroll
            for (int k = 0; k < kPowerSgdMaxRank; k++)
                if (k < r) acc[k] = fmaf(v, p_row[k], acc[k]);
        }
    }
#pragma unroll
    for (int k = 0; k < kPowerSgdMaxRank; k++) {
        if (k >= r) break;  // r is the same for the whole block: every thread reaches the barriers
        partial[warp][lane] = acc[k];
        __syncthreads();
        if (warp == 0 && column < m) {
            float sum = 0.0f;
            for (int w = 0; w < kProjectColumnsWarps; w++) sum += partial[w][lane];
            Q[(size_t)column * r + k] = sum;
        }
        __syncthreads();
    }
}

// Orthonormalises P's r columns in place (n×r, row-major), one block: Gram-Schmidt, column by
// column, with the projections on the earlier columns removed twice ("twice is enough": the second
// pass removes what fp32 rounding left of the first, so the columns stay orthogonal to ~1e-7 even
// when P is ill-conditioned). Each pass is classical Gram-Schmidt: column k's dot products with all
// the earlier columns are measured in one sweep over the rows and reduced together, then removed
// together in a second sweep. Two classical passes ("CGS2") are as stable as two modified ones, and a
// column costs 3 block reductions (the first pass's dot products with its length, the second pass's,
// its remainder's length) where modified Gram-Schmidt, which removes each projection before it
// measures the next, needs 2k + 2 for column k. A column whose remainder is at most kDependentColumn
// of its original length lies (to fp32 precision) in the span of the earlier ones; it becomes 0
// rather than a normalised rounding error, so that P·Pᵀ stays a projection (the approximation then
// has fewer than r directions, and the residual keeps the rest). A zero column stays 0; a NaN spreads
// to the columns after it.
// Thread t owns rows t, t + blockDim, ...: it alone reads and writes them, so only the dot products
// (block reductions) need the threads to meet. The block has a thread per row, in whole warps, up to
// kOrthogonaliseBlock (orthogonalise_threads): a small P leaves no idle warps waiting at every
// barrier, and the order of additions is still fixed by n alone.
constexpr int kOrthogonaliseBlock = 1024;
constexpr float kDependentColumn = 1e-4f;

// dots[c] = Σ_i P[i, k]·P[i, first + c] for c in [0, count), count ≤ 32: one sweep over the rows and
// one block-wide reduction of the whole vector. dots is in shared memory: every thread reads it after
// the call, until it calls again. The order of additions is fixed: each thread its rows in order (fmaf
// from 0), each warp its lanes' sums by warp_reduce_sum's butterfly, then thread c adds the warps'
// sums of value c in warp order. Every thread of the block must call it (it meets them at two barriers).
__device__ __forceinline__ void column_dots(const float* P, int n, int r, int k, int first, int count, float* dots) {
    __shared__ float warp_sums[kOrthogonaliseBlock / 32][kPowerSgdMaxRank];
    float sums[kPowerSgdMaxRank];
#pragma unroll
    for (int c = 0; c < kPowerSgdMaxRank; c++) sums[c] = 0.0f;
    for (size_t i = threadIdx.x; i < (size_t)n; i += blockDim.x) {
        const float* row = P + i * r;
        const float v = row[k];
#pragma unroll
        for (int c = 0; c < kPowerSgdMaxRank; c++)
            if (c < count) sums[c] = fmaf(v, row[first + c], sums[c]);
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int c = 0; c < kPowerSgdMaxRank; c++) {
        if (c >= count) break;  // count is the same for the whole block
        const float warp_sum = warp_reduce_sum(sums[c]);
        if (lane == 0) warp_sums[warp][c] = warp_sum;
    }
    // The previous call's readers of warp_sums were done before its second barrier, and every reader
    // of its dots is done before this barrier.
    __syncthreads();
    if ((int)threadIdx.x < count) {
        float total = 0.0f;
        for (int w = 0; w < (int)blockDim.x / 32; w++) total += warp_sums[w][threadIdx.x];
        dots[threadIdx.x] = total;
    }
    __syncthreads();
}

// P[i, k] −= Σ_{j<k} dots[j]·P[i, j] over this thread's rows, the projections removed in order j = 0..k−1.
__device__ __forceinline__ void remove_projections(float* P, int n, int r, int k, const float* dots) {
    for (size_t i = threadIdx.x; i < (size_t)n; i += blockDim.x) {
        float* row = P + i * r;
        float v = row[k];
#pragma unroll
        for (int j = 0; j < kPowerSgdMaxRank; j++)
            if (j < k) v = fmaf(-dots[j], row[j], v);
        row[k] = v;
    }
}

static __global__ void __launch_bounds__(kOrthogonaliseBlock) powersgd_orthogonalise_kernel(float* P, int n, int r) {
    __shared__ float dots[kPowerSgdMaxRank];  // column_dots' results
    for (int k = 0; k < r; k++) {
        column_dots(P, n, r, k, 0, k + 1, dots);  // with the earlier columns, and with itself: dots[k]
        const float length = sqrtf(dots[k]);
        float remainder = length;  // column 0 has nothing to remove
        if (k > 0) {
            remove_projections(P, n, r, k, dots);
            column_dots(P, n, r, k, 0, k, dots);  // the second pass: what rounding left
            remove_projections(P, n, r, k, dots);
            column_dots(P, n, r, k, k, 1, dots);  // with itself: what is left of its length
            remainder = sqrtf(dots[0]);
        }
        const bool dependent = remainder <= kDependentColumn * length;  // false for NaN: it propagates
        for (size_t i = threadIdx.x; i < (size_t)n; i += blockDim.x)
            P[i * r + k] = dependent ? 0.0f : P[i * r + k] / remainder;
    }
}

// out = P·Qᵀ and residual = M − P·Qᵀ (either may be null; out may be M itself): one thread per
// element, the r products added in order k = 0..r−1 by fmaf from 0.
static __global__ void powersgd_reconstruct_kernel(float* out, float* residual, const float* M, const float* P,
                                                   const float* Q, int n, int m, int r) {
    const size_t index = global_thread_index();
    if (index >= (size_t)n * m) return;
    const size_t i = index / m, j = index % m;
    float approximation = 0.0f;
    for (int k = 0; k < r; k++) approximation = fmaf(P[i * r + k], Q[j * r + k], approximation);
    if (residual != nullptr) residual[index] = M[index] - approximation;  // before out overwrites M
    if (out != nullptr) out[index] = approximation;
}

// ---- host launch functions. Every one runs on `stream` and returns at once.

constexpr int kElementwiseThreads = 256;  // the block of the one-thread-per-element kernels (compression)

// CUDA blocks of a one-warp-per-compression-block launch (8 compression blocks each), checked against
// the grid's limit.
inline unsigned compression_grid(size_t n, const char* caller) {
    const size_t blocks = (compression_blocks(n) + kCompressionWarps - 1) / kCompressionWarps;
    if (blocks > 2147483647ull) {
        fprintf(stderr, "%s: %zu elements are too many for one launch\n", caller, n);
        exit(1);
    }
    return (unsigned)blocks;
}

// q[0, n) (int8) and scales[0, compression_blocks(n)) from grads[0, n) + residual; residual (may be
// null: no error feedback) becomes what the quantisation dropped. residual and grads must not overlap.
inline void int8_quantise(int8_t* q, float* scales, float* residual, const float* grads, size_t n,
                          cudaStream_t stream) {
    if (n == 0) return;
    LAUNCH(int8_quantise_kernel, compression_grid(n, "int8_quantise"), kCompressionThreads, 0, stream, q, scales,
           residual, grads, n);
    CUDA_CHECK(cudaGetLastError());
}

// out[0, n) = scale·q.
inline void int8_dequantise(float* out, const int8_t* q, const float* scales, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    LAUNCH(int8_dequantise_kernel, blocks_for(n, kElementwiseThreads), kElementwiseThreads, 0, stream, out, q, scales,
           n);
    CUDA_CHECK(cudaGetLastError());
}

// The receiving side of the reduce-scatter: `ranks` ranks' int8 blocks of one shard of n elements
// (rank r's q at q_in + r·q_stride, its scales at scales_in + r·scale_stride; q_stride = n and
// scale_stride = compression_blocks(n) for arrays laid end to end), summed into fp32 and multiplied
// by factor (1 for the sum, 1/ranks for the mean): sum_out (null: not wanted). That value, plus
// residual where one is given (the second stage's error feedback, which then keeps the new rounding
// error), is requantised into q_out and scales_out for the all-gather.
inline void int8_sum_requantise(int8_t* q_out, float* scales_out, float* residual, float* sum_out,
                                const int8_t* q_in, size_t q_stride, const float* scales_in, size_t scale_stride,
                                int ranks, size_t n, float factor, cudaStream_t stream) {
    if (ranks < 1) {
        fprintf(stderr, "int8_sum_requantise: ranks must be >= 1 (got %d)\n", ranks);
        exit(1);
    }
    if (n == 0) return;
    LAUNCH(int8_sum_requantise_kernel, compression_grid(n, "int8_sum_requantise"), kCompressionThreads, 0, stream,
           q_out, scales_out, residual, sum_out, q_in, q_stride, scales_in, scale_stride, ranks, n, factor);
    CUDA_CHECK(cudaGetLastError());
}

// bits[0, sign_words(n)) and scales[0, compression_blocks(n)) from grads + residual (residual may be
// null); residual becomes x − scale·sign(x). The last word's bits past n are 0.
inline void sign_compress(uint32_t* bits, float* scales, float* residual, const float* grads, size_t n,
                          cudaStream_t stream) {
    if (n == 0) return;
    LAUNCH(sign_compress_kernel, compression_grid(n, "sign_compress"), kCompressionThreads, 0, stream, bits, scales,
           residual, grads, n);
    CUDA_CHECK(cudaGetLastError());
}

// out[0, n) = ±scale.
inline void sign_decompress(float* out, const uint32_t* bits, const float* scales, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    LAUNCH(sign_decompress_kernel, blocks_for(n, kElementwiseThreads), kElementwiseThreads, 0, stream, out, bits,
           scales, n);
    CUDA_CHECK(cudaGetLastError());
}

// out[0, n) = factor · Σ_r ±scale_r over `ranks` ranks (rank r's words at bits + r·word_stride, its
// scales at scales + r·scale_stride; sign_words(n) and compression_blocks(n) for arrays end to end).
inline void sign_average(float* out, const uint32_t* bits, size_t word_stride, const float* scales,
                         size_t scale_stride, int ranks, size_t n, float factor, cudaStream_t stream) {
    if (ranks < 1) {
        fprintf(stderr, "sign_average: ranks must be >= 1 (got %d)\n", ranks);
        exit(1);
    }
    if (n == 0) return;
    LAUNCH(sign_average_kernel, blocks_for(n, kElementwiseThreads), kElementwiseThreads, 0, stream, out, bits,
           word_stride, scales, scale_stride, ranks, n, factor);
    CUDA_CHECK(cudaGetLastError());
}

// x[0, n) = grads + residual (x may be grads itself).
inline void error_feedback_add(float* x, const float* grads, const float* residual, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    LAUNCH(error_feedback_add_kernel, blocks_for(n, kElementwiseThreads), kElementwiseThreads, 0, stream, x, grads,
           residual, n);
    CUDA_CHECK(cudaGetLastError());
}

// The shape checks every PowerSGD call makes: n, m ≥ 1, n·m and n·r within the kernels' indexing,
// 1 ≤ r ≤ 32.
inline void powersgd_check_shape(int n, int m, int r, const char* caller) {
    if (n < 1 || m < 1 || r < 1 || r > kPowerSgdMaxRank) {
        fprintf(stderr, "%s: need n, m >= 1 and 1 <= r <= %d (n=%d m=%d r=%d)\n", caller, kPowerSgdMaxRank, n, m, r);
        exit(1);
    }
    if ((size_t)n * m > (size_t)kElementwiseThreads * 2147483647ull) {
        fprintf(stderr, "%s: a %dx%d matrix is too large for one launch\n", caller, n, m);
        exit(1);
    }
}

// P (n×r) = M·Q, M n×m, Q m×r.
inline void powersgd_project_rows(float* P, const float* M, const float* Q, int n, int m, int r, cudaStream_t stream) {
    powersgd_check_shape(n, m, r, "powersgd_project_rows");
    LAUNCH(powersgd_project_rows_kernel, ceil_div(n, kProjectRowsBlock / 32), kProjectRowsBlock, 0, stream, P, M, Q,
           n, m, r);
    CUDA_CHECK(cudaGetLastError());
}

// The orthogonalisation's block for P of n rows: a thread per row, rounded up to whole warps, at most
// kOrthogonaliseBlock.
inline int orthogonalise_threads(int n) {
    return n >= kOrthogonaliseBlock ? kOrthogonaliseBlock : 32 * ceil_div(n, 32);
}

// P's r columns orthonormal (or 0 where dependent), in place.
inline void powersgd_orthogonalise(float* P, int n, int r, cudaStream_t stream) {
    powersgd_check_shape(n, 1, r, "powersgd_orthogonalise");
    LAUNCH(powersgd_orthogonalise_kernel, 1, orthogonalise_threads(n), 0, stream, P, n, r);
    CUDA_CHECK(cudaGetLastError());
}

// Q (m×r) = Mᵀ·P, M n×m, P n×r.
inline void powersgd_project_columns(float* Q, const float* M, const float* P, int n, int m, int r,
                                     cudaStream_t stream) {
    powersgd_check_shape(n, m, r, "powersgd_project_columns");
    LAUNCH(powersgd_project_columns_kernel, ceil_div(m, 32), kProjectColumnsWarps * 32, 0, stream, Q, M, P, n, m, r);
    CUDA_CHECK(cudaGetLastError());
}

// out = P·Qᵀ (the approximation the ranks apply; may be M) and residual = M − P·Qᵀ (the new error
// feedback); either may be null (M is read only for the residual).
inline void powersgd_reconstruct(float* out, float* residual, const float* M, const float* P, const float* Q, int n,
                                 int m, int r, cudaStream_t stream) {
    powersgd_check_shape(n, m, r, "powersgd_reconstruct");
    LAUNCH(powersgd_reconstruct_kernel, blocks_for((size_t)n * m, kElementwiseThreads), kElementwiseThreads, 0, stream,
           out, residual, M, P, Q, n, m, r);
    CUDA_CHECK(cudaGetLastError());
}
