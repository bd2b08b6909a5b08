// Tensor parallelism (-tp T, Megatron-LM's scheme) with sequence parallelism (-sp 1): the linear
// layers and the other places where a layer's data crosses the ranks of one tensor group, as named
// operations. The GPU model's layer maths calls them where it would call a plain product; the kernels
// compute on this rank's slice and never see the group.
//
// Each of the T ranks holds 1/T of every weight matrix (parallel/plan/param_buckets.h):
//   column-parallel   qkv, fc, the classifier (Llama 3: q|k|v, gate|up, lm_head): each rank computes
//                     its heads' / hidden units' / vocabulary slice's outputs for every position,
//                     from the whole input
//   row-parallel      attproj, fcproj, the embedding lookup (Llama 3: o_proj, down_proj,
//                     embed_tokens): each rank's product is a partial sum over its slice of the
//                     inputs; the partial sums are added across the group
//   without sequence parallelism   every rank keeps every position of the residual stream and the
//                                  norms (the same values on every rank); a row-parallel
//                                  product's partial sums are all-reduced.
//   with sequence parallelism      rank t keeps positions [t·N/T, (t+1)·N/T) of them; the whole input
//                                  of a column-parallel product is all-gathered first, and a
//                                  row-parallel product's partial sums are reduce-scattered to the
//                                  positions' owners. Same traffic, activations of LayerNorms and
//                                  residuals divided by T.
// In backward the roles swap: a column-parallel product's input gradient is a partial sum (reduced
// like a row-parallel output), a row-parallel product reads the whole output gradient (gathered).
// Most of these collectives sit between two products that need their result: they run on the compute
// stream. The backward's gathers of a column-parallel product's input (which its weight gradient
// reads) need not: prefetch_input issues them on the group's own stream, over a second communicator of
// the same ranks, while the product before computes; prefetched_input makes the compute stream wait.
// Every collective adds what it sends to bytes_sent() (parallel/plan/traffic.h); the *_cost functions
// say what each operation sends, for plans (gpu/memory_plan.h).
#pragma once
#include <cstddef>

#include <nccl.h>

#include "kernels/common.h"
#include "kernels/encoder.h"
#include "kernels/matmul.h"
#include "parallel/comm/collective_hook.h"
#include "parallel/comm/nccl_check.h"
#include "parallel/plan/param_buckets.h"
#include "parallel/plan/traffic.h"

class TensorParallel {
public:
    TensorParallel() = default;  // one rank: nothing is split, every operation is the plain one
    // comm and overlap_comm: two communicators over the same ranks (the second for prefetch_input);
    // within_node: whether those ranks sit on one node (parallel/plan/traffic.h).
    TensorParallel(ncclComm_t comm, ncclComm_t overlap_comm, int rank, int size, bool sequence_parallel,
                   bool within_node = true)
        : rank_(rank), size_(size), sequence_parallel_(sequence_parallel && size > 1), within_node_(within_node),
          comm_(comm), overlap_comm_(overlap_comm) {}
    TensorParallel(const TensorParallel&) = delete;
    TensorParallel& operator=(const TensorParallel&) = delete;
    ~TensorParallel() {
        if (stream_) cudaStreamDestroy(stream_);
        for (cudaEvent_t e : {ready_, gathered_})
            if (e) cudaEventDestroy(e);
    }

    int rank() const { return rank_; }
    int size() const { return size_; }
    // The step timers' hook (collective_hook.h): the group's collectives on the compute stream are its
    // tensor wait.
    void set_hook(CollectiveHook* hook) { hook_ = hook; }
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

    // Under sequence parallelism, the (N, C) buffers the operations work in: `whole` for a gathered
    // input, `prefetched` for prefetch_input's, `partial` for a row-parallel product's partial sums
    // (unused otherwise: null). Set once the model's buffers exist.
    void use_buffers(floatX* whole, floatX* prefetched, floatX* partial) {
        whole_ = whole, prefetched_ = prefetched, partial_ = partial;
    }

    // ---- the linear layers (kernels/matmul.h's products on this rank's slice)
    // Column-parallel: out (N, OCl) = whole(in) · weightᵀ + bias, for this rank's OCl output columns;
    // `in` holds this rank's positions (N/T, IC) under sequence parallelism, all N otherwise.
    void column_forward(floatX* out, const floatX* in, const floatX* weight, const floatX* bias, int N, int IC,
                        int OCl, cudaStream_t stream) {
        matmul_forward(out, whole_input(in, N, IC, stream), weight, bias, N, IC, OCl, stream);
    }
    // Row-parallel: out (this rank's positions, OC) = Σ over the group of in (N, ICl) · weightᵀ, + bias
    // once.
    void row_forward(floatX* out, const floatX* in, const floatX* weight, const floatX* bias, int N, int ICl,
                     int OC, cudaStream_t stream) {
        matmul_forward(partial_for(out), in, weight, added_once(bias), N, ICl, OC, stream);
        reduce_positions(out, N, OC, stream);
    }
    // Row-parallel backward: dinp (N, ICl) = whole(dout) · weight; dweight and dbias (null: not here)
    // += their gradients; dout holds this rank's positions. pre_gelu: the GELU input, when `in` is its
    // output (dinp then goes through GELU's derivative, kernels/matmul.h).
    void row_backward(floatX* dinp, floatX* dweight, floatX* dbias, void* scratch, const floatX* dout,
                      const floatX* in, const floatX* weight, int N, int ICl, int OC, cudaStream_t stream,
                      const floatX* pre_gelu = nullptr) {
        matmul_backward(dinp, dweight, dbias, scratch, whole_input(dout, N, OC, stream), in, weight, N, ICl, OC,
                        stream, pre_gelu);
    }
    // Column-parallel backward: dinp (this rank's positions, IC) = Σ over the group of dout (N, OCl) ·
    // weight; dweight, dbias += their gradients, from in_whole: the whole input (whole_input or
    // prefetched_input).
    void column_backward(floatX* dinp, floatX* dweight, floatX* dbias, void* scratch, const floatX* dout,
                         const floatX* in_whole, const floatX* weight, int N, int IC, int OCl, cudaStream_t stream) {
        matmul_backward(partial_for(dinp), dweight, dbias, scratch, dout, in_whole, weight, N, IC, OCl, stream);
        reduce_positions(dinp, N, IC, stream);
    }

    // ---- the embeddings (vocabulary-parallel: each rank looks up the tokens of its wte rows)
    // out (this rank's positions, C) = wte[tokens] + wpe, each rank adding its vocabulary slice's rows.
    void embedding_forward(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe, int B, int T,
                           int C, int Vp, cudaStream_t stream) {
        encoder_forward_vocab_slice(partial_for(out), tokens, wte, vocab_begin(Vp), vocab_slice(Vp), added_once(wpe),
                                    B, T, C, stream);
        reduce_positions(out, B * T, C, stream);
    }
    // dwte (this rank's rows), dwpe += the gradients of dout (this rank's positions); the tokens on the
    // host (kernels/encoder.h groups them there, in host_scratch).
    void embedding_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* tokens, int B, int T, int C,
                            int Vp, void* scratch, char* host_scratch, cudaStream_t stream) {
        encoder_backward_vocab_slice(dwte, vocab_begin(Vp), vocab_slice(Vp), dwpe, whole_input(dout, B * T, C, stream),
                                     tokens, B, T, C, scratch, host_scratch, stream);
    }

    // ---- inputs whole
    // The whole (N, width) input of a column-parallel product: under sequence parallelism each rank's
    // (N/T, width) rows all-gathered (into the whole buffer); otherwise `mine` is whole already.
    const floatX* whole_input(const floatX* mine, int N, int width, cudaStream_t stream) {
        if (!sequence_parallel_) return mine;
        const size_t n = (size_t)N / size_ * width;
        HookedCollective timed(hook_, CollectiveKind::ALL_GATHER, (double)n * size_ * sizeof(floatX), size_, stream,
                               StepPhase::TENSOR_WAIT);
        NCCL_CHECK(ncclAllGather(mine, whole_, n, NCCL_FLOATX, comm_, stream));
        bytes_sent_ += gather_cost(N, width);
        return whole_;
    }
    // The same gather, overlapping the compute stream's next work: issued on the group's stream once
    // the compute stream has produced `mine`; prefetched_input returns the whole input after making
    // the compute stream wait for it. Without the second communicator (parallel/comm/launch_order.h)
    // it runs in line on the compute stream.
    void prefetch_input(const floatX* mine, int N, int width, cudaStream_t compute) {
        pending_ = sequence_parallel_ ? prefetched_ : mine;
        if (!sequence_parallel_) return;
        const size_t n = (size_t)N / size_ * width;
        bytes_sent_ += gather_cost(N, width);
        const double gathered_bytes = (double)n * size_ * sizeof(floatX);
        if (!overlap_comm_) {
            HookedCollective timed(hook_, CollectiveKind::ALL_GATHER, gathered_bytes, size_, compute,
                                   StepPhase::TENSOR_WAIT);
            NCCL_CHECK(ncclAllGather(mine, prefetched_, n, NCCL_FLOATX, comm_, compute));
            return;
        }
        if (!stream_) {
            CUDA_CHECK(cudaStreamCreate(&stream_));
            CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
            CUDA_CHECK(cudaEventCreateWithFlags(&gathered_, cudaEventDisableTiming));
        }
        CUDA_CHECK(cudaEventRecord(ready_, compute));
        CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
        {  // timed to here (collective_hook.h: before the event the compute stream waits for)
            HookedCollective timed(hook_, CollectiveKind::ALL_GATHER, gathered_bytes, size_, stream_);
            NCCL_CHECK(ncclAllGather(mine, prefetched_, n, NCCL_FLOATX, overlap_comm_, stream_));
        }
        CUDA_CHECK(cudaEventRecord(gathered_, stream_));
    }
    const floatX* prefetched_input(cudaStream_t compute) {
        if (sequence_parallel_ && overlap_comm_) {
            HookedWait wait(hook_, StepPhase::TENSOR_WAIT);
            CUDA_CHECK(cudaStreamWaitEvent(compute, gathered_, 0));
        }
        return pending_;
    }

    // ---- the rest
    // The gradients of replicated LayerNorm parameters: under sequence parallelism each rank computed
    // them from its own positions, so they are summed over the group (otherwise every rank computed
    // the same sum from every position). G: floatX, or float for gradients kept in fp32.
    template <typename G>
    void sum_sequence_gradients(G* gradients, size_t n, cudaStream_t stream) {
        if (!sequence_parallel_ || n == 0) return;
        const ncclDataType_t type = nccl_type<G>();
        HookedCollective timed(hook_, CollectiveKind::ALL_REDUCE, (double)n * sizeof(G), size_, stream,
                               StepPhase::TENSOR_WAIT);
        NCCL_CHECK(ncclAllReduce(gradients, gradients, n, type, ncclSum, comm_, stream));
        bytes_sent_ += sequence_gradients_cost(n, sizeof(G));
    }
    // fp32 values summed over the group (the squared gradient norm of each rank's slice).
    void sum(float* values, size_t n, cudaStream_t stream) {
        if (size_ == 1) return;
        HookedCollective timed(hook_, CollectiveKind::ALL_REDUCE, (double)n * sizeof(float), size_, stream,
                               StepPhase::TENSOR_WAIT);
        NCCL_CHECK(ncclAllReduce(values, values, n, ncclFloat32, ncclSum, comm_, stream));
        bytes_sent_ += all_reduce_bytes(n, size_, sizeof(float));
    }
    // Every rank's n values (fp32 or floatX), rank after rank, into all (T·n): the classifier's per-row
    // statistics, a row of logits.
    template <typename V>
    void gather(V* all, const V* mine, size_t n, cudaStream_t stream) {
        const ncclDataType_t type = nccl_type<V>();
        HookedCollective timed(hook_, CollectiveKind::ALL_GATHER, (double)n * size_ * sizeof(V), size_, stream,
                               StepPhase::TENSOR_WAIT);
        NCCL_CHECK(ncclAllGather(mine, all, n, type, comm_, stream));
        bytes_sent_ += gather_bytes(n, size_, sizeof(V));
    }

    // ---- what it sends
    size_t bytes_sent() const { return bytes_sent_; }
    // Bytes on the side of the node boundary the group sits (all of its collectives are the group's).
    SentBytes by_node(size_t bytes) const {
        SentBytes sent;
        sent.add(bytes, within_node_);
        return sent;
    }
    void reset_bytes_sent() { bytes_sent_ = 0; }
    // What each operation sends, for (N, width) activations: gathering an input whole (column_forward,
    // row_backward, whole_input, prefetch_input, embedding_backward); reducing partial sums to this
    // rank's positions (row_forward, column_backward, embedding_forward); summing n LayerNorm gradients
    // (of element_bytes each).
    size_t gather_cost(int N, int width) const {
        return sequence_parallel_ ? gather_bytes((size_t)N / size_ * width, size_, sizeof(floatX)) : 0;
    }
    size_t reduce_cost(int N, int width) const {
        if (sequence_parallel_) return gather_bytes((size_t)N / size_ * width, size_, sizeof(floatX));
        return all_reduce_bytes((size_t)N * width, size_, sizeof(floatX));
    }
    size_t sequence_gradients_cost(size_t n, size_t element_bytes) const {
        return sequence_parallel_ ? all_reduce_bytes(n, size_, element_bytes) : 0;
    }

private:
    // Where a row-parallel product writes its partial sums before reduce_positions into `mine`: the
    // partial buffer under sequence parallelism, `mine` itself otherwise.
    floatX* partial_for(floatX* mine) const { return sequence_parallel_ ? partial_ : mine; }
    // partial_for(mine) (N, width) holds this rank's partial sums; `mine` receives its positions of
    // their sum over the group (a reduce-scatter under sequence parallelism; otherwise an all-reduce, in
    // place).
    void reduce_positions(floatX* mine, int N, int width, cudaStream_t stream) {
        if (size_ == 1) return;
        const size_t n = (size_t)N * width;
        HookedCollective timed(hook_, sequence_parallel_ ? CollectiveKind::REDUCE_SCATTER : CollectiveKind::ALL_REDUCE,
                               (double)n * sizeof(floatX), size_, stream, StepPhase::TENSOR_WAIT);
        if (sequence_parallel_)
            NCCL_CHECK(ncclReduceScatter(partial_, mine, n / size_, NCCL_FLOATX, ncclSum, comm_, stream));
        else
            NCCL_CHECK(ncclAllReduce(mine, mine, n, NCCL_FLOATX, ncclSum, comm_, stream));
        bytes_sent_ += reduce_cost(N, width);
    }

    int rank_ = 0, size_ = 1;
    bool sequence_parallel_ = false;
    bool within_node_ = true;  // the group sits on one node
    ncclComm_t comm_ = nullptr, overlap_comm_ = nullptr;
    floatX *whole_ = nullptr, *prefetched_ = nullptr, *partial_ = nullptr;
    cudaStream_t stream_ = nullptr;                 // prefetch_input's stream, created at first use
    cudaEvent_t ready_ = nullptr, gathered_ = nullptr;
    const floatX* pending_ = nullptr;               // what prefetched_input returns
    size_t bytes_sent_ = 0;
    CollectiveHook* hook_ = nullptr;
};
