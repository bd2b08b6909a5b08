// The optimizer (optimizer.h): AdamW's state beside the parameter store, and its one launch a step.
#include "gpu/optimizer.h"

#include <algorithm>

#include "base/errors.h"
#include "kernels/host_transfer.h"

void Optimizer::request_memory(DeviceArena* arena) {
    const size_t S = params_.state_size();
    if (use_master_) arena->request(&master_, S, MemoryKind::MASTER_WEIGHTS);
    arena->request(&adam_m_, S, MemoryKind::OPTIMIZER_STATE);
    arena->request(&adam_v_, S, MemoryKind::OPTIMIZER_STATE);
    arena->request(&table_, std::max<size_t>(1, params_.owned().size()), MemoryKind::OPTIMIZER_STATE);
}

void Optimizer::start(cudaStream_t stream) {
    stream_ = stream;
    const size_t S = params_.state_size();
    for (float* state : {master_, adam_m_, adam_v_})
        if (state) CUDA_CHECK(cudaMemsetAsync(state, 0, S * sizeof(float), stream_));
    // The update's table: every run this rank owns, in one launch (kernels/adamw.h).
    std::vector<AdamWRun> runs;
    for (const OwnedRun& run : params_.owned())
        runs.push_back({params_.weights_of(run), master_ ? master_ + run.state_offset : nullptr,
                        adam_m_ + run.state_offset, adam_v_ + run.state_offset, params_.reduced_gradients_of(run),
                        run.length, run.key_offset, is_weight_matrix(run.tensor), params_.reduced_gradients_fp32_of(run)});
    plan_ = adamw_multi_tensor_plan_in(table_, (int)std::max<size_t>(1, params_.owned().size()), runs.data(),
                                       (int)runs.size());
}

void Optimizer::step(const AdamWDeviceStep* step, const OptimizerSettings& constants) {
    if (constants.kind != OptimizerKind::ADAMW)  // the loop refuses other optimizers at start-up
        fail("internal error: the CUDA trainer's optimizer runs AdamW only, not %s", optimizer_name(constants.kind));
    adamw_update_multi_tensor(plan_, constants.beta1, constants.beta2, constants.eps, step, stream_);
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
    copy_to_device(adam_v_, v, stream_);
}

OptimizerPart Optimizer::state_part() {
    if (!params_.writes_state()) return OptimizerPart();  // a copy of another group's shards
    const ParamBuckets& b = params_.buckets();
    const bool sharded = params_.sharding().optimizer_state;
    const size_t S = params_.state_size();
    const std::vector<float> master =
        master_ ? copy_from_device(master_, S, stream_) : params_.working_weights_in_state_order();
    auto written = [&](const std::vector<float>& state) { return state_values(b, params_.rank(), sharded, state); };
    return {state_ranges(b, params_.rank(), sharded), written(master), written(copy_from_device(adam_m_, S, stream_)),
            written(copy_from_device(adam_v_, S, stream_))};
}
