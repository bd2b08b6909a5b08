// The optimizer over the parameters this rank updates (ParameterStore::owned(): every parameter, or
// under ZeRO its chunk of every bucket), with the fp32 master weights and the state it keeps for them,
// reading the step's learning rate, corrections and clipping factor from device memory, so that the
// update needs nothing from the host that changes between steps (a CUDA graph replays it):
//   AdamW  one launch of the multi-tensor kernel (kernels/adamw.h); bitwise the per-run updates
//          (adamw_update) of the same values. Keeps m and v.
//   LAMB   three launches (kernels/layer_adaptive.h): the moments and each tensor's sums of squares,
//   LARS   the sums per tensor, then the update scaled by each tensor's trust ratio. Between the second
//          and the third the sums are added across every rank (sum_norms_over_ranks): a tensor's
//          pieces lie on several ranks (ZeRO's chunks, tensor-parallel slices), so its norm needs
//          all of them. Each element counts once: copies (a tensor replicated over the tensor group,
//          the classifier's copy of the embedding on a pipeline's last stage, other data ranks'
//          copies without ZeRO, other sharding groups' shards) are left out of the sums, exactly the
//          elements a rank leaves out of its checkpoint's state. LAMB keeps m and v, LARS its momentum
//          buffer in m and no v (4 bytes per parameter less).
// Tensors are numbered as the family's parameter table numbers them (ParamTable::tensor_index; each
// layer's copy of a per-layer tensor is its own tensor; GPT-2: base/model_tensors.h's list), the same
// on every rank.
#pragma once
#include <vector>

#include <nccl.h>

#include "base/model_part.h"
#include "base/train_model.h"
#include "kernels/adamw.h"
#include "kernels/device_arena.h"
#include "kernels/layer_adaptive.h"
#include "parallel/comm/parameter_store.h"
#include "parallel/plan/traffic.h"

class Optimizer {
public:
    // fp32_master: keep fp32 master weights beside the working ones (bf16 storage, unless -w 0); kind
    // and adaptation: --optimizer and --layer-adaptation. The model's tensors are the parameter
    // buckets' table (parallel/plan/param_table.h).
    Optimizer(ParameterStore& params, bool fp32_master, OptimizerKind kind = OptimizerKind::ADAMW,
              LayerAdaptation adaptation = LayerAdaptation::ALL)
        : params_(params), use_master_(fp32_master), kind_(kind), adaptation_(adaptation),
          tensors_(params.buckets().table.tensor_count()) {}
    Optimizer(const Optimizer&) = delete;
    Optimizer& operator=(const Optimizer&) = delete;

    bool keeps_master_weights() const { return use_master_; }
    // Requests the master weights, the moments and the update's run table (nothing is allocated).
    void request_memory(DeviceArena* arena);
    // Once the arena is allocated: the state zeroed, the run table filled, on `stream`. everyone: a
    // communicator over every rank (null: one process), for LAMB's and LARS's sums.
    void start(cudaStream_t stream, ncclComm_t everyone = nullptr, bool everyone_within_node = true);
    // One step of the optimizer over every owned run; `step` in device memory (kernels/adamw.h).
    void step(const AdamWDeviceStep* step, const OptimizerSettings& constants);
    OptimizerKind kind() const { return kind_; }
    // What the sums' all-reduce sends per step (LAMB, LARS; nothing for AdamW), counted as sent and
    // as planned.
    SentBytes bytes_sent() const { return bytes_sent_; }
    void reset_bytes_sent() { bytes_sent_ = SentBytes(); }
    // The step timers' hook (parallel/comm/collective_hook.h), for the layer-adaptive sums' all-reduce.
    void set_hook(CollectiveHook* hook) { hook_ = hook; }
    SentBytes planned_bytes(int ranks, bool within_node) const;

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
    bool layer_adaptive() const { return kind_ != OptimizerKind::ADAMW; }
    // LAMB, LARS: the table of owned runs with their tensors, and whether each counts in the sums.
    std::vector<LayerAdaptiveRun> layer_adaptive_runs() const;
    // The layer-adaptive plan's device bytes, before the arena places anything (its grid bounded).
    size_t layer_adaptive_bytes() const;
    // The per-tensor sums of squares added across every rank (on the compute stream).
    void sum_norms_over_ranks();

    ParameterStore& params_;  // its owned runs, their weights and gradients
    bool use_master_;
    OptimizerKind kind_;
    LayerAdaptation adaptation_;
    int tensors_;  // the model's tensors (LAMB, LARS: one pair of sums each)
    ncclComm_t everyone_ = nullptr;
    bool everyone_within_node_ = true;
    SentBytes bytes_sent_;
    CollectiveHook* hook_ = nullptr;
    unsigned char* layer_adaptive_memory_ = nullptr;  // LAMB, LARS: the plan's table and sums
    LayerAdaptivePlan layer_adaptive_plan_;
    cudaStream_t stream_ = nullptr;
    float* master_ = nullptr;  // fp32 master weights (null with -w 0 or in the fp32 build)
    float *adam_m_ = nullptr, *adam_v_ = nullptr;  // state order: this rank's shard, or all
    AdamWRunEntry* table_ = nullptr;                // the update's runs (kernels/adamw.h)
    AdamWMultiTensor plan_;
};
