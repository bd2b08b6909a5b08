// Pipeline parallelism (-pp P): the named transfers between a stage and its neighbours, the tied
// embedding's gradient between the first and the last stage, and what the last stage tells the
// others. The GPU model's schedule executor (gpu/step.cu) runs a schedule's actions
// (parallel/plan/pipeline_schedule.h) and calls these between them; the layers never see the pipeline.
//
// A forward action receives its input activations from the previous stage and sends its output to
// the next; a backward action receives the gradient of its output from the next stage and sends the
// gradient of its input to the previous. What an action sends is queued, and goes out with the next
// action's receive as one NCCL group (so that two neighbours that each send before they receive do
// not wait for each other, as Megatron-LM pairs them); when the next action receives nothing (the
// warm-up forwards of the first stage, the last backwards of the last stage), it goes out at once, on
// the pipeline's own stream, while that action computes. The compute stream waits only for what it
// receives, and for a send to finish before it overwrites the buffer the send reads.
// Every transfer adds what it sends to bytes_sent() (parallel/plan/traffic.h; a broadcast counts its
// n values on every rank), on the side of the node boundary its ranks sit (PipelineLinks).
#pragma once
#include <cstddef>
#include <vector>

#include <nccl.h>

#include "kernels/common.h"
#include "parallel/comm/collective_hook.h"
#include "parallel/comm/nccl_check.h"
#include "parallel/plan/mesh.h"
#include "parallel/plan/traffic.h"

// Whether each of a stage's transfers stays within one node (traffic.h): to the previous and the next
// stage, between the tied embedding's two stages, and over the whole pipeline.
struct PipelineLinks {
    bool previous = true, next = true, tied = true, whole = true;
};
inline PipelineLinks pipeline_links(const Mesh& m) {
    auto pair = [&](int stage) {
        return stage < 0 || stage >= m.pipeline ||
               within_one_node({m.world_rank(m.data_rank, m.stage, m.tensor_rank),
                                m.world_rank(m.data_rank, stage, m.tensor_rank)}, m.node_ranks);
    };
    return {pair(m.stage - 1), pair(m.stage + 1), within_one_node(m.tied_embedding_group(), m.node_ranks),
            within_one_node(m.pipeline_group(), m.node_ranks)};
}

class PipelineParallel {
public:
    PipelineParallel() = default;  // one stage: nothing to send
    // comm: the ranks of this rank's pipeline, ranked by stage; tied: the first and last stage's ranks
    // (null on the others, and with fewer than 3 stages the pipeline's own communicator).
    PipelineParallel(ncclComm_t comm, ncclComm_t tied, int stage, int stages, PipelineLinks links = PipelineLinks())
        : stage_(stage), stages_(stages), links_(links), comm_(comm), tied_(tied) {}
    PipelineParallel(const PipelineParallel&) = delete;
    PipelineParallel& operator=(const PipelineParallel&) = delete;
    ~PipelineParallel() {
        if (stream_) cudaStreamDestroy(stream_);
        for (cudaEvent_t e : {computed_, arrived_, sent_[0], sent_[1]})
            if (e) cudaEventDestroy(e);
    }

    int stage() const { return stage_; }
    int stages() const { return stages_; }
    bool first() const { return stage_ == 0; }
    bool last() const { return stage_ == stages_ - 1; }

    // Queued for the next exchange: this stage's output activations to the next stage, the gradient
    // of its input to the previous one. `buffer` (0 or 1) names which of two alternating gradient
    // buffers it is, so that before_overwriting(buffer) can wait for the send.
    void send_activations(const floatX* x, size_t n) { queue(x, n, stage_ + 1, -1); }
    void send_gradients(const floatX* dx, size_t n, int buffer) { queue(dx, n, stage_ - 1, buffer); }
    // The exchange before an action: what is queued, and what the action receives (null: nothing).
    // The compute stream may read `into` after it returns.
    void receive_activations(floatX* into, size_t n, cudaStream_t compute) { exchange(into, n, stage_ - 1, compute); }
    void receive_gradients(floatX* into, size_t n, cudaStream_t compute) { exchange(into, n, stage_ + 1, compute); }
    // Sends what is queued now (an action that receives nothing follows, or the step ends).
    void send_queued(cudaStream_t compute) { exchange(nullptr, 0, -1, compute); }
    // The compute stream waits until gradient buffer `buffer` was sent.
    void before_overwriting(int buffer, cudaStream_t compute) {
        if (sent_[buffer]) {
            HookedWait wait(hook_, StepPhase::BUBBLE);
            CUDA_CHECK(cudaStreamWaitEvent(compute, sent_[buffer], 0));
        }
    }
    // End of a step: the compute stream waits for every transfer.
    void finish(cudaStream_t compute) {
        send_queued(compute);
        if (stream_) {
            CUDA_CHECK(cudaEventRecord(arrived_, stream_));
            HookedWait wait(hook_, StepPhase::BUBBLE);
            CUDA_CHECK(cudaStreamWaitEvent(compute, arrived_, 0));
        }
    }

    // The tied embedding: the first stage's wte (the lookup) and the last stage's copy (the classifier)
    // get the sum of both gradients. A collective of those two stages.
    template <typename G>  // floatX, or float for gradients kept in fp32
    void sum_tied_gradients(G* g, size_t n, cudaStream_t compute) {
        if (stages_ == 1 || !(first() || last())) return;
        const ncclDataType_t type = nccl_type<G>();
        HookedCollective timed(hook_, CollectiveKind::ALL_REDUCE, (double)n * sizeof(G), 2, compute);
        NCCL_CHECK(ncclAllReduce(g, g, n, type, ncclSum, tied_, compute));
        bytes_sent_.add(all_reduce_bytes(n, 2, sizeof(G)), links_.tied);
    }
    // Sums over every stage (each stage's squared gradient norm).
    void sum(float* values, size_t n, cudaStream_t compute) {
        if (stages_ == 1) return;
        HookedCollective timed(hook_, CollectiveKind::ALL_REDUCE, (double)n * sizeof(float), stages_, compute);
        NCCL_CHECK(ncclAllReduce(values, values, n, ncclFloat32, ncclSum, comm_, compute));
        bytes_sent_.add(all_reduce_bytes(n, stages_, sizeof(float)), links_.whole);
    }
    // The last stage's values (the loss, a row of logits) on every stage.
    template <typename V>
    void broadcast_from_last(V* values, size_t n, cudaStream_t compute) {
        if (stages_ == 1) return;
        const ncclDataType_t type = nccl_type<V>();
        HookedCollective timed(hook_, CollectiveKind::BROADCAST, (double)n * sizeof(V), stages_, compute,
                               StepPhase::BUBBLE);
        NCCL_CHECK(ncclBroadcast(values, values, n, type, stages_ - 1, comm_, compute));
        bytes_sent_.add(send_bytes(n, sizeof(V)), links_.whole);
    }

    // ---- what it sends
    SentBytes bytes_sent() const { return bytes_sent_; }
    // The step timers' hook (collective_hook.h): the compute stream's waits for a neighbour are its
    // bubble.
    void set_hook(CollectiveHook* hook) { hook_ = hook; }
    void reset_bytes_sent() { bytes_sent_ = SentBytes(); }
    // What one step of m micro-batches of n (this rank's positions × C) activation values sends: each
    // micro-batch's activations to the next stage and its gradient to the previous one, the tied
    // embedding's n_tied gradients (first and last stage: those this rank holds once reduced), the
    // squared norm and the loss.
    SentBytes planned_bytes(int m, size_t n, size_t n_tied, size_t gradient_bytes) const {
        SentBytes sent;
        if (stages_ == 1) return sent;
        if (!first()) sent.add(m * send_bytes(n, sizeof(floatX)), links_.previous);
        if (!last()) sent.add(m * send_bytes(n, sizeof(floatX)), links_.next);
        if (first() || last()) sent.add(all_reduce_bytes(n_tied, 2, gradient_bytes), links_.tied);
        sent.add(all_reduce_bytes(1, stages_, sizeof(float)) + send_bytes(1, sizeof(float)), links_.whole);
        return sent;
    }

private:
    struct Send {
        const floatX* data;
        size_t n;
        int peer, buffer;
    };
    void queue(const floatX* data, size_t n, int peer, int buffer) {
        if (peer >= 0 && peer < stages_) queued_.push_back({data, n, peer, buffer});
    }
    // One group on the pipeline stream, once the compute stream has produced what it sends: the queued
    // sends and the receive; the compute stream waits for the receive.
    void exchange(floatX* into, size_t n, int from, cudaStream_t compute) {
        const bool receive = into && from >= 0 && from < stages_;
        if (queued_.empty() && !receive) return;
        start(compute);
        CUDA_CHECK(cudaEventRecord(computed_, compute));
        CUDA_CHECK(cudaStreamWaitEvent(stream_, computed_, 0));
        size_t moved = receive ? n : 0;
        for (const Send& s : queued_) moved += s.n;
        {  // timed to here (collective_hook.h: before the events the compute stream waits for)
            HookedCollective timed(hook_, CollectiveKind::SEND, (double)moved * sizeof(floatX), 2, stream_);
            NCCL_CHECK(ncclGroupStart());
            for (const Send& s : queued_) {
                NCCL_CHECK(ncclSend(s.data, s.n, NCCL_FLOATX, s.peer, comm_, stream_));
                bytes_sent_.add(send_bytes(s.n, sizeof(floatX)), s.peer > stage_ ? links_.next : links_.previous);
            }
            if (receive) NCCL_CHECK(ncclRecv(into, n, NCCL_FLOATX, from, comm_, stream_));
            NCCL_CHECK(ncclGroupEnd());
        }
        for (const Send& s : queued_)
            if (s.buffer >= 0) CUDA_CHECK(cudaEventRecord(sent_[s.buffer], stream_));
        queued_.clear();
        if (receive) {
            CUDA_CHECK(cudaEventRecord(arrived_, stream_));
            HookedWait wait(hook_, StepPhase::BUBBLE);
            CUDA_CHECK(cudaStreamWaitEvent(compute, arrived_, 0));
        }
    }
    void start(cudaStream_t) {  // the stream and events, at the first exchange
        if (stream_) return;
        CUDA_CHECK(cudaStreamCreate(&stream_));
        for (cudaEvent_t* e : {&computed_, &arrived_, &sent_[0], &sent_[1]})
            CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    }

    int stage_ = 0, stages_ = 1;
    PipelineLinks links_;
    ncclComm_t comm_ = nullptr, tied_ = nullptr;
    cudaStream_t stream_ = nullptr;
    cudaEvent_t computed_ = nullptr, arrived_ = nullptr, sent_[2] = {nullptr, nullptr};
    std::vector<Send> queued_;
    SentBytes bytes_sent_;
    CollectiveHook* hook_ = nullptr;
};
