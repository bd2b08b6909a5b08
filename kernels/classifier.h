// Fused classifier: softmax cross-entropy of the logits and its gradient, in place. For each row n < N
// of the logits (N × Vp, floatX; only the first V columns are real tokens, the padding [V, Vp) never
// enters the softmax and may hold anything):
//   losses[n]    = logsumexp(logits[n, :V]) − logits[n, target_n]                      (fp32)
//   logits[n, j] ← dloss · (softmax(logits[n, :V])_j − [j = target_n])   for j < V      (if write_dlogits)
//   logits[n, j] ← 0                                                      for V ≤ j < Vp (if write_dlogits)
// dloss is the gradient of the total loss with respect to each row's loss (loss_scale / N for a mean).
// targets: N ints in [0, V) on the device. losses: N floats on the device, or null (not wanted).
//
// One block per row, two sweeps over the row and no fp32 copy of it:
//   1. online softmax: each thread keeps a running maximum and a running sum of exp(x − max), rescaling
//      the sum when the maximum grows, so one read gives both; two block reductions combine the
//      threads (max, then the sums rescaled to the row's max) into logsumexp;
//   2. (write_dlogits) read the row again and overwrite it with the gradient.
// The second read is meant to hit L2: the block read the same row (GPT-2: Vp = 50304 bf16, 100 KB)
// just before. That holds while the rows in flight fit in L2 with room to spare: 1024 threads per
// block and 2 blocks per SM make 264 rows (26 MB) on an H100 (50 MB of L2), where 512 threads and 4
// blocks per SM would make 53 MB. The second read and the write carry streaming (evict-first) hints,
// so that finished rows leave L2 before the rows other blocks have yet to re-read.
// Per call: compulsory DRAM traffic N·Vp·sizeof(floatX) read + the same written (write_dlogits), plus
// 8N bytes of targets and losses (classifier_bytes()); about 8 FLOPs and 2 exponentials per element.
// Memory bound.
//
// Vocabulary-parallel cross-entropy: the same losses and gradient when the logits' columns are cut
// into R slices of Vs = Vp / R (tensor parallelism: slice r, columns [vocab_begin, vocab_begin + Vs)
// with vocab_begin = r·Vs, lives on rank r), so that no rank ever holds a whole row. `valid` is the
// number of real-token columns in the slice, clamp(V − vocab_begin, 0, Vs); columns [valid, Vs) are
// padding. The functions know one slice only; the trainer all-gathers the stats between the calls.
//   classifier_slice_stats     stats[n] = (m, s, t) of the slice's logits x (N × Vs), fp32:
//                              m = max_{j<valid} x[n,j], s = Σ_{j<valid} exp(x[n,j] − m) (one read,
//                              online as above), t = x[n, target_n − vocab_begin] if the slice holds
//                              the target, else 0; a slice without valid columns gives (−inf, 0, 0)
//   classifier_combine_stats   from the R slices' stats, rank-major (R, N, 3), in the order r = 0..R−1:
//                              M = max_r m_r, lse[n] = M + log Σ_r s_r·exp(m_r − M) (m_r = −inf
//                              skipped), losses[n] = lse[n] − Σ_r t_r
//   classifier_slice_gradient  in place, x[n,j] ← dloss·(exp(x[n,j] − lse[n]) − [vocab_begin + j =
//                              target_n]) for j < valid, 0 for valid ≤ j < Vs
// With R = 1 (vocab_begin 0, valid V, Vs Vp) the three calls give fused_classifier's losses and
// gradient to the bit: the same sweeps with the same block size, the one slice's sum scaled by 1.
// Per call, with S = sizeof(floatX) (targets int32; stats, lse and losses fp32):
//   classifier_slice_stats     reads N·Vs·S + 4N, writes 12N bytes;   ~4 FLOPs + 1 exp per valid element
//   classifier_combine_stats   reads 12RN, writes 4N (8N w/ losses);  ~5R FLOPs + R exp + 1 log per row
//   classifier_slice_gradient  reads N·Vs·S + 8N, writes N·Vs·S;      ~4 FLOPs + 1 exp per valid element
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/common.h"
#include "kernels/elementwise.h"

// Offset of row `row` in an (N × Vp) array: 64-bit, since N·Vp passes 2^31 (64·1024 rows × 50304).
__host__ __device__ inline size_t classifier_row_offset(int row, int Vp) { return (size_t)row * (size_t)Vp; }

// Bytes one call moves to or from DRAM at least (the figure the benchmark's bandwidth uses).
inline double classifier_bytes(int N, int Vp, bool write_dlogits) {
    const double row_bytes = (double)Vp * sizeof(floatX);
    return (double)N * (row_bytes * (write_dlogits ? 2 : 1) + sizeof(int) + sizeof(float));
}

// Folds a vector of values into a thread's running (max, sum of exp(x − max)). Masked values are
// −inf and add exp(−inf) = 0. A thread's first vector finds running_max = −inf: exp(−inf) scales
// the empty sum (0) to 0.
template <int kCount>
__device__ __forceinline__ void online_softmax_add(float& running_max, float& running_sum,
                                                   const float x[kCount]) {
    float vector_max = -INFINITY;
    for (int k = 0; k < kCount; k++) vector_max = fmaxf(vector_max, x[k]);
    const float new_max = fmaxf(running_max, vector_max);
    float sum = running_sum * __expf(running_max - new_max);
    for (int k = 0; k < kCount; k++) sum += __expf(x[k] - new_max);
    running_max = new_max;
    running_sum = sum;
}

// The two sweeps over a row x of the logits, run by every thread of a block (a multiple of 32
// threads, up to 1024), shared by fused_classifier and the vocabulary-parallel kernels.
//
// Sweep 1: the block's maximum of the columns [0, valid) and the sum of their exp(x − maximum),
// from running ones per thread over the vectors holding those columns. Every thread gets both;
// (−inf, 0) when valid is 0.
__device__ __forceinline__ void classifier_row_max_sum(const floatX* x, int valid, float& row_max,
                                                       float& row_sum) {
    constexpr int P = Packed128<floatX>::size;  // elements per 16-byte vector
    float running_max = -INFINITY, running_sum = 0.0f;
    const int real_vectors = ceil_div(valid, P);
    for (int i = threadIdx.x; i < real_vectors; i += blockDim.x) {
        const Packed128<floatX> packed = load128(x + i * P);
        float values[P];
        for (int k = 0; k < P; k++) values[k] = i * P + k < valid ? to_float(packed[k]) : -INFINITY;
        online_softmax_add<P>(running_max, running_sum, values);
    }
    row_max = block_reduce_max(running_max);
    // Threads that saw no vector (running_max = −inf) contribute 0; the others rescale to row_max.
    const float rescaled = running_max == -INFINITY ? 0.0f : running_sum * __expf(running_max - row_max);
    row_sum = block_reduce_sum(rescaled);
}

// Sweep 2: the columns [0, width) of the row overwritten with the gradient,
// dloss·(exp(x − logsumexp) − [column = target]) in the columns [0, valid), 0 in the others.
__device__ __forceinline__ void classifier_row_gradient(floatX* x, int valid, int width, int target,
                                                        float logsumexp, float dloss) {
    constexpr int P = Packed128<floatX>::size;
    for (int i = threadIdx.x; i < width / P; i += blockDim.x) {
        const Packed128<floatX> packed = load128cs(x + i * P);
        Packed128<floatX> gradient;
        for (int k = 0; k < P; k++) {
            const int column = i * P + k;
            const float probability = column < valid ? __expf(to_float(packed[k]) - logsumexp) : 0.0f;
            const float indicator = column == target ? 1.0f : 0.0f;
            gradient[k] = from_float<floatX>(column < valid ? dloss * (probability - indicator) : 0.0f);
        }
        store128_streaming(x + i * P, gradient);
    }
}

// One block per row (blockIdx.x). Any block size that is a multiple of 32, up to 1024; the launch
// bounds keep registers at 32 or fewer, so that two blocks of 1024 fit on an SM.
static __global__ void __launch_bounds__(1024, 2)
    fused_classifier_kernel(floatX* logits, float* losses, float dloss, const int* targets, int V, int Vp,
                            bool write_dlogits) {
    const int row = blockIdx.x;
    floatX* x = logits + classifier_row_offset(row, Vp);
    const int target = targets[row];
    // Read before the block reductions below, whose barriers every thread passes before writing.
    const float target_logit = threadIdx.x == 0 ? to_float(x[target]) : 0.0f;

    // Sweep 1: running max and sum over the vectors that hold real columns.
    float row_max, row_sum;
    classifier_row_max_sum(x, V, row_max, row_sum);
    const float logsumexp = row_max + logf(row_sum);
    if (threadIdx.x == 0 && losses != nullptr) losses[row] = logsumexp - target_logit;
    if (!write_dlogits) return;

    // Sweep 2: the gradient, written over the logits; the padding columns get 0.
    classifier_row_gradient(x, V, Vp, target, logsumexp, dloss);
}

// ---- host launch function
constexpr int kClassifierBlockSize = 1024;  // see the L2 note at the top

// Threads per row: kClassifierBlockSize, fewer for short rows (a multiple of 32 covering Vp).
inline int classifier_block_size(int Vp) {
    const int vectors = Vp / Packed128<floatX>::size;
    const int warps_needed = (vectors + 31) / 32;
    return warps_needed * 32 < kClassifierBlockSize ? warps_needed * 32 : kClassifierBlockSize;
}

// Losses of the N rows of logits (N × Vp, real columns [0, V)) and, when write_dlogits, their
// gradient written over the logits. Vp must be a multiple of 8 and logits 16-byte aligned.
inline void fused_classifier(floatX* logits, float* losses, float dloss, const int* targets, int N, int V,
                             int Vp, bool write_dlogits, cudaStream_t stream) {
    if (V < 1 || V > Vp || Vp % 8 != 0 || N < 0 || (uintptr_t)logits % 16 != 0) {
        fprintf(stderr,
                "fused_classifier: need 1 <= V <= Vp, Vp a multiple of 8, 16-byte aligned logits "
                "(N=%d V=%d Vp=%d)\n",
                N, V, Vp);
        exit(1);
    }
    if (N == 0) return;
    LAUNCH(fused_classifier_kernel, N, classifier_block_size(Vp), 0, stream, logits, losses, dloss, targets,
           V, Vp, write_dlogits);
    CUDA_CHECK(cudaGetLastError());
}

// ---- vocabulary-parallel cross-entropy (see the top of the file)

constexpr int kClassifierStats = 3;  // per row: (max, sum of exp(x − max), target logit)

// One block per row of the slice (blockIdx.x): fused_classifier's first sweep over the valid columns,
// and the target's logit when the slice holds it.
static __global__ void __launch_bounds__(1024, 2)
    classifier_slice_stats_kernel(float* stats, const floatX* logits, const int* targets, int vocab_begin,
                                  int valid, int Vs) {
    const int row = blockIdx.x;
    const floatX* x = logits + classifier_row_offset(row, Vs);
    float row_max, row_sum;
    classifier_row_max_sum(x, valid, row_max, row_sum);
    if (threadIdx.x != 0) return;
    // Unsigned: a target below vocab_begin wraps around and fails the test too.
    const unsigned column = (unsigned)targets[row] - (unsigned)vocab_begin;
    float* out = stats + (size_t)row * kClassifierStats;
    out[0] = row_max;
    out[1] = row_sum;
    out[2] = column < (unsigned)valid ? to_float(x[column]) : 0.0f;
}

// One thread per row: the R slices' stats combined in rank order.
static __global__ void classifier_combine_stats_kernel(float* lse, float* losses, const float* gathered, int R,
                                                int N) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    auto slice = [&](int r) { return gathered + ((size_t)r * N + row) * kClassifierStats; };
    float row_max = -INFINITY;
    for (int r = 0; r < R; r++) row_max = fmaxf(row_max, slice(r)[0]);
    float row_sum = 0.0f, target_logit = 0.0f;
    for (int r = 0; r < R; r++) {
        const float* s = slice(r);
        // The slice holding the maximum is scaled by exactly 1; empty slices (−inf) add nothing.
        if (s[0] == row_max)
            row_sum += s[1];
        else if (s[0] != -INFINITY)
            row_sum += s[1] * __expf(s[0] - row_max);
        target_logit += s[2];  // one slice holds the target, the others give 0
    }
    const float logsumexp = row_max + logf(row_sum);
    lse[row] = logsumexp;
    if (losses != nullptr) losses[row] = logsumexp - target_logit;
}

// One block per row of the slice: fused_classifier's second sweep, the target's column shifted into
// the slice (outside [0, valid) when another slice holds it).
static __global__ void __launch_bounds__(1024, 2)
    classifier_slice_gradient_kernel(floatX* logits, const float* lse, const int* targets, float dloss,
                                     int vocab_begin, int valid, int Vs) {
    const int row = blockIdx.x;
    classifier_row_gradient(logits + classifier_row_offset(row, Vs), valid, Vs, targets[row] - vocab_begin,
                            lse[row], dloss);
}

// Checks a slice's shape: 0 <= vocab_begin, 0 <= valid <= Vs, Vs a positive multiple of 8, N >= 0,
// 16-byte aligned logits.
inline void classifier_slice_check(const char* function, const floatX* logits, int N, int vocab_begin,
                                   int valid, int Vs) {
    if (N >= 0 && vocab_begin >= 0 && valid >= 0 && valid <= Vs && Vs > 0 && Vs % 8 == 0 &&
        (uintptr_t)logits % 16 == 0)
        return;
    fprintf(
        stderr,
        "%s: need vocab_begin >= 0, 0 <= valid <= Vs, Vs a positive multiple of 8, N >= 0, 16-byte aligned "
        "logits (N=%d vocab_begin=%d valid=%d Vs=%d)\n",
        function, N, vocab_begin, valid, Vs);
    exit(1);
}

// stats (N × 3 fp32) of the slice's logits (N × Vs): its max and sum of exp(x − max) over the valid
// columns, and the target's logit when the target is in [vocab_begin, vocab_begin + valid) (else 0).
// targets: N ints on the device (ids of the whole vocabulary).
inline void classifier_slice_stats(float* stats, const floatX* logits, const int* targets, int N,
                                   int vocab_begin, int valid, int Vs, cudaStream_t stream) {
    classifier_slice_check("classifier_slice_stats", logits, N, vocab_begin, valid, Vs);
    if (N == 0) return;
    LAUNCH(classifier_slice_stats_kernel, N, classifier_block_size(Vs), 0, stream, stats, logits, targets,
           vocab_begin, valid, Vs);
    CUDA_CHECK(cudaGetLastError());
}

// lse (N fp32) and, unless null, losses (N fp32) from gathered: the R slices' stats, (R, N, 3) fp32.
inline void classifier_combine_stats(float* lse, float* losses, const float* gathered, int R, int N,
                                     cudaStream_t stream) {
    if (R < 1 || N < 0) {
        fprintf(stderr, "classifier_combine_stats: need R >= 1 and N >= 0 (R=%d N=%d)\n", R, N);
        exit(1);
    }
    if (N == 0) return;
    const int threads = 256;
    LAUNCH(classifier_combine_stats_kernel, ceil_div(N, threads), threads, 0, stream, lse, losses, gathered,
           R, N);
    CUDA_CHECK(cudaGetLastError());
}

// The slice's logits (N × Vs) overwritten with their gradient: dloss·(exp(x − lse) − onehot(target)) in
// the valid columns, 0 in the padding. lse: N fp32 from classifier_combine_stats.
inline void classifier_slice_gradient(floatX* logits, const float* lse, const int* targets, float dloss,
                                      int N, int vocab_begin, int valid, int Vs, cudaStream_t stream) {
    classifier_slice_check("classifier_slice_gradient", logits, N, vocab_begin, valid, Vs);
    if (N == 0) return;
    LAUNCH(classifier_slice_gradient_kernel, N, classifier_block_size(Vs), 0, stream, logits, lse, targets,
           dloss, vocab_begin, valid, Vs);
    CUDA_CHECK(cudaGetLastError());
}

// ---- the mean loss, on the device (the trainer reads it back once per optimizer step, not per
// micro-step): mean = (float)(Σ_n losses[n] / N), the sum in double over a fixed order (each of 1024
// threads sums its strided rows in order, then a fixed tree over the threads), written to *mean; and
// unless running_sum is null, *running_sum += mean / divisor and *running_rounded = (float)*running_sum
// (a step's mean over its micro-steps, divisor = micro-steps). One block; reads 4N bytes.
constexpr int kLossMeanThreads = 1024;
static __global__ void __launch_bounds__(kLossMeanThreads)
    loss_mean_kernel(float* mean, double* running_sum, float* running_rounded, const float* losses, int N,
                     double divisor) {
    __shared__ double sums[kLossMeanThreads];
    double sum = 0;
    for (int n = threadIdx.x; n < N; n += kLossMeanThreads) sum += (double)losses[n];
    sums[threadIdx.x] = sum;
    __syncthreads();
    for (int stride = kLossMeanThreads / 2; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x != 0) return;
    const float m = (float)(sums[0] / N);
    *mean = m;
    if (running_sum == nullptr) return;
    *running_sum += (double)m / divisor;
    *running_rounded = (float)*running_sum;
}

inline void loss_mean(float* mean, double* running_sum, float* running_rounded, const float* losses, int N,
                      double divisor, cudaStream_t stream) {
    if (N < 1 || divisor <= 0) {
        fprintf(stderr, "loss_mean: need N >= 1 and divisor > 0 (N=%d divisor=%g)\n", N, divisor);
        exit(1);
    }
    LAUNCH(loss_mean_kernel, 1, kLossMeanThreads, 0, stream, mean, running_sum, running_rounded, losses, N,
           divisor);
    CUDA_CHECK(cudaGetLastError());
}
