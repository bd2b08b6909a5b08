// AdamW on the parameters this rank updates (ParameterStore::owned(): every parameter, or under ZeRO
// its chunk of every bucket), with the fp32 master weights and moments it keeps for them, in one
// launch of the multi-tensor kernel (kernels/adamw.h) that reads the step's learning rate, corrections
// and clipping factor from device memory, so that the update needs nothing from the host that
// changes between steps. Bitwise the per-run updates (adamw_update) of the same values.
#pragma once
#include <vector>

#include "base/model_part.h"
#include "base/train_model.h"
#include "kernels/adamw.h"
#include "kernels/device_arena.h"
#include "parallel/comm/parameter_store.h"

class Optimizer {
public:
    // fp32_master: keep fp32 master weights beside the working ones (bf16 storage, unless -w 0).
    Optimizer(ParameterStore& params, bool fp32_master) : params_(params), use_master_(fp32_master) {}
    Optimizer(const Optimizer&) = delete;
    Optimizer& operator=(const Optimizer&) = delete;

    bool keeps_master_weights() const { return use_master_; }
    // Requests the master weights, the moments and the update's run table (nothing is allocated).
    void request_memory(DeviceArena* arena);
    // Once the arena is allocated: the state zeroed, the run table filled, on `stream`.
    void start(cudaStream_t stream);
    // One AdamW step over every owned run; `step` in device memory (kernels/adamw.h).
    void step(const AdamWDeviceStep* step, const OptimizerSettings& constants);

    // ---- state in and out (host vectors of the whole model in ParamLayout order, fp32)
    void set_master_weights(const std::vector<float>& weights);
    void set_state(const std::vector<float>& master, const std::vector<float>& m, const std::vector<float>& v);
    // Where each element of the state this rank keeps goes (state order), and the state placed so.
    Placement state_placement() const;
    void set_placed_state(const std::vector<float>& master, const std::vector<float>& m,
                          const std::vector<float>& v);
    // What this rank's state file stores: the master weights and moments of its runs (its shard under
    // ZeRO, everything on data rank 0 otherwise; not the copies), with their ParamLayout ranges; nothing
    // in the sharding groups past the first under --shard-ranks (their shards are copies). Without
    // separate master weights they are the working ones.
    OptimizerPart state_part();

private:
    ParameterStore& params_;  // its owned runs, their weights and gradients
    bool use_master_;
    cudaStream_t stream_ = nullptr;
    float* master_ = nullptr;  // fp32 master weights (null with -w 0 or in the fp32 build)
    float *adam_m_ = nullptr, *adam_v_ = nullptr;  // state order: this rank's shard, or all
    AdamWRunEntry* table_ = nullptr;                // the update's runs (kernels/adamw.h)
    AdamWMultiTensor plan_;
};
