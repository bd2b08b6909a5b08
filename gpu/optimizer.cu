// The optimizer (optimizer.h): its state beside the parameter store, and its launches a step.
#include "gpu/optimizer.h"

#include <algorithm>
#include <cstdlib>

#include "base/errors.h"
#include "kernels/host_transfer.h"
#include "parallel/comm/every_rank.h"

#ifdef TEST_BROKEN_VARIANTS
// The tests' broken build (Makefile): with TEST_LOCAL_TRUST_RATIO=1 the all-reduce adds up a copy of
// the sums and the update reads each rank's own, taken over the pieces it holds.
static float* unreduced_copy(const float* sums, size_t n, cudaStream_t stream) {
    static float* copy = nullptr;
    if (!copy) CUDA_CHECK(cudaMalloc(&copy, n * sizeof(float)));  // first at start(), before any capture
    CUDA_CHECK(cudaMemcpyAsync(copy, sums, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    return copy;
}
#endif

void Optimizer::request_memory(DeviceArena* arena) {
    const size_t S = params_.state_size();
    if (use_master_) arena->request(&master_, S, MemoryKind::MASTER_WEIGHTS);
    arena->request(&adam_m_, S, MemoryKind::OPTIMIZER_STATE);
    if (kind_ != OptimizerKind::LARS) arena->request(&adam_v_, S, MemoryKind::OPTIMIZER_STATE);
    if (layer_adaptive())
        arena->request(&layer_adaptive_memory_, layer_adaptive_bytes(), MemoryKind::OPTIMIZER_STATE);
    else
        arena->request(&table_, std::max<size_t>(1, params_.owned().size()), MemoryKind::OPTIMIZER_STATE);
}

void Optimizer::start(cudaStream_t stream, ncclComm_t everyone, bool everyone_within_node) {
    stream_ = stream;
    everyone_ = everyone, everyone_within_node_ = everyone_within_node;
    const size_t S = params_.state_size();
    for (float* state : {master_, adam_m_, adam_v_})
        if (state) CUDA_CHECK(cudaMemsetAsync(state, 0, S * sizeof(float), stream_));
    if (layer_adaptive()) {
        const std::vector<LayerAdaptiveRun> runs = layer_adaptive_runs();
        layer_adaptive_plan_ = layer_adaptive_plan_in(layer_adaptive_memory_, layer_adaptive_bytes(), runs.data(),
                                                      (int)runs.size(), tensors_);
#ifdef TEST_BROKEN_VARIANTS
        if (getenv("TEST_LOCAL_TRUST_RATIO")) unreduced_copy(layer_adaptive_plan_.sums, 2 * (size_t)tensors_, stream_);
#endif
        return;
    }
    // The update's table: every run this rank owns, in one launch (kernels/adamw.h); the family's table
    // says which tensors are decayed.
    const ParamTable& tensors = params_.buckets().table;
    std::vector<AdamWRun> runs;
    for (const OwnedRun& run : params_.owned())
        runs.push_back({params_.weights_of(run), master_ ? master_ + run.state_offset : nullptr,
                        adam_m_ + run.state_offset, adam_v_ + run.state_offset, params_.reduced_gradients_of(run),
                        run.length, run.key_offset, tensors.spec(run.tensor).decayed,
                        params_.reduced_gradients_fp32_of(run)});
    plan_ = adamw_multi_tensor_plan_in(table_, (int)std::max<size_t>(1, params_.owned().size()), runs.data(),
                                       (int)runs.size());
}

std::vector<LayerAdaptiveRun> Optimizer::layer_adaptive_runs() const {
    // This rank's runs count where it writes their state: its shard (ZeRO, first sharding group only),
    // or everything on data rank 0; copies never (ParamSegment::written).
    const bool writes = params_.writes_state() && (params_.sharding().optimizer_state || params_.rank() == 0);
    std::vector<LayerAdaptiveRun> runs;
    for (const OwnedRun& run : params_.owned()) {
        const ParamSegment& segment = params_.buckets().segments[run.segment];
        const bool matrix = params_.buckets().table.spec(run.tensor).decayed;
        LayerAdaptiveRun r;
        r.tensor = {params_.weights_of(run),
                    master_ ? master_ + run.state_offset : nullptr,
                    adam_m_ + run.state_offset,
                    adam_v_ ? adam_v_ + run.state_offset : nullptr,
                    params_.reduced_gradients_of(run),
                    run.length,
                    run.key_offset,
                    matrix,
                    params_.reduced_gradients_fp32_of(run)};
        r.slot = params_.buckets().table.tensor_index(run.tensor, segment.layer);
        r.adapt = matrix || adaptation_ == LayerAdaptation::ALL;
        r.counted = writes && segment.written;
        runs.push_back(r);
    }
    return runs;
}

size_t Optimizer::layer_adaptive_bytes() const {
    // Launch 1's grid, bounded: a run of n elements has at most n/8 + 1 groups and a head-and-tail
    // thread (kernels/elementwise.h), in blocks of kAdamWBlockSize threads.
    unsigned long long blocks = 0;
    for (const OwnedRun& run : params_.owned())
        if (run.length > 0) blocks += (run.length / kGroupSize + 2 + kAdamWBlockSize - 1) / kAdamWBlockSize;
    return layer_adaptive_layout(params_.owned().size(), (unsigned)blocks, tensors_).total();
}

void Optimizer::sum_norms_over_ranks() {
    float* sums = layer_adaptive_plan_.sums;
#ifdef TEST_BROKEN_VARIANTS
    if (getenv("TEST_LOCAL_TRUST_RATIO")) sums = unreduced_copy(sums, 2 * (size_t)tensors_, stream_);
#endif
    sum_over_every_rank(sums, 2 * (size_t)tensors_, everyone_, stream_, &bytes_sent_, everyone_within_node_, hook_);
}

SentBytes Optimizer::planned_bytes(int ranks, bool within_node) const {
    SentBytes sent;
    if (layer_adaptive()) sent.add(all_reduce_bytes(2 * (size_t)tensors_, ranks, sizeof(float)), within_node);
    return sent;
}

void Optimizer::step(const AdamWDeviceStep* step, const OptimizerSettings& constants) {
    if (constants.kind != kind_)
        fail("internal error: an update of %s on an optimizer set up for %s", optimizer_name(constants.kind),
             optimizer_name(kind_));
    switch (kind_) {
        case OptimizerKind::ADAMW:
            adamw_update_multi_tensor(plan_, constants.beta1, constants.beta2, constants.eps, step, stream_);
            break;
        case OptimizerKind::LAMB:
            lamb_moments_and_norms(layer_adaptive_plan_, constants.beta1, constants.beta2, constants.eps, step, stream_);
            layer_norms_sum(layer_adaptive_plan_, stream_);
            sum_norms_over_ranks();
            lamb_apply(layer_adaptive_plan_, constants.eps, step, stream_);
            break;
        case OptimizerKind::LARS:
            lars_norms(layer_adaptive_plan_, step, stream_);
            layer_norms_sum(layer_adaptive_plan_, stream_);
            sum_norms_over_ranks();
            lars_apply(layer_adaptive_plan_, constants.momentum, constants.trust_coefficient, step, stream_);
            break;
        case OptimizerKind::MUON:  // refused by train_gpt before a model is made
            fail("--optimizer muon: the CUDA trainer does not run Muon yet; use train_gpt_cpu");
    }
    CUDA_CHECK(cudaGetLastError());
}

void Optimizer::set_master_weights(const std::vector<float>& weights) {
    if (master_) copy_to_device(master_, place(state_placement(), weights), stream_);
}

void Optimizer::set_state(const std::vector<float>& master, const std::vector<float>& m,
                          const std::vector<float>& v) {
    const Placement placement = state_placement();
    set_placed_state(master_ ? place(placement, master) : std::vector<float>(), place(placement, m),
                     place(placement, v));
}

Placement Optimizer::state_placement() const {
    return shard_placement(params_.buckets(), params_.rank(), params_.sharding().optimizer_state);
}

void Optimizer::set_placed_state(const std::vector<float>& master, const std::vector<float>& m,
                                 const std::vector<float>& v) {
    if (master_) copy_to_device(master_, master, stream_);
    copy_to_device(adam_m_, m, stream_);
    if (adam_v_) copy_to_device(adam_v_, v, stream_);  // LARS keeps no v (its files hold zeros)
}

OptimizerPart Optimizer::state_part() {
    if (!params_.writes_state()) return OptimizerPart();  // a copy of another group's shards
    const ParamBuckets& b = params_.buckets();
    const bool sharded = params_.sharding().optimizer_state;
    const size_t S = params_.state_size();
    // Each array is read into the host once and packed there (state_values), one at a time.
    auto written = [&](std::vector<float> state) { return state_values(b, params_.rank(), sharded, std::move(state)); };
    OptimizerPart part;
    part.ranges = state_ranges(b, params_.rank(), sharded);
    part.master = written(master_ ? copy_from_device(master_, S, stream_) : params_.working_weights_in_state_order());
    part.m = written(copy_from_device(adam_m_, S, stream_));
    part.v = written(adam_v_ ? copy_from_device(adam_v_, S, stream_) : std::vector<float>(S, 0.0f));
    return part;
}
