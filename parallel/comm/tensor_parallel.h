// Tensor parallelism (-tp T, Megatron-LM's scheme) with sequence parallelism (-sp 1): the named
// collectives where a layer's data crosses the ranks of one tensor group. train_gpt.cu calls them
// between its per-shard kernels; the kernels never see the group.
//
// Each of the T ranks holds 1/T of every weight matrix (parallel/plan/param_buckets.h): the QKV and fc
// products are column-parallel (each rank computes its heads' / its hidden units' outputs for every
// position), the attention projection and fcproj are row-parallel (each rank's product is a partial
// sum over its slice of the inputs), the classifier is vocabulary-parallel.
//   without sequence parallelism   every rank keeps every position of the residual stream and the
//                                  LayerNorms (the same values on every rank); a row-parallel
//                                  product's partial sums are all-reduced.
//   with sequence parallelism      rank t keeps positions [t·N/T, (t+1)·N/T) of them; the whole
//                                  input of a column-parallel product is all-gathered first, and a
//                                  row-parallel product's partial sums are reduce-scattered to the
//                                  positions' owners. Same traffic, activations of LayerNorms and
//                                  residuals divided by T.
// Most of these collectives sit between two products that need their result: they run on the compute
// stream. The backward's gathers of LayerNorm outputs (which a column-parallel product's weight gradient
// reads) do not: start_gather issues them on the group's own stream, over a second communicator of the
// same ranks, while the product before computes, and finish_gather makes the compute stream wait.
// Bytes one rank sends (counted by bytes_sent()): an all-gather or reduce-scatter of n elements in
// all sends (T−1)/T·n of them, an all-reduce twice that (a ring's traffic).
#pragma once
#include <cstddef>
#include <type_traits>

#include <nccl.h>

#include "kernels/common.h"
#include "parallel/comm/nccl_check.h"
#include "parallel/plan/param_buckets.h"

class TensorParallel {
public:
    TensorParallel() = default;  // one rank: nothing is split, every call below is a no-op
    // comm and overlap_comm: two communicators over the same ranks (the second for start_gather).
    TensorParallel(ncclComm_t comm, ncclComm_t overlap_comm, int rank, int size, bool sequence_parallel)
        : rank_(rank), size_(size), sequence_parallel_(sequence_parallel && size > 1), comm_(comm),
          overlap_comm_(overlap_comm) {}
    TensorParallel(const TensorParallel&) = delete;
    TensorParallel& operator=(const TensorParallel&) = delete;
    ~TensorParallel() {
        if (stream_) cudaStreamDestroy(stream_);
        for (cudaEvent_t e : {ready_, gathered_})
            if (e) cudaEventDestroy(e);
    }

    int rank() const { return rank_; }
    int size() const { return size_; }
    bool sequence_parallel() const { return sequence_parallel_; }
    // Positions of N this rank keeps of the residual stream and the LayerNorms.
    int local_positions(int N) const { return sequence_parallel_ ? N / size_ : N; }
    // This rank's slice of the padded vocabulary Vp: rows [vocab_begin, vocab_begin + vocab_slice)
    // (parallel/plan/param_buckets.h: the last slices may reach past Vp, into zero rows).
    int vocab_slice(int Vp) const { return (int)vocab_slice_rows(Vp, size_); }
    int vocab_begin(int Vp) const { return rank_ * vocab_slice(Vp); }
    // A term every rank holds whole but that a sum over the group must contain once (a row-parallel
    // product's bias, the position embeddings): rank 0's, null on the others.
    const floatX* added_once(const floatX* term) const { return rank_ == 0 ? term : nullptr; }
    // A sequence of T positions padded so that every rank keeps whole positions of each (T itself
    // without sequence parallelism; -t is a multiple of the group's size, so this stays within it).
    int padded_length(int T) const { return sequence_parallel_ ? (T + size_ - 1) / size_ * size_ : T; }
    // Where a row-parallel product writes its partial sums before reduce_positions into `mine`: a
    // separate (N, width) buffer under sequence parallelism, `mine` itself otherwise.
    floatX* partial_buffer(floatX* separate, floatX* mine) const { return sequence_parallel_ ? separate : mine; }

    // Before a column-parallel product: the whole (N, width) input. Under sequence parallelism each
    // rank's (N/T, width) rows are all-gathered into `whole`; otherwise `mine` is whole already.
    const floatX* gather_positions(floatX* whole, const floatX* mine, int N, int width, cudaStream_t stream) {
        if (!sequence_parallel_) return mine;
        const size_t n = (size_t)N / size_ * width;
        NCCL_CHECK(ncclAllGather(mine, whole, n, NCCL_FLOATX, comm_, stream));
        bytes_sent_ += gather_bytes(n, size_, sizeof(floatX));
        return whole;
    }
    // The same gather, overlapping the compute stream's next work: issued on the group's stream once
    // the compute stream has produced `mine`; finish_gather returns the whole input after making the
    // compute stream wait for it. `whole` must not be the buffer of a gather still in use.
    void start_gather(floatX* whole, const floatX* mine, int N, int width, cudaStream_t compute) {
        pending_ = sequence_parallel_ ? whole : const_cast<floatX*>(mine);
        if (!sequence_parallel_) return;
        if (!stream_) {
            CUDA_CHECK(cudaStreamCreate(&stream_));
            CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
            CUDA_CHECK(cudaEventCreateWithFlags(&gathered_, cudaEventDisableTiming));
        }
        const size_t n = (size_t)N / size_ * width;
        CUDA_CHECK(cudaEventRecord(ready_, compute));
        CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
        NCCL_CHECK(ncclAllGather(mine, whole, n, NCCL_FLOATX, overlap_comm_, stream_));
        CUDA_CHECK(cudaEventRecord(gathered_, stream_));
        bytes_sent_ += gather_bytes(n, size_, sizeof(floatX));
    }
    const floatX* finish_gather(cudaStream_t compute) {
        if (sequence_parallel_) CUDA_CHECK(cudaStreamWaitEvent(compute, gathered_, 0));
        return pending_;
    }

    // After a row-parallel product: `partial` (N, width) holds this rank's partial sums; `mine`
    // receives its positions of their sum over the group (a reduce-scatter under sequence
    // parallelism; otherwise an all-reduce, with partial == mine).
    void reduce_positions(floatX* mine, floatX* partial, int N, int width, cudaStream_t stream) {
        if (size_ == 1) return;
        const size_t n = (size_t)N * width;
        if (sequence_parallel_) {
            NCCL_CHECK(ncclReduceScatter(partial, mine, n / size_, NCCL_FLOATX, ncclSum, comm_, stream));
            bytes_sent_ += gather_bytes(n / size_, size_, sizeof(floatX));  // as much as a gather
        } else {
            NCCL_CHECK(ncclAllReduce(partial, mine, n, NCCL_FLOATX, ncclSum, comm_, stream));
            bytes_sent_ += all_reduce_bytes(n, size_, sizeof(floatX));
        }
    }
    // The gradients of replicated LayerNorm parameters: under sequence parallelism each rank computed
    // them from its own positions, so they are summed over the group (otherwise every rank computed
    // the same sum from every position).
    void sum_sequence_gradients(floatX* gradients, size_t n, cudaStream_t stream) {
        if (!sequence_parallel_ || n == 0) return;
        NCCL_CHECK(ncclAllReduce(gradients, gradients, n, NCCL_FLOATX, ncclSum, comm_, stream));
        bytes_sent_ += all_reduce_bytes(n, size_, sizeof(floatX));
    }
    // fp32 values summed over the group (the squared gradient norm of each rank's slice).
    void sum(float* values, size_t n, cudaStream_t stream) {
        if (size_ == 1) return;
        NCCL_CHECK(ncclAllReduce(values, values, n, ncclFloat32, ncclSum, comm_, stream));
        bytes_sent_ += all_reduce_bytes(n, size_, sizeof(float));
    }
    // Every rank's n values (fp32 or floatX), rank after rank, into all (T·n): the classifier's per-row
    // statistics, a row of logits.
    template <typename V>
    void gather(V* all, const V* mine, size_t n, cudaStream_t stream) {
        const ncclDataType_t type = std::is_same<V, float>::value ? ncclFloat32 : NCCL_FLOATX;
        NCCL_CHECK(ncclAllGather(mine, all, n, type, comm_, stream));
        bytes_sent_ += gather_bytes(n, size_, sizeof(V));
    }

    // Bytes this rank has sent since the last reset (for the start-up report's check).
    size_t bytes_sent() const { return bytes_sent_; }
    void reset_bytes_sent() { bytes_sent_ = 0; }
    // What one rank of `size` sends: gathering n elements of `bytes` from each rank (or
    // reduce-scattering n to each), and all-reducing n.
    static size_t gather_bytes(size_t n, int size, size_t bytes) { return (size_t)(size - 1) * n * bytes; }
    static size_t all_reduce_bytes(size_t n, int size, size_t bytes) {
        return 2 * (size_t)(size - 1) * ((n + size - 1) / size) * bytes;
    }

private:
    int rank_ = 0, size_ = 1;
    bool sequence_parallel_ = false;
    ncclComm_t comm_ = nullptr, overlap_comm_ = nullptr;
    cudaStream_t stream_ = nullptr;                 // start_gather's stream, created at first use
    cudaEvent_t ready_ = nullptr, gathered_ = nullptr;
    floatX* pending_ = nullptr;                     // what finish_gather returns
    size_t bytes_sent_ = 0;
};
