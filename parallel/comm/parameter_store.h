// ParameterStore: where one data-parallel rank keeps the model's weights and gradients under its
// ZeRO sharding (parallel/plan/zero_sharding.h), and the collectives that move them between the
// ranks of its data group. The GPU model's layer maths computes on whatever weights(bucket) and
// gradients(bucket) point at; its passes call the named steps below where data crosses ranks, and
// never see the sharding. The fp32 master weights and AdamW moments are the optimizer's
// (gpu/optimizer.h), over the runs this store says the rank owns.
//
// Parameters are grouped in buckets (parallel/plan/param_buckets.h: the embeddings, each layer, the
// final LayerNorm), each split into R equal chunks for R ranks; rank r owns chunk r of every bucket (its
// "shard", the chunks one after another). What a rank keeps, per parameter (Ψ parameters, R ranks,
// 2-byte bf16 weights and gradients, 4-byte fp32 master weights and AdamW moments):
//
//   -z 0  all-reduce  weights 2Ψ,   gradients 2Ψ,   master + m + v 12Ψ
//   -z 1  ZeRO-1      weights 2Ψ,   gradients 2Ψ,   master + m + v 12Ψ/R
//   -z 2  ZeRO-2      weights 2Ψ,   gradients 2Ψ/R, master + m + v 12Ψ/R   + transient gradient slots
//   -z 3  ZeRO-3      weights 2Ψ/R, gradients 2Ψ/R, master + m + v 12Ψ/R   + transient weight and
//                                                                            gradient slots
//
// The collectives of one micro-step, in the order the step issues them (on a communication stream of
// their own, so that they overlap the compute of neighbouring layers):
//   -z 0/1  after the last micro-step's backward of each bucket: all-reduce (0) or reduce-scatter into
//           the bucket's own chunk (1); the owned chunks updated by AdamW are all-gathered at the start
//           of the next step's first forward, bucket by bucket, each waited for just before its layer
//           (so the gathers overlap the forward's compute), or whenever the weights are read outside
//           training (gather_updated_weights_now: every rank calls it).
//   -z 2    after every micro-step's backward of each bucket: its gradients, computed whole into a
//           transient slot, are reduce-scattered into this rank's gradient shard (added to what earlier
//           micro-steps left there); the updated weights gathered as under -z 1.
//   -z 3    as -z 2, and each bucket's weights are all-gathered from the shards into a transient slot
//           just before the forward needs them, and again before the backward, the next layer's
//           gather issued while the current layer computes (prefetch); the slot is released after use.
//           The embeddings (wte is also the classifier) are gathered once per micro-step and kept from
//           the encoder to the classifier's backward (which runs at the end of the forward pass).
//           The gathers run on a stream and a communicator of their own, beside the reductions, so
//           that a layer's gradients are reduce-scattered while the next layer down is gathered (where
//           NCCL can run two communicators at once, parallel/comm/launch_order.h; else both share the
//           communication stream).
// Gradients accumulate across micro-steps and are reduced across ranks in fp32 (--grad-reduce fp32,
// the default), or in the storage precision (--grad-reduce bf16: half the bytes on the network and in
// memory, at the price of a rounding per micro-step and per reduction step). In fp32 the backward still
// writes a micro-step's gradients in bf16, into the transient slots of every stage; each bucket's are
// then widened into fp32 (added into the whole fp32 gradients under -z 0/1, copied into an fp32
// staging slot for the reduce-scatter under -z 2/3), and everything after (the sums over the tensor
// group and the pipeline's tied embedding, the reductions over the data ranks, the norm, the update)
// reads fp32: a whole-gradient rank keeps 4Ψ bytes of gradients instead of 2Ψ, a shard 4Ψ/R, and
// the data group's reductions send twice the bytes. In the fp32 build both choices are fp32.
//
// Transient slots: two for layers (layer l uses slot l % 2: while layer l computes, layer l ± 1 is
// gathered into the other), one each for the position embeddings, the vocabulary and the final
// LayerNorm; each with a "filled" event (the gather is done) and a "free" event (the compute is done
// with it), and the gradient slots likewise ("ready" to reduce, "reduced").
// Hybrid sharding (--shard-ranks N): the chunks, gathers and reduce-scatters above are those of this
// rank's sharding group of N data ranks (R = N); after its reduce-scatter each chunk's gradients are
// averaged over the sharding groups (an all-reduce over the ranks that hold the same chunk, once a step:
// -z 2/3 after the last micro-step's reduce-scatter), so every group updates the same shard the same
// way. The loss is averaged over all the data ranks, the norm summed over one group's shards. Only the
// first group writes its shards to checkpoints: the others hold exact copies.
// Gradient compression (--grad-compression, -z 0/1, fp32 gradients): once the step's compression has
// begun (set_compressing), each bucket's reduction is parallel/comm/compressed_reduction.h's instead of
// the all-reduce or reduce-scatter, and leaves the averaged gradients in the same place.
// Every collective adds what it sends to bytes_sent() (parallel/plan/traffic.h), on the side of the
// node boundary its group sits; planned_bytes() adds up the same calls for a step without making them.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <nccl.h>

#include "base/errors.h"
#include "base/model_part.h"
#include "kernels/common.h"
#include "kernels/device_arena.h"
#include "kernels/elementwise.h"
#include "kernels/host_transfer.h"
#include "parallel/comm/collective_hook.h"
#include "parallel/comm/compressed_reduction.h"
#include "parallel/comm/nccl_check.h"
#include "parallel/comm/stream_wait.h"
#include "parallel/plan/param_buckets.h"
#include "parallel/plan/traffic.h"
#include "parallel/plan/zero_sharding.h"

// A stretch of gradients on the device: the global norm sums the squares of such runs. One of data
// (storage precision) and data_fp32 (accumulated in fp32) is set.
struct DeviceRun {
    const floatX* data;
    const float* data_fp32;
    size_t count;
};

class ParameterStore {
public:
    // sharding: what ZeRO shards (nothing without a communicator); rank among buckets.num_ranks (its
    // sharding group); groups: the data group's shape (zero_sharding.h); fp32_gradients: accumulate and
    // reduce gradients in fp32 (--grad-reduce fp32); compression, powersgd_rank: --grad-compression and
    // --powersgd-rank (-z 0/1 and fp32 gradients only: train/train_flags.cpp refuses the rest).
    ParameterStore(const ParamBuckets& buckets, ZeroSharding sharding, int rank, const ShardGroups& groups,
                   bool fp32_gradients, GradCompression compression = GradCompression::NONE, int powersgd_rank = 4)
        : buckets_(buckets), sharding_(sharding), rank_(rank), groups_(groups),
          owned_(owned_runs(buckets, rank, sharding.optimizer_state)),
          reduced_this_step_(buckets.buckets.size(), false),
          compression_(buckets_, compression, powersgd_rank, rank, !sharding.optimizer_state) {
        fp32_ = fp32_gradients && sizeof(floatX) < sizeof(float);
        if (compression_.active() && (sharding_.gradients || groups_.replicas > 1 || gradient_bytes() != sizeof(float)))
            fail("internal error: gradient compression needs whole fp32 gradients and one sharding group");
        size_t at = 0;
        for (int b = 0; b < (int)buckets_.buckets.size(); b++) {
            shard_offset_.push_back(at);
            at += sharding_.optimizer_state ? buckets_.chunk(b) : 0;
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
        for (cudaEvent_t e : gathered_) cudaEventDestroy(e);
        if (communication_done_) cudaEventDestroy(communication_done_);
        if (weights_updated_) cudaEventDestroy(weights_updated_);
        if (gather_stream_ && gather_stream_ != comm_stream_) cudaStreamDestroy(gather_stream_);
        if (comm_stream_) cudaStreamDestroy(comm_stream_);
    }

    const ZeroSharding& sharding() const { return sharding_; }
    const ParamBuckets& buckets() const { return buckets_; }
    int rank() const { return rank_; }
    // Elements of this rank's optimizer state: its shard, or the whole (padded) model.
    size_t state_size() const { return sharding_.optimizer_state ? buckets_.shard_size() : buckets_.total; }
    // The runs of parameters this rank updates, and where their working weights and reduced
    // gradients are on the device.
    const std::vector<OwnedRun>& owned() const { return owned_; }
    floatX* weights_of(const OwnedRun& run) const {
        return params_ + (sharding_.weights ? run.state_offset : run.device_offset);
    }
    // Where the run's reduced gradients are: in the storage precision, or (fp32) null and ..._fp32.
    const floatX* reduced_gradients_of(const OwnedRun& run) const {
        return fp32_ ? nullptr : grads_ + (sharding_.gradients ? run.state_offset : run.device_offset);
    }
    const float* reduced_gradients_fp32_of(const OwnedRun& run) const {
        return fp32_ ? grads32_ + (sharding_.gradients ? run.state_offset : run.device_offset) : nullptr;
    }
    // Whether gradients are accumulated and reduced in fp32 (in a build that stores bf16), and the
    // bytes of one gradient as the reductions send it.
    bool fp32_gradients() const { return fp32_; }
    size_t gradient_bytes() const { return fp32_ ? sizeof(float) : sizeof(floatX); }

    // Requests this sharding's buffers, persistent and transient, in the arena (nothing is allocated).
    void request_memory(DeviceArena* arena) {
        const size_t P = buckets_.total, S = state_size();
        arena->request(&params_, sharding_.weights ? S : P, MemoryKind::PARAMETERS);
        if (sharding_.weights)
            for (int s = 0; s < SLOTS; s++) arena->request(&weight_slot_[s], slot_length_[s], MemoryKind::PARAMETERS);
        if (fp32_)
            arena->request(&grads32_, sharding_.gradients ? S : P, MemoryKind::GRADIENTS);
        else
            arena->request(&grads_, sharding_.gradients ? S : P, MemoryKind::GRADIENTS);
        if (gradients_in_slots())
            for (int s = 0; s < SLOTS; s++) arena->request(&gradient_slot_[s], slot_length_[s], MemoryKind::GRADIENTS);
        if (sharding_.gradients && fp32_) {
            for (int s = 0; s < SLOTS; s++) arena->request(&staging32_[s], slot_length_[s], MemoryKind::GRADIENTS);
            arena->request(&chunk32_, max_chunk_, MemoryKind::GRADIENTS);
        } else if (sharding_.gradients) {
            arena->request(&chunk_buffer_, max_chunk_, MemoryKind::GRADIENTS);
        }
        compression_.request_memory(arena);
    }

    // Once the arena is allocated: the communication streams and events, every buffer zeroed (the
    // padding of each bucket stays zero for good). data may be null without sharding (nothing to
    // send); shard and replicas are hybrid sharding's groups (null: the data group shards);
    // weight_gathers the sharding group's second communicator, for -z 3's gathers (null: they share
    // the reductions' communicator and stream).
    void start(cudaStream_t compute, ncclComm_t data, ncclComm_t shard = nullptr, ncclComm_t replicas = nullptr,
               ncclComm_t weight_gathers = nullptr) {
        compute_ = compute;
        data_comm_ = data;
        comm_ = shard ? shard : data;
        replica_comm_ = replicas;
        if (sharding_.optimizer_state && !comm_) fail("ZeRO stage %d needs a communicator", sharding_.stage());
        if (groups_.replicas > 1 && !(sharding_.optimizer_state && replica_comm_))
            fail("internal error: hybrid sharding needs ZeRO (-z 1, 2, 3) and its replicas' communicator");
        CUDA_CHECK(cudaStreamCreate(&comm_stream_));
        gather_stream_ = comm_stream_, gather_comm_ = comm_;
        if (sharding_.weights && weight_gathers) {
            CUDA_CHECK(cudaStreamCreate(&gather_stream_));
            gather_comm_ = weight_gathers;
        }
        for (int s = 0; s < SLOTS; s++)
            for (cudaEvent_t* e : {&filled_[s], &free_[s], &ready_[s], &reduced_[s]})
                CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&communication_done_, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&weights_updated_, cudaEventDisableTiming));
        if (gathers_updated_weights()) {
            gathered_.resize(buckets_.buckets.size());
            for (cudaEvent_t& e : gathered_) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
            unawaited_.assign(buckets_.buckets.size(), false);
        }
        const size_t P = buckets_.total, S = state_size();
        zero(params_, sharding_.weights ? S : P);
        zero(fp32_ ? nullptr : grads_, sharding_.gradients ? S : P);
        zero(fp32_ ? grads32_ : nullptr, sharding_.gradients ? S : P);
        for (int s = 0; s < SLOTS; s++) {
            zero(weight_slot_[s], sharding_.weights ? slot_length_[s] : 0);
            zero(gradient_slot_[s], gradients_in_slots() ? slot_length_[s] : 0);
            zero(staging32_[s], staging32_[s] ? slot_length_[s] : 0);
        }
        compression_.start(comm_, comm_stream_, hook_);
    }

    std::string description() const {
        const int R = buckets_.num_ranks;
        const char* precision = fp32_ ? " in fp32" : sizeof(floatX) < sizeof(float) ? " in bf16" : "";
        const std::string replicated =
            groups_.replicas > 1 ? strprintf(", replicated over %d groups (--shard-ranks)", groups_.replicas) : "";
        return sharding_description(R) + replicated +
               (comm_ && groups_.data > 1 && *precision ? strprintf("; gradients reduced%s", precision) : "");
    }
    std::string sharding_description(int R) const {
        switch (sharding_.stage()) {
            case 0: return comm_ && R > 1 ? strprintf("gradients all-reduced over %d ranks", R) : "";
            case 1: return strprintf("ZeRO-1 over %d ranks (AdamW state sharded)", R);
            case 2: return strprintf("ZeRO-2 over %d ranks (gradients and AdamW state sharded)", R);
            default:
                return strprintf("ZeRO-3 over %d ranks (weights, gradients and AdamW state sharded)", R);
        }
    }

    // ---- what the forward and backward compute on
    // The bucket's weights, whole: the model's copy, or the slot it was gathered into (sharded weights).
    floatX* weights(int bucket) const {
        if (!sharding_.weights) return params_ + buckets_.buckets[bucket].offset;
        const int s = slot_of(bucket);
        if (slot_holds_[s] != bucket)
            fail("internal error: bucket %d's weights are used while not gathered (slot %d holds %d)",
                 bucket, s, slot_holds_[s]);
        return weight_slot_[s];
    }
    // Where the backward adds the bucket's gradients: the model's copy, or a slot (sharded or fp32
    // gradients: each micro-step's in a slot of their own).
    floatX* gradients(int bucket) const {
        if (!gradients_in_slots()) return grads_ + buckets_.buckets[bucket].offset;
        return gradient_slot_[slot_of(bucket)];
    }

    // ---- collectives and their order (each a no-op where the sharding does not need it)
    // Sharded weights: all-gather the bucket's weights from every rank's chunk into its slot, on the
    // gather stream, once the compute is done with the slot's previous bucket.
    void gather_weights(int bucket) {
        if (!sharding_.weights) return;
        const int s = slot_of(bucket);
        if (slot_holds_[s] != -1)
            fail("internal error: bucket %d is gathered into slot %d, which bucket %d still uses", bucket, s,
                 slot_holds_[s]);
        WAIT_FOR_EVENT(slot_released, gather_stream_, free_[s]);
        {  // timed to here (collective_hook.h: before the event the compute stream waits for)
            HookedCollective timed(hook_, CollectiveKind::ALL_GATHER, gathered_size(bucket), buckets_.num_ranks,
                                   gather_stream_);
            NCCL_CHECK(ncclAllGather(params_ + shard_offset_[bucket], weight_slot_[s], buckets_.chunk(bucket),
                                     NCCL_FLOATX, gather_comm_, gather_stream_));
        }
        bytes_sent_.add(gather_cost(bucket), groups_.shard_within_node);
        CUDA_CHECK(cudaEventRecord(filled_[s], gather_stream_));
        slot_holds_[s] = bucket;
    }
    // The compute stream waits until the bucket's gathered weights are there (sharded weights: in its
    // slot; -z 1/2: its updated chunks, where gather_updated_weights issued their gather).
    void wait_for_weights(int bucket) {
        if (gathers_updated_weights() && unawaited_[bucket]) {
            HookedWait wait(hook_, StepPhase::COMM_WAIT);
            CUDA_CHECK(cudaStreamWaitEvent(compute_, gathered_[bucket], 0));
            unawaited_[bucket] = false;
        }
        if (!sharding_.weights) return;
        weights(bucket);  // checks the slot holds it
        HookedWait wait(hook_, StepPhase::COMM_WAIT);
        WAIT_FOR_EVENT(weights_gathered, compute_, filled_[slot_of(bucket)]);
    }
    // Gathers the bucket unless it was prefetched, and waits for it.
    void use_weights(int bucket) {
        if (sharding_.weights && slot_holds_[slot_of(bucket)] != bucket) gather_weights(bucket);
        wait_for_weights(bucket);
    }
    // The compute stream is done with the bucket's weights: its slot may take another bucket.
    void release_weights(int bucket) {
        if (!sharding_.weights) return;
        const int s = slot_of(bucket);
        CUDA_CHECK(cudaEventRecord(free_[s], compute_));
        slot_holds_[s] = -1;
    }

    // A new optimizer step's accumulation starts: whole gradients are zeroed; sharded ones let each
    // bucket's first reduce-scatter of the step overwrite its part of the shard.
    void zero_gradients() {
        if (!sharding_.gradients) {
            zero(fp32_ ? nullptr : grads_, buckets_.total);
            zero(fp32_ ? grads32_ : nullptr, buckets_.total);
        }
        reduced_this_step_.assign(buckets_.buckets.size(), false);
    }
    // Gradients in slots: the bucket's gradient slot (sharded: once its previous reduction has read
    // the slot's fp32 staging or the slot itself) zeroed for the backward to add into.
    void prepare_gradients(int bucket) {
        if (!gradients_in_slots()) return;
        const int s = slot_of(bucket);
        if (sharding_.gradients) {
            HookedWait wait(hook_, StepPhase::COMM_WAIT);
            CUDA_CHECK(cudaStreamWaitEvent(compute_, reduced_[s], 0));
        }
        CUDA_CHECK(cudaMemsetAsync(gradient_slot_[s], 0, slot_length_[s] * sizeof(floatX), compute_));
    }
    // fp32 gradients, after each micro-step's backward of the bucket, on the compute stream: its slot
    // widened into fp32, added into the whole gradients (-z 0/1) or copied into the staging slot that
    // the reduce-scatter reads (-z 2/3).
    void widen_gradients(int bucket) {
        if (!fp32_) return;
        const int s = slot_of(bucket);
        const ParamBucket& b = buckets_.buckets[bucket];
        if (sharding_.gradients)
            cast_array(staging32_[s], gradient_slot_[s], b.length, compute_);
        else
            add_array(grads32_ + b.offset, gradient_slot_[s], b.length, compute_);
    }
    // What the reductions of this micro-step read, for a sum over the tensor group before them (the
    // first n of the bucket's gradients): f(pointer) with a floatX* or, fp32, a float*.
    template <typename F>
    void with_gradients_to_reduce(int bucket, F f) const {
        if (!fp32_) return f(gradients(bucket));
        if (sharding_.gradients) return f(staging32_[slot_of(bucket)]);
        f(grads32_ + buckets_.buckets[bucket].offset);
    }
    // The backward has finished the bucket's gradients of this micro-step: average them across ranks
    // on the communication stream. Whole gradients only after the last micro-step (earlier ones
    // accumulate in place); sharded ones after every micro-step, into this rank's gradient shard.
    void reduce_gradients(int bucket, bool last_micro_step) {
        if (!comm_ || !reduces_gradients(last_micro_step)) return;
        CUDA_CHECK(cudaEventRecord(ready_[slot_of(bucket)], compute_));
        WAIT_FOR_EVENT(gradients_ready, comm_stream_, ready_[slot_of(bucket)]);
        bytes_sent_.add(reduce_cost(bucket, compressing_), groups_.shard_within_node);
        if (compressing_)
            compression_.reduce(fp32_gradients_of(bucket), bucket);
        else if (fp32_)
            reduce_bucket(grads32_, staging32_[slot_of(bucket)], chunk32_, bucket);
        else
            reduce_bucket(grads_, gradient_slot_[slot_of(bucket)], chunk_buffer_, bucket);
        if (last_micro_step) average_over_replicas(bucket);
        if (sharding_.gradients) CUDA_CHECK(cudaEventRecord(reduced_[slot_of(bucket)], comm_stream_));
        reduced_this_step_[bucket] = true;
        communicating_ = true;
    }
    // The gradients of `bucket` this rank holds once they are reduced (the whole bucket without
    // sharding, or this rank's chunk of it): f(pointer, count) with a floatX* or, fp32, a float*.
    template <typename F>
    void with_reduced_gradients(int bucket, F f) const {
        const size_t at = sharding_.gradients ? shard_offset_[bucket]
                                              : buckets_.buckets[bucket].offset +
                                                    (sharding_.optimizer_state ? rank_ * buckets_.chunk(bucket) : 0);
        if (fp32_) return f(grads32_ + at, reduced_gradient_count(bucket));
        f(grads_ + at, reduced_gradient_count(bucket));
    }
    size_t reduced_gradient_count(int bucket) const {
        return sharding_.optimizer_state ? buckets_.chunk(bucket) : buckets_.buckets[bucket].length;
    }
    // Whether reduce_gradients sends this micro-step's gradients (whole gradients: the last only).
    bool reduces_gradients(bool last_micro_step) const { return sharding_.gradients || last_micro_step; }
    // End of a backward pass: the compute stream goes on once every reduction issued is done.
    void finish_backward() {
        if (communicating_) {
            CUDA_CHECK(cudaEventRecord(communication_done_, comm_stream_));
            HookedWait wait(hook_, StepPhase::COMM_WAIT);
            CUDA_CHECK(cudaStreamWaitEvent(compute_, communication_done_, 0));
            communicating_ = false;
        }
    }

    // ---- around the update
    // The reduced gradients whose squares the global norm sums on this rank: one run where every
    // bucket is whole (no copies), else each bucket's part past its copies (parallel/plan/param_buckets.h),
    // so that the sum over the tensor group and the pipeline counts every parameter once. (Padding
    // holds zeros.) Under optimizer sharding each rank's runs are its chunk's: sum_over_shards adds
    // the ranks' partial sums.
    std::vector<DeviceRun> gradient_norm_runs() const {
        bool whole = true;  // no copies: every bucket whole
        for (const ParamBucket& bucket : buckets_.buckets) whole = whole && bucket.unwritten == 0;
        auto run = [&](size_t at, size_t count) {  // at: index into the gradients this rank keeps
            return fp32_ ? DeviceRun{nullptr, grads32_ + at, count} : DeviceRun{grads_ + at, nullptr, count};
        };
        if (sharding_.gradients && whole) return {run(0, buckets_.shard_size())};
        if (!sharding_.optimizer_state && whole) return {run(0, buckets_.total)};
        std::vector<DeviceRun> runs;  // bucket by bucket: this rank's chunk (sharded) or all of it
        for (int b = 0; b < (int)buckets_.buckets.size(); b++) {
            const ParamBucket& bucket = buckets_.buckets[b];
            const size_t chunk = sharding_.optimizer_state ? buckets_.chunk(b) : bucket.length;
            const size_t begin = sharding_.optimizer_state ? rank_ * chunk : 0;  // within the bucket
            const size_t from = std::max(begin, bucket.unwritten), to = begin + chunk;
            const size_t at = sharding_.gradients ? shard_offset_[b] - begin : bucket.offset;
            if (from < to) runs.push_back(run(at + from, to - from));
        }
        return runs;
    }
    // fp32 values summed over the data ranks where each holds a part of what they sum (the squared
    // norm of the ranks' chunks under optimizer sharding), on the compute stream.
    void sum_over_shards(float* values, size_t n) {
        if (!sharding_.optimizer_state) return;
        HookedCollective timed(hook_, CollectiveKind::ALL_REDUCE, (double)n * sizeof(float), buckets_.num_ranks,
                               compute_);
        NCCL_CHECK(ncclAllReduce(values, values, n, ncclFloat32, ncclSum, comm_, compute_));
        bytes_sent_.add(all_reduce_bytes(n, buckets_.num_ranks, sizeof(float)), groups_.shard_within_node);
    }
    // n fp32 values averaged over the data ranks (the step's loss), on the compute stream; as they are
    // with one rank or none.
    void average_over_data_ranks(float* values, size_t n) {
        if (!data_comm_ || groups_.data <= 1) return;
        HookedCollective timed(hook_, CollectiveKind::ALL_REDUCE, (double)n * sizeof(float), groups_.data, compute_);
        NCCL_CHECK(ncclAllReduce(values, values, n, ncclFloat32, ncclAvg, data_comm_, compute_));
        bytes_sent_.add(all_reduce_bytes(n, groups_.data, sizeof(float)), groups_.data_within_node);
    }
    // After the optimizer updated this rank's runs. With sharded weights the updated shard is all there
    // is: the next forward gathers from it, so everything later on the gather stream waits for the
    // update (its gathers otherwise wait only for the compute to be done with a slot, which it was
    // before the update ran), and the reductions' stream too. With sharded optimizer state and whole
    // weights (-z 1/2) the other ranks' updated chunks arrive through gather_updated_weights.
    void share_updated_weights() {
        if (sharding_.weights) {
            CUDA_CHECK(cudaEventRecord(weights_updated_, compute_));
            WAIT_FOR_EVENT(shard_updated, gather_stream_, weights_updated_);
            if (comm_stream_ != gather_stream_) CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, weights_updated_, 0));
        }
    }
    // -z 1/2: every rank's chunk of every bucket to every rank, on the communication stream once the
    // compute stream's update is done, one gather per bucket in the order the forward uses them, each
    // waited for by wait_for_weights. Issued at the start of each step's first forward (the step's
    // first gathers the previous update's weights, or the starting ones, the same on every rank), so
    // that the gathers overlap the forward; an all-gather of chunks already gathered changes nothing.
    void gather_updated_weights() {
        if (!gathers_updated_weights()) return;
        CUDA_CHECK(cudaEventRecord(weights_updated_, compute_));
        CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, weights_updated_, 0));
        for (int b : buckets_in_forward_order()) {
            floatX* bucket = params_ + buckets_.buckets[b].offset;
            const size_t chunk = buckets_.chunk(b);
            {
                HookedCollective timed(hook_, CollectiveKind::ALL_GATHER, gathered_size(b), buckets_.num_ranks,
                                       comm_stream_);
                NCCL_CHECK(ncclAllGather(bucket + rank_ * chunk, bucket, chunk, NCCL_FLOATX, comm_, comm_stream_));
            }
            bytes_sent_.add(gather_cost(b), groups_.shard_within_node);
            CUDA_CHECK(cudaEventRecord(gathered_[b], comm_stream_));
            unawaited_[b] = true;
        }
    }
    // The compute stream waits for every gather issued and not yet waited for (a capture joins them).
    void wait_for_all_weights() {
        for (int b = 0; b < (int)unawaited_.size(); b++) wait_for_weights(b);
    }
    // -z 1/2: the updated weights whole on the device now, for reads outside training (evaluation,
    // samples, the model file). Every rank of the data group calls it at the same point.
    void gather_updated_weights_now() {
        gather_updated_weights();
        wait_for_all_weights();
    }
    bool gathers_updated_weights() const { return sharding_.optimizer_state && !sharding_.weights; }

    // ---- gradient compression
    // Whether this step's reductions are compressed (from the step after --compression-start); the
    // same on every rank.
    void set_compressing(bool on) { compressing_ = on && compression_.active(); }
    bool compressing() const { return compressing_; }
    CompressedReduction& compression() { return compression_; }
    const CompressedReduction& compression() const { return compression_; }

    // ---- what it sends
    SentBytes bytes_sent() const { return bytes_sent_; }
    // The step timers' hook (collective_hook.h).
    void set_hook(CollectiveHook* hook) {
        hook_ = hook;
        compression_.set_hook(hook);
    }
    void reset_bytes_sent() { bytes_sent_ = SentBytes(); }
    // What one optimizer step of `micro_steps` micro-steps sends, the same calls counted without
    // making them: each bucket's reductions (hybrid: and its chunk's average over the replicas), its
    // gathers (sharded weights: before the forward and the backward, the embeddings once), the updated
    // weights' gather, the loss and (sharded) the norm; `compressed`: a step whose reductions are
    // compressed.
    SentBytes planned_bytes(int micro_steps, bool compressed = false) const {
        const bool shard_in_node = groups_.shard_within_node;
        SentBytes sent;
        for (int b = 0; b < (int)buckets_.buckets.size(); b++) {
            sent.add((size_t)(sharding_.gradients ? micro_steps : 1) * reduce_cost(b, compressed), shard_in_node);
            sent.add(replica_cost(b), groups_.replicas_within_node);
            if (sharding_.weights)
                sent.add((size_t)micro_steps * (embedding_bucket(b) ? 1 : 2) * gather_cost(b), shard_in_node);
            if (sharding_.optimizer_state && !sharding_.weights) sent.add(gather_cost(b), shard_in_node);
        }
        sent.add(all_reduce_bytes(1, groups_.data, sizeof(float)), groups_.data_within_node);  // the loss
        if (sharding_.optimizer_state)                                                          // the norm
            sent.add(all_reduce_bytes(1, buckets_.num_ranks, sizeof(float)), shard_in_node);
        return sent;
    }
    // Whether this rank writes its optimizer state to checkpoints: the first sharding group's ranks
    // (the others hold copies of the same shards).
    bool writes_state() const { return groups_.replica == 0; }

    // ---- weights in and out (host vectors in ParamLayout order, fp32)
    void set_weights(const std::vector<float>& weights) { set_placed_weights(place(weights_placement(), weights)); }
    // Where each weight this rank keeps goes (its shard with sharded weights, else its slice in device
    // order), and the weights placed so.
    Placement weights_placement() const {
        return sharding_.weights ? shard_placement(buckets_, rank_, true) : device_placement(buckets_);
    }
    void set_placed_weights(const std::vector<float>& placed) {
        wait_for_all_weights();  // no gather still writes them
        copy_to_device(params_, placed, compute_);
    }
    // The part of the working weights this rank writes to the model file (base/model_part.h): data
    // rank 0's slice but the copies. With sharded weights every rank must call it: the buckets are
    // gathered one at a time through a slot, so no rank holds its whole slice on the device at once.
    ModelPart weights_part() {
        gather_updated_weights_now();
        const bool writes = rank_ == 0 && writes_state();  // data rank 0
        if (!sharding_.weights)
            return writes ? device_part(buckets_, copy_from_device(params_, buckets_.total, compute_)) : ModelPart();
        std::vector<float> device_order(writes ? buckets_.total : 0);
        for (int b = 0; b < (int)buckets_.buckets.size(); b++) {
            gather_weights(b);
            wait_for_weights(b);
            if (writes) {
                const std::vector<float> bucket = copy_from_device(weights(b), buckets_.buckets[b].length, compute_);
                std::copy(bucket.begin(), bucket.end(), device_order.begin() + buckets_.buckets[b].offset);
            }
            release_weights(b);
        }
        return writes ? device_part(buckets_, std::move(device_order)) : ModelPart();
    }
    // Every weight as this rank holds it after the step's update has been gathered, in device order,
    // widened to fp32 (--check-replicas compares them across the data ranks); not with sharded weights.
    std::vector<float> weights_as_held() {
        if (sharding_.weights) fail("internal error: no rank holds the whole weights under ZeRO-3");
        gather_updated_weights_now();
        return copy_from_device(params_, buckets_.total, compute_);
    }
    // The working weights in state order (this rank's shard, or everything), where the optimizer keeps
    // no master copy of them.
    std::vector<float> working_weights_in_state_order() {
        if (sharding_.weights) return copy_from_device(params_, state_size(), compute_);
        return gather_shard(buckets_, rank_, sharding_.optimizer_state,
                            to_layout_order_whole(copy_from_device(params_, buckets_.total, compute_)));
    }
    // The whole model's weights or gradients widened to fp32, where this rank holds all of them: one
    // tensor rank (for tests; gradients only where they are whole).
    std::vector<float> weights_in_layout_order() { return whole_model(weights_part()); }
    std::vector<float> gradients_in_layout_order() {
        if (sharding_.gradients) fail("the whole gradients are never on one rank under ZeRO-%d", sharding_.stage());
        std::vector<float> device_order = fp32_ ? copy_from_device(grads32_, buckets_.total, compute_)
                                                : copy_from_device(grads_, buckets_.total, compute_);
        return whole_model(device_part(buckets_, std::move(device_order)));
    }

private:
    enum { POSITION_SLOT = 2, VOCABULARY_SLOT = 3, FINAL_NORM_SLOT = 4, SLOTS = 5 };
    int slot_of(int bucket) const {
        if (bucket == buckets_.position_bucket()) return POSITION_SLOT;
        if (bucket == buckets_.vocabulary_bucket()) return VOCABULARY_SLOT;
        if (bucket == buckets_.final_norm_bucket()) return FINAL_NORM_SLOT;
        return (bucket - buckets_.layer_bucket(buckets_.first_layer())) % 2;
    }
    // The buckets as the forward uses them: the embeddings, the layers, the final LayerNorm; on a later
    // pipeline stage the tied embedding (the classifier's) last. (A family without position
    // embeddings has no position bucket on its first stage either: the stage says which it is.)
    std::vector<int> buckets_in_forward_order() const {
        std::vector<int> order;
        const int vocabulary = buckets_.vocabulary_bucket();
        const bool classifier_only = vocabulary >= 0 && !buckets_.slice.first_stage;
        for (int b = 0; b < (int)buckets_.buckets.size(); b++)
            if (!(classifier_only && b == vocabulary)) order.push_back(b);
        if (classifier_only) order.push_back(vocabulary);
        return order;
    }
    bool embedding_bucket(int bucket) const {
        return bucket == buckets_.position_bucket() || bucket == buckets_.vocabulary_bucket();
    }
    // What one gather of a bucket's chunks, and one reduction of its gradients, send.
    // A bucket's gathered size in bytes (nccl-tests' size of its all-gather).
    double gathered_size(int bucket) const {
        return (double)buckets_.chunk(bucket) * buckets_.num_ranks * sizeof(floatX);
    }
    size_t gather_cost(int bucket) const { return gather_bytes(buckets_.chunk(bucket), buckets_.num_ranks, sizeof(floatX)); }
    size_t reduce_cost(int bucket, bool compressed) const {
        if (compressed && compression_.active()) return compression_.cost(bucket);
        if (!sharding_.optimizer_state)
            return all_reduce_bytes(buckets_.buckets[bucket].length, buckets_.num_ranks, gradient_bytes());
        return gather_bytes(buckets_.chunk(bucket), buckets_.num_ranks, gradient_bytes());  // as a gather
    }
    // Hybrid sharding: what one average of the bucket's reduced chunk over the replicas sends.
    size_t replica_cost(int bucket) const {
        return groups_.replicas > 1 ? all_reduce_bytes(buckets_.chunk(bucket), groups_.replicas, gradient_bytes()) : 0;
    }
    // Each micro-step's gradients computed into a slot, not into the gradients kept (sharded or fp32).
    bool gradients_in_slots() const { return sharding_.gradients || fp32_; }
    // The bucket's whole gradients where they are kept in fp32 (compression's input and output).
    float* fp32_gradients_of(int bucket) const {
        if (fp32_) return grads32_ + buckets_.buckets[bucket].offset;
        return reinterpret_cast<float*>(grads_) + buckets_.buckets[bucket].offset;  // the fp32 build
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

    // The bucket's reduction over the data ranks, on the communication stream, in G (floatX or fp32):
    // whole gradients all-reduced (-z 0) or reduce-scattered in place into this rank's chunk (-z 1);
    // sharded ones reduce-scattered from `micro_step` (the slot, or its fp32 staging) into the shard,
    // or added to it through `chunk` after the step's first micro-step (-z 2/3).
    template <typename G>
    void reduce_bucket(G* grads, const G* micro_step, G* chunk_buffer, int bucket) {
        const ParamBucket& b = buckets_.buckets[bucket];
        const size_t chunk = buckets_.chunk(bucket);
        const ncclDataType_t type = nccl_type<G>();
        HookedCollective timed(hook_,
                               sharding_.optimizer_state ? CollectiveKind::REDUCE_SCATTER : CollectiveKind::ALL_REDUCE,
                               (double)(sharding_.optimizer_state ? chunk * buckets_.num_ranks : b.length) * sizeof(G),
                               buckets_.num_ranks, comm_stream_);
        if (!sharding_.optimizer_state) {
            NCCL_CHECK(ncclAllReduce(grads + b.offset, grads + b.offset, b.length, type, ncclAvg, comm_, comm_stream_));
        } else if (!sharding_.gradients) {
            G* g = grads + b.offset;
            NCCL_CHECK(ncclReduceScatter(g, g + rank_ * chunk, chunk, type, ncclAvg, comm_, comm_stream_));
        } else if (!reduced_this_step_[bucket]) {
            NCCL_CHECK(ncclReduceScatter(micro_step, grads + shard_offset_[bucket], chunk, type, ncclAvg, comm_,
                                         comm_stream_));
        } else {
            NCCL_CHECK(ncclReduceScatter(micro_step, chunk_buffer, chunk, type, ncclAvg, comm_, comm_stream_));
            add_array(grads + shard_offset_[bucket], chunk_buffer, chunk, comm_stream_);
        }
    }

    // Hybrid sharding, once the step's last reduce-scatter of the bucket is in this rank's chunk: the
    // chunk averaged over the sharding groups (the ranks holding the same chunk), on the communication
    // stream.
    void average_over_replicas(int bucket) {
        if (groups_.replicas <= 1) return;
        with_reduced_gradients(bucket, [&](auto* chunk, size_t n) {
            using G = std::remove_cv_t<std::remove_pointer_t<decltype(chunk)>>;
            const ncclDataType_t type = nccl_type<G>();
            HookedCollective timed(hook_, CollectiveKind::ALL_REDUCE, (double)n * sizeof(G), groups_.replicas,
                                   comm_stream_);
            NCCL_CHECK(ncclAllReduce(chunk, chunk, n, type, ncclAvg, replica_comm_, comm_stream_));
        });
        bytes_sent_.add(replica_cost(bucket), groups_.replicas_within_node);
    }

    template <typename T>  // p may be null: a buffer this configuration does not have
    void zero(T* p, size_t n) {
        if (p && n) CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(T), compute_));
    }

    ParamBuckets buckets_;
    ZeroSharding sharding_;
    int rank_;
    ShardGroups groups_;
    std::vector<OwnedRun> owned_;       // the parameters this rank updates
    std::vector<size_t> shard_offset_;  // where each bucket's chunk starts in this rank's shard
    size_t max_chunk_ = 0;
    size_t slot_length_[SLOTS] = {};
    ncclComm_t comm_ = nullptr;          // the sharding group's: ZeRO's reduce-scatters and gathers
    ncclComm_t data_comm_ = nullptr;     // every data rank's: the loss
    ncclComm_t replica_comm_ = nullptr;  // hybrid sharding: the ranks holding this rank's shard
    ncclComm_t gather_comm_ = nullptr;   // -z 3's weight gathers: comm_, or a second communicator over its ranks
    cudaStream_t compute_ = nullptr, comm_stream_ = nullptr;
    cudaStream_t gather_stream_ = nullptr;  // -z 3's weight gathers: comm_stream_, or a stream of their own
    SentBytes bytes_sent_;
    CollectiveHook* hook_ = nullptr;

    floatX* params_ = nullptr;  // working weights: whole in bucket order, or the shard (sharded weights)
    floatX* grads_ = nullptr;   // gradients: whole in bucket order, or the shard (sharded gradients)
    floatX* weight_slot_[SLOTS] = {};    // sharded weights: gathered buckets
    floatX* gradient_slot_[SLOTS] = {};  // sharded gradients: a bucket's whole gradients before the reduction
    floatX* chunk_buffer_ = nullptr;     // sharded gradients: a reduced chunk on its way into the shard
    bool fp32_ = false;                  // gradients accumulated and reduced in fp32 (bf16 build)
    float* grads32_ = nullptr;           // fp32: the gradients kept (whole, or the shard), instead of grads_
    float* staging32_[SLOTS] = {};       // fp32, sharded gradients: a slot widened for its reduce-scatter
    float* chunk32_ = nullptr;           // fp32, sharded gradients: chunk_buffer_'s counterpart
    int slot_holds_[SLOTS] = {-1, -1, -1, -1, -1};
    cudaEvent_t filled_[SLOTS] = {}, free_[SLOTS] = {}, ready_[SLOTS] = {}, reduced_[SLOTS] = {};
    cudaEvent_t communication_done_ = nullptr, weights_updated_ = nullptr;
    std::vector<cudaEvent_t> gathered_;  // -z 1/2: each bucket's gather of the updated weights done
    std::vector<bool> unawaited_;        // -z 1/2: the bucket's gather issued, not yet waited for
    std::vector<bool> reduced_this_step_;  // sharded gradients: the bucket's shard already holds this step's
    bool communicating_ = false;
    CompressedReduction compression_;  // --grad-compression's reductions (inactive: none, or one rank)
    bool compressing_ = false;         // this step's reductions are compressed
};
