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

// One block per row (blockIdx.x). Any block size that is a multiple of 32, up to 1024; the launch
// bounds keep registers at 32 or fewer, so that two blocks of 1024 fit on an SM.
__global__ void __launch_bounds__(1024, 2)
    fused_classifier_kernel(floatX* logits, float* losses, float dloss, const int* targets, int V, int Vp,
                            bool write_dlogits) {
    constexpr int P = Packed128<floatX>::size;  // elements per 16-byte vector
    const int row = blockIdx.x;
    floatX* x = logits + classifier_row_offset(row, Vp);
    const int target = targets[row];
    // Read before the block reductions below, whose barriers every thread passes before writing.
    const float target_logit = threadIdx.x == 0 ? to_float(x[target]) : 0.0f;

    // Sweep 1: running max and sum over the vectors that hold real columns.
    float running_max = -INFINITY, running_sum = 0.0f;
    const int real_vectors = ceil_div(V, P);
    for (int i = threadIdx.x; i < real_vectors; i += blockDim.x) {
        const Packed128<floatX> packed = load128(x + i * P);
        float values[P];
        for (int k = 0; k < P; k++) values[k] = i * P + k < V ? to_float(packed[k]) : -INFINITY;
        online_softmax_add<P>(running_max, running_sum, values);
    }
    const float row_max = block_reduce_max(running_max);
    // Threads that saw no vector (running_max = −inf) contribute 0; the others rescale to row_max.
    const float rescaled = running_max == -INFINITY ? 0.0f : running_sum * __expf(running_max - row_max);
    const float row_sum = block_reduce_sum(rescaled);
    const float logsumexp = row_max + logf(row_sum);
    if (threadIdx.x == 0 && losses != nullptr) losses[row] = logsumexp - target_logit;
    if (!write_dlogits) return;

    // Sweep 2: the gradient, written over the logits; the padding columns get 0.
    for (int i = threadIdx.x; i < Vp / P; i += blockDim.x) {
        const Packed128<floatX> packed = load128cs(x + i * P);
        Packed128<floatX> gradient;
        for (int k = 0; k < P; k++) {
            const int column = i * P + k;
            const float probability = column < V ? __expf(to_float(packed[k]) - logsumexp) : 0.0f;
            const float indicator = column == target ? 1.0f : 0.0f;
            gradient[k] = from_float<floatX>(column < V ? dloss * (probability - indicator) : 0.0f);
        }
        store128_streaming(x + i * P, gradient);
    }
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
