// ParameterStore: where one data-parallel rank keeps the model's weights, gradients and AdamW state
// under each ZeRO stage, and the collectives that move them between ranks. The forward and backward
// passes of train_gpt.cu compute on whatever weights(bucket) and gradients(bucket) point at, and call
// the named steps below where data crosses ranks; the maths never sees the stage.
//
// Parameters are grouped in buckets (parallel/plan/param_buckets.h: the embeddings, each layer, the final
// LayerNorm), each split into R equal chunks for R ranks; rank r owns chunk r of every bucket (its
// "shard", the chunks one after another). What a rank keeps, per parameter (Ψ parameters, R ranks,
// 2-byte bf16 weights and gradients, 4-byte fp32 master weights and AdamW moments):
//
//   -z 0  all-reduce  weights 2Ψ,   gradients 2Ψ,   master + m + v 12Ψ
//   -z 1  ZeRO-1      weights 2Ψ,   gradients 2Ψ,   master + m + v 12Ψ/R
//   -z 2  ZeRO-2      weights 2Ψ,   gradients 2Ψ/R, master + m + v 12Ψ/R   + transient gradient slots
//   -z 3  ZeRO-3      weights 2Ψ/R, gradients 2Ψ/R, master + m + v 12Ψ/R   + transient weight and
//                                                                            gradient slots
//
// The collectives of one micro-step, in the order the step issues them (on a stream of their own, so
// that they overlap the compute of neighbouring layers):
//   -z 0/1  after the last micro-step's backward of each bucket: all-reduce (0) or reduce-scatter into
//           the bucket's own chunk (1); after AdamW on the owned chunks, all-gather of the weights (1).
//   -z 2    after every micro-step's backward of each bucket: its gradients, computed whole into a
//           transient slot, are reduce-scattered into this rank's gradient shard (added to what earlier
//           micro-steps left there); after AdamW, all-gather of the weights.
//   -z 3    as -z 2, and each bucket's weights are all-gathered from the shards into a transient slot
//           just before the forward needs them, and again before the backward, the next layer's
//           gather issued while the current layer computes (prefetch); the slot is released after use.
//           The embeddings (wte is also the classifier) are gathered once per micro-step and kept from
//           the encoder to the classifier's backward (which runs at the end of the forward pass).
// Gradients accumulate across micro-steps in the storage precision (bf16, or fp32 in the fp32 build),
// as the whole-gradient stages do, so every stage rounds alike and needs 2 bytes per gradient.
//
// Transient slots: two for layers (layer l uses slot l % 2: while layer l computes, layer l ± 1 is
// gathered into the other), one each for the position embeddings, the vocabulary and the final
// LayerNorm; each with a "filled"
// event (the gather is done) and a "free" event (the compute is done with it), and the gradient slots
// likewise ("ready" to reduce, "reduced").
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <nccl.h>

#include "base/errors.h"
#include "base/gpt_config.h"
#include "base/train_model.h"
#include "kernels/adamw.h"
#include "kernels/common.h"
#include "kernels/device_arena.h"
#include "kernels/elementwise.h"
#include "kernels/global_norm.h"
#include "parallel/comm/nccl_check.h"
#include "parallel/plan/param_buckets.h"

class ParameterStore {
public:
    // stage: the ZeRO stage in effect (0 without a communicator); rank among buckets.num_ranks.
    ParameterStore(const ParamBuckets& buckets, int stage, int rank, bool fp32_master)
        : buckets_(buckets), stage_(stage), rank_(rank), use_master_(fp32_master),
          sharded_(stage >= 1), owned_(owned_runs(buckets, rank, stage >= 1)),
          reduced_this_step_(buckets.buckets.size(), false) {
        size_t at = 0;
        for (int b = 0; b < (int)buckets_.buckets.size(); b++) {
            shard_offset_.push_back(at);
            at += sharded_ ? buckets_.chunk(b) : 0;
            max_chunk_ = std::max(max_chunk_, buckets_.chunk(b));
        }
        for (int b = 0; b < (int)buckets_.buckets.size(); b++) {
            const int s = slot_of(b);
            if (s < 2)
                slot_length_[0] = slot_length_[1] = std::max(slot_length_[0], buckets_.buckets[b].length);
            else
                slot_length_[s] = buckets_.buckets[b].length;
        }
    }
    ParameterStore(const ParameterStore&) = delete;
    ParameterStore& operator=(const ParameterStore&) = delete;
    ~ParameterStore() {
        for (int s = 0; s < SLOTS; s++)
            for (cudaEvent_t e : {filled_[s], free_[s], ready_[s], reduced_[s]})
                if (e) cudaEventDestroy(e);
        if (communication_done_) cudaEventDestroy(communication_done_);
        if (weights_updated_) cudaEventDestroy(weights_updated_);
        if (comm_stream_) cudaStreamDestroy(comm_stream_);
    }

    int stage() const { return stage_; }
    bool optimizer_sharded() const { return sharded_; }
    const ParamBuckets& buckets() const { return buckets_; }
    // Elements of this rank's optimizer state: its shard, or the whole (padded) model.
    size_t state_size() const { return sharded_ ? buckets_.shard_size() : buckets_.total; }

    // Requests this stage's buffers, persistent and transient, in the arena (nothing is allocated).
    void request_memory(DeviceArena* arena) {
        const size_t P = buckets_.total, S = state_size();
        arena->request(&params_, stage_ >= 3 ? S : P, MemoryKind::PARAMETERS);
        if (stage_ >= 3)
            for (int s = 0; s < SLOTS; s++) arena->request(&weight_slot_[s], slot_length_[s], MemoryKind::PARAMETERS);
        arena->request(&grads_, stage_ >= 2 ? S : P, MemoryKind::GRADIENTS);
        if (stage_ >= 2) {
            for (int s = 0; s < SLOTS; s++) arena->request(&gradient_slot_[s], slot_length_[s], MemoryKind::GRADIENTS);
            arena->request(&chunk_buffer_, max_chunk_, MemoryKind::GRADIENTS);
        }
        if (use_master_) arena->request(&master_, S, MemoryKind::MASTER_WEIGHTS);
        arena->request(&adam_m_, S, MemoryKind::OPTIMIZER_STATE);
        arena->request(&adam_v_, S, MemoryKind::OPTIMIZER_STATE);
        arena->request(&adamw_table_, std::max<size_t>(1, owned_.size()), MemoryKind::OPTIMIZER_STATE);
    }

    // Once the arena is allocated: the communication stream and events, every buffer zeroed (the
    // padding of each bucket stays zero for good). comm may be null for stage 0 (nothing to send).
    void start(cudaStream_t compute, ncclComm_t comm) {
        compute_ = compute;
        comm_ = comm;
        if (stage_ > 0 && !comm_) fail("ZeRO stage %d needs a communicator", stage_);
        CUDA_CHECK(cudaStreamCreate(&comm_stream_));
        for (int s = 0; s < SLOTS; s++)
            for (cudaEvent_t* e : {&filled_[s], &free_[s], &ready_[s], &reduced_[s]})
                CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&communication_done_, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&weights_updated_, cudaEventDisableTiming));
        const size_t P = buckets_.total, S = state_size();
        zero(params_, stage_ >= 3 ? S : P);
        zero(grads_, stage_ >= 2 ? S : P);
        zero(master_, use_master_ ? S : 0);
        zero(adam_m_, S);
        zero(adam_v_, S);
        for (int s = 0; s < SLOTS; s++) {
            zero(weight_slot_[s], stage_ >= 3 ? slot_length_[s] : 0);
            zero(gradient_slot_[s], stage_ >= 2 ? slot_length_[s] : 0);
        }
        // The update's table: every run this rank owns, in one launch (kernels/adamw.h).
        std::vector<AdamWRun> runs;
        for (const OwnedRun& run : owned_)
            runs.push_back({params_ + (stage_ >= 3 ? run.state_offset : run.device_offset),
                            master_ ? master_ + run.state_offset : nullptr, adam_m_ + run.state_offset,
                            adam_v_ + run.state_offset, grads_ + (stage_ >= 2 ? run.state_offset : run.device_offset),
                            run.length, run.key_offset, is_weight_matrix(run.tensor)});
        adamw_plan_ = adamw_multi_tensor_plan_in(adamw_table_, (int)std::max<size_t>(1, owned_.size()), runs.data(),
                                                 (int)runs.size());
    }

    std::string description() const {
        const int R = buckets_.num_ranks;
        switch (stage_) {
            case 0: return comm_ && R > 1 ? strprintf("gradients all-reduced over %d ranks", R) : "";
            case 1: return strprintf("ZeRO-1 over %d ranks (AdamW state sharded)", R);
            case 2: return strprintf("ZeRO-2 over %d ranks (gradients and AdamW state sharded)", R);
            default:
                return strprintf("ZeRO-3 over %d ranks (weights, gradients and AdamW state sharded)", R);
        }
    }

    // Bytes this rank sends in one optimizer step of `micro_steps` micro-steps. A ring all-reduce
    // of n elements sends 2·(R−1)/R·n of them, a reduce-scatter or an all-gather (R−1)/R·n.
    size_t bytes_sent_per_step(int micro_steps) const {
        const size_t R = buckets_.num_ranks, P = buckets_.total;
        if (R <= 1 && stage_ == 0) return 0;
        const size_t one_pass = (R - 1) * (P / R) * sizeof(floatX);  // (R−1)/R of every bucket
        size_t kept = 0;  // the embeddings: gathered once per micro-step under -z 3 (not for the backward too)
        for (int b : {buckets_.position_bucket(), buckets_.vocabulary_bucket()})
            if (b >= 0) kept += buckets_.buckets[b].length;
        const size_t layers_pass = (R - 1) * ((P - kept) / R) * sizeof(floatX);
        switch (stage_) {
            case 0:
            case 1: return 2 * one_pass;
            case 2: return (micro_steps + 1) * one_pass;
            default: return micro_steps * (2 * one_pass + layers_pass);  // gathers fwd + bwd, reduce
        }
    }

    // ---- what the forward and backward compute on
    // The bucket's weights, whole: the model's copy (-z 0..2) or the slot it was gathered into (-z 3).
    floatX* weights(int bucket) const {
        if (stage_ < 3) return params_ + buckets_.buckets[bucket].offset;
        const int s = slot_of(bucket);
        if (slot_holds_[s] != bucket)
            fail("internal error: bucket %d's weights are used while not gathered (slot %d holds %d)",
                 bucket, s, slot_holds_[s]);
        return weight_slot_[s];
    }
    // Where the backward adds the bucket's gradients: the model's copy (-z 0/1) or a slot (-z 2/3).
    floatX* gradients(int bucket) const {
        if (stage_ < 2) return grads_ + buckets_.buckets[bucket].offset;
        return gradient_slot_[slot_of(bucket)];
    }

    // ---- collectives and their order (each a no-op where the stage does not need it)
    // -z 3: all-gather the bucket's weights from every rank's chunk into its slot, on the
    // communication stream, once the compute is done with the slot's previous bucket.
    void gather_weights(int bucket) {
        if (stage_ < 3) return;
        const int s = slot_of(bucket);
        if (slot_holds_[s] != -1)
            fail("internal error: bucket %d is gathered into slot %d, which bucket %d still uses", bucket, s,
                 slot_holds_[s]);
        CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, free_[s], 0));
        NCCL_CHECK(ncclAllGather(params_ + shard_offset_[bucket], weight_slot_[s], buckets_.chunk(bucket),
                                 NCCL_FLOATX, comm_, comm_stream_));
        CUDA_CHECK(cudaEventRecord(filled_[s], comm_stream_));
        slot_holds_[s] = bucket;
    }
    // The compute stream waits until the bucket's gathered weights are there.
    void wait_for_weights(int bucket) {
        if (stage_ < 3) return;
        weights(bucket);  // checks the slot holds it
        CUDA_CHECK(cudaStreamWaitEvent(compute_, filled_[slot_of(bucket)], 0));
    }
    // The compute stream is done with the bucket's weights: its slot may take another bucket.
    void release_weights(int bucket) {
        if (stage_ < 3) return;
        const int s = slot_of(bucket);
        CUDA_CHECK(cudaEventRecord(free_[s], compute_));
        slot_holds_[s] = -1;
    }

    // A new optimizer step's accumulation starts: -z 0/1 zero the gradients; -z 2/3 let each bucket's
    // first reduce-scatter of the step overwrite its part of the shard.
    void zero_gradients() {
        if (stage_ < 2)
            CUDA_CHECK(cudaMemsetAsync(grads_, 0, buckets_.total * sizeof(floatX), compute_));
        reduced_this_step_.assign(buckets_.buckets.size(), false);
    }
    // -z 2/3: the bucket's gradient slot, once its previous reduction has read it, zeroed for the
    // backward to add into.
    void prepare_gradients(int bucket) {
        if (stage_ < 2) return;
        const int s = slot_of(bucket);
        CUDA_CHECK(cudaStreamWaitEvent(compute_, reduced_[s], 0));
        CUDA_CHECK(cudaMemsetAsync(gradient_slot_[s], 0, slot_length_[s] * sizeof(floatX), compute_));
    }
    // The backward has finished the bucket's gradients of this micro-step: average them across ranks
    // on the communication stream. -z 0/1 only after the last micro-step (earlier ones accumulate in
    // place); -z 2/3 after every micro-step, into this rank's gradient shard.
    void reduce_gradients(int bucket, bool last_micro_step) {
        if (!comm_ || (stage_ < 2 && !last_micro_step)) return;
        const ParamBucket& b = buckets_.buckets[bucket];
        const size_t chunk = buckets_.chunk(bucket);
        CUDA_CHECK(cudaEventRecord(ready_[slot_of(bucket)], compute_));
        CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready_[slot_of(bucket)], 0));
        if (stage_ == 0) {
            NCCL_CHECK(ncclAllReduce(grads_ + b.offset, grads_ + b.offset, b.length, NCCL_FLOATX, ncclAvg,
                                     comm_, comm_stream_));
        } else if (stage_ == 1) {  // in place: this rank's chunk of the bucket receives the average
            floatX* g = grads_ + b.offset;
            NCCL_CHECK(ncclReduceScatter(g, g + rank_ * chunk, chunk, NCCL_FLOATX, ncclAvg, comm_,
                                         comm_stream_));
        } else {
            const int s = slot_of(bucket);
            floatX* shard = grads_ + shard_offset_[bucket];
            if (!reduced_this_step_[bucket]) {
                NCCL_CHECK(ncclReduceScatter(gradient_slot_[s], shard, chunk, NCCL_FLOATX, ncclAvg, comm_,
                                             comm_stream_));
            } else {
                NCCL_CHECK(ncclReduceScatter(gradient_slot_[s], chunk_buffer_, chunk, NCCL_FLOATX, ncclAvg,
                                             comm_, comm_stream_));
                add_array(shard, chunk_buffer_, chunk, comm_stream_);
            }
            CUDA_CHECK(cudaEventRecord(reduced_[s], comm_stream_));
        }
        reduced_this_step_[bucket] = true;
        communicating_ = true;
    }
    // The gradients of `bucket` this rank holds once they are reduced, and how many: the whole bucket
    // (-z 0), or this rank's chunk of it (-z 1..3).
    floatX* reduced_gradients(int bucket, size_t* count) const {
        const ParamBucket& b = buckets_.buckets[bucket];
        *count = sharded_ ? buckets_.chunk(bucket) : b.length;
        if (stage_ >= 2) return grads_ + shard_offset_[bucket];
        return grads_ + b.offset + (sharded_ ? rank_ * buckets_.chunk(bucket) : 0);
    }
    // Whether reduce_gradients sends this micro-step's gradients (-z 0/1: the last micro-step only).
    bool reduces_gradients(bool last_micro_step) const { return stage_ >= 2 || last_micro_step; }
    // End of a backward pass: the compute stream goes on once every reduction issued is done.
    void finish_backward() {
        if (communicating_) {
            CUDA_CHECK(cudaEventRecord(communication_done_, comm_stream_));
            CUDA_CHECK(cudaStreamWaitEvent(compute_, communication_done_, 0));
            communicating_ = false;
        }
    }

    // ---- the update
    // Adds the squared L2 norm of the reduced gradients to *norm_squared (device), summed over the data
    // ranks when each holds a part of them. (Padding holds zeros.) Copies (parallel/plan/param_buckets.h)
    // are left out, so that the sum over the tensor group and the pipeline (the caller's) counts
    // every parameter once.
    void add_gradient_norm_squared(float* norm_squared, void* scratch) {
        bool whole = true;  // no copies: every bucket whole
        for (const ParamBucket& bucket : buckets_.buckets) whole = whole && bucket.unwritten == 0;
        if (stage_ >= 2 && whole) {
            global_norm_squared(norm_squared, grads_, buckets_.shard_size(), scratch, compute_);
        } else if (stage_ == 0 && whole) {
            global_norm_squared(norm_squared, grads_, buckets_.total, scratch, compute_);
        } else {  // bucket by bucket: this rank's chunk (-z 1..3) or all of it, past the copies
            for (int b = 0; b < (int)buckets_.buckets.size(); b++) {
                const ParamBucket& bucket = buckets_.buckets[b];
                const size_t chunk = sharded_ ? buckets_.chunk(b) : bucket.length;
                const size_t begin = sharded_ ? rank_ * chunk : 0;  // within the bucket
                const size_t from = std::max(begin, bucket.unwritten), to = begin + chunk;
                const floatX* g = stage_ >= 2 ? grads_ + shard_offset_[b] - begin : grads_ + bucket.offset;
                if (from < to) global_norm_squared(norm_squared, g + from, to - from, scratch, compute_);
            }
        }
        if (sharded_)
            NCCL_CHECK(ncclAllReduce(norm_squared, norm_squared, 1, ncclFloat32, ncclSum, comm_, compute_));
    }

    // AdamW on the parameters this rank owns, every run (each inside one tensor: weight decay only on
    // the weight matrices) in one launch, with the step's values read from device memory (step: the
    // learning rate, corrections, clipping factor and whether to skip; kernels/adamw.h), so that the
    // update needs nothing from the host that changes between steps; then -z 1/2 all-gather the updated
    // weights (unchanged ones when the step is skipped). Under -z 3 the updated shard is all there is:
    // the next forward gathers from it. Bitwise the per-run updates (adamw_update) of the same values.
    void adamw(const AdamWDeviceStep* step, const AdamWSettings& constants) {
        adamw_update_multi_tensor(adamw_plan_, constants.beta1, constants.beta2, constants.eps, step, compute_);
        if (stage_ == 1 || stage_ == 2) all_gather_weights();
        // Under -z 3 the next gathers read the updated shard: everything later on the communication
        // stream waits for the update (its gathers otherwise wait only for the compute to be done with
        // a slot, which it was before the update ran).
        if (stage_ >= 3) {
            CUDA_CHECK(cudaEventRecord(weights_updated_, compute_));
            CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, weights_updated_, 0));
        }
        CUDA_CHECK(cudaGetLastError());
    }
    // n fp32 values averaged over the data ranks (the step's loss), on the compute stream; as they are
    // with one rank or none.
    void average_over_data_ranks(float* values, size_t n) {
        if (comm_ && buckets_.num_ranks > 1)
            NCCL_CHECK(ncclAllReduce(values, values, n, ncclFloat32, ncclAvg, comm_, compute_));
    }

    // ---- weights and optimizer state in and out (host vectors in ParamLayout order, fp32)
    void set_weights(const std::vector<float>& weights) {
        if (stage_ >= 3)
            upload(params_, gather_shard(buckets_, rank_, true, weights));
        else
            upload(params_, to_device_order(buckets_, weights));
        if (master_) upload(master_, gather_shard(buckets_, rank_, sharded_, weights));
    }
    // The part of the working weights this rank writes to the model file (base/model_part.h): data
    // rank 0's slice but the copies. Under -z 3 every rank must call it:
    // the buckets are gathered one at a time through a slot, so no rank holds its whole slice on the
    // device at once.
    ModelPart weights_part() {
        if (stage_ < 3) return rank_ == 0 ? device_part(buckets_, download(params_, buckets_.total)) : ModelPart();
        std::vector<float> device_order(rank_ == 0 ? buckets_.total : 0);
        for (int b = 0; b < (int)buckets_.buckets.size(); b++) {
            gather_weights(b);
            wait_for_weights(b);
            if (rank_ == 0) {
                const std::vector<float> bucket = download(weights(b), buckets_.buckets[b].length);
                std::copy(bucket.begin(), bucket.end(), device_order.begin() + buckets_.buckets[b].offset);
            }
            release_weights(b);
        }
        return rank_ == 0 ? device_part(buckets_, device_order) : ModelPart();
    }
    // The whole model's weights or gradients widened to fp32, where this rank holds all of them: one
    // tensor rank (for tests; gradients under -z 0/1 only).
    std::vector<float> weights_in_layout_order() { return whole_model(weights_part()); }
    std::vector<float> gradients_in_layout_order() {
        if (stage_ >= 2) fail("the whole gradients are never on one rank under ZeRO-%d", stage_);
        return whole_model(device_part(buckets_, download(grads_, buckets_.total)));
    }
    void set_optimizer_state(const std::vector<float>& master, const std::vector<float>& m,
                             const std::vector<float>& v) {
        if (master_) upload(master_, gather_shard(buckets_, rank_, sharded_, master));
        upload(adam_m_, gather_shard(buckets_, rank_, sharded_, m));
        upload(adam_v_, gather_shard(buckets_, rank_, sharded_, v));
    }
    // What this rank's state file stores: the master weights and moments of its runs (its shard under
    // ZeRO, everything on data rank 0 otherwise; not the copies), with
    // their ParamLayout ranges. Without separate master weights they are the working ones.
    OptimizerPart optimizer_part() {
        const size_t S = state_size();
        std::vector<float> master;
        if (master_)
            master = download(master_, S);
        else if (stage_ >= 3)
            master = download(params_, S);
        else
            master = gather_shard(buckets_, rank_, sharded_, to_layout_order_whole(download(params_, buckets_.total)));
        auto written = [&](const std::vector<float>& state) { return state_values(buckets_, rank_, sharded_, state); };
        return {state_ranges(buckets_, rank_, sharded_), written(master), written(download(adam_m_, S)),
                written(download(adam_v_, S))};
    }

private:
    enum { POSITION_SLOT = 2, VOCABULARY_SLOT = 3, FINAL_NORM_SLOT = 4, SLOTS = 5 };
    int slot_of(int bucket) const {
        if (bucket == buckets_.position_bucket()) return POSITION_SLOT;
        if (bucket == buckets_.vocabulary_bucket()) return VOCABULARY_SLOT;
        if (bucket == buckets_.final_norm_bucket()) return FINAL_NORM_SLOT;
        return (bucket - buckets_.layer_bucket(buckets_.first_layer())) % 2;
    }

    // A part that covers the model (one tensor rank) as the whole model in ParamLayout order.
    std::vector<float> whole_model(const ModelPart& part) const {
        std::vector<float> whole(buckets_.layout_total, 0.0f);
        scatter_part(part.ranges, part.values.data(), &whole);
        return whole;
    }
    // This rank's device-order values in ParamLayout order, for gather_shard: the elements of its
    // slice where they belong, zeros elsewhere.
    std::vector<float> to_layout_order_whole(const std::vector<float>& device_order) const {
        std::vector<float> whole(buckets_.layout_total, 0.0f);
        for (const ParamSegment& seg : buckets_.segments)
            for_each_layout_run(seg, 0, seg.length, [&](size_t layout_at, size_t index, size_t count) {
                std::copy_n(device_order.begin() + seg.device_offset + index, count, whole.begin() + layout_at);
            });
        return whole;
    }

    // -z 1/2: every rank's updated chunk of every bucket to every rank, as one group.
    void all_gather_weights() {
        NCCL_CHECK(ncclGroupStart());
        for (int b = 0; b < (int)buckets_.buckets.size(); b++) {
            floatX* bucket = params_ + buckets_.buckets[b].offset;
            const size_t chunk = buckets_.chunk(b);
            NCCL_CHECK(ncclAllGather(bucket + rank_ * chunk, bucket, chunk, NCCL_FLOATX, comm_, compute_));
        }
        NCCL_CHECK(ncclGroupEnd());
    }

    template <typename T>
    void zero(T* p, size_t n) {
        if (n) CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(T), compute_));
    }
    // Host fp32 <-> device T, through a host staging vector, on the compute stream.
    template <typename T>
    void upload(T* device, const std::vector<float>& host) {
        std::vector<T> staged(host.size());
        for (size_t i = 0; i < host.size(); i++) staged[i] = (T)host[i];
        CUDA_CHECK(cudaMemcpyAsync(device, staged.data(), staged.size() * sizeof(T), cudaMemcpyHostToDevice,
                                   compute_));
        CUDA_CHECK(cudaStreamSynchronize(compute_));
    }
    template <typename T>
    std::vector<float> download(const T* device, size_t n) {
        std::vector<T> staged(n);
        CUDA_CHECK(cudaMemcpyAsync(staged.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost, compute_));
        CUDA_CHECK(cudaStreamSynchronize(compute_));
        return std::vector<float>(staged.begin(), staged.end());
    }

    ParamBuckets buckets_;
    int stage_, rank_;
    bool use_master_, sharded_;
    std::vector<OwnedRun> owned_;    // the parameters this rank updates
    std::vector<size_t> shard_offset_;  // where each bucket's chunk starts in this rank's shard
    size_t max_chunk_ = 0;
    size_t slot_length_[SLOTS] = {};
    ncclComm_t comm_ = nullptr;
    cudaStream_t compute_ = nullptr, comm_stream_ = nullptr;

    floatX* params_ = nullptr;  // working weights: whole in bucket order (-z 0..2) or the shard (-z 3)
    floatX* grads_ = nullptr;   // gradients: whole in bucket order (-z 0/1) or the shard (-z 2/3)
    float* master_ = nullptr;   // fp32 master weights (null with -w 0 or in the fp32 build)
    float *adam_m_ = nullptr, *adam_v_ = nullptr;  // state order: this rank's shard, or all
    AdamWRunEntry* adamw_table_ = nullptr;          // the update's runs (kernels/adamw.h)
    AdamWMultiTensor adamw_plan_;
    floatX* weight_slot_[SLOTS] = {};    // -z 3: gathered buckets
    floatX* gradient_slot_[SLOTS] = {};  // -z 2/3: a bucket's whole gradients before the reduction
    floatX* chunk_buffer_ = nullptr;     // -z 2/3: a reduced chunk on its way into the shard
    int slot_holds_[SLOTS] = {-1, -1, -1, -1, -1};
    cudaEvent_t filled_[SLOTS] = {}, free_[SLOTS] = {}, ready_[SLOTS] = {}, reduced_[SLOTS] = {};
    cudaEvent_t communication_done_ = nullptr, weights_updated_ = nullptr;
    std::vector<bool> reduced_this_step_;  // -z 2/3: the bucket's shard already holds this step's gradients
    bool communicating_ = false;
};
