// Where this rank sits in the run and what of the model it holds: its pipeline stage's layers, the
// world of ranks it belongs to, and what the run's settings make of them (what ZeRO shards, sequence
// parallelism, fp32 master weights).
#pragma once
#include <nccl.h>

#include <vector>

#include "base/model_shape.h"
#include "base/ranks.h"
#include "base/optimizer_settings.h"
#include "base/train_options.h"
#include "parallel/plan/mesh.h"
#include "parallel/plan/param_buckets.h"
#include "parallel/plan/pipeline_schedule.h"
#include "parallel/plan/zero_sharding.h"

// The part of the model this rank's pipeline stage computes, and how many micro-batches' activations
// it keeps at once (its schedule's in-flight count; 1 without a pipeline).
struct PipelineStage {
    int first_layer, end_layer, slots;
    bool first, last;
    int layers() const { return end_layer - first_layer; }
};
inline PipelineStage make_pipeline_stage(const ModelShape& shape, const TrainOptions& opt, const Mesh& mesh, int micro_steps) {
    const std::vector<int> first = stage_layers(shape, opt.seq_len, mesh.pipeline);
    return {first[mesh.stage], first[mesh.stage + 1],
            micro_batches_in_flight(opt.pp_schedule, mesh.pipeline, mesh.stage, micro_steps), mesh.first_stage(),
            mesh.last_stage()};
}

// This process among the ranks of the run: the host group (MPI) and the world's NCCL communicator (null
// without an MPI launcher: then there is nothing to communicate). The model places itself in the mesh
// of -tp and -pp (parallel/plan/mesh.h) and splits the communicator into its groups'.
struct WorldRanks {
    RankGroup* ranks;
    ncclComm_t nccl = nullptr;
    int rank() const { return ranks ? ranks->rank : 0; }
    int num_ranks() const { return ranks ? ranks->num_ranks : 1; }
};

// What ZeRO shards in a run: what -z asks for, when there is a communicator (several ranks, or one
// started by an MPI launcher).
inline ZeroSharding zero_sharding(const TrainOptions& opt, bool communicates) {
    return ZeroSharding::of_stage(communicates ? opt.zero_stage : 0);
}

// Ranks per node, for the traffic split (parallel/plan/traffic.h): --node-ranks, else the ranks the
// launcher put on this machine, else (one process: --dry-run) kDryRunNodeRanks.
inline int planned_node_ranks(const TrainOptions& opt, const RankGroup* ranks) {
    if (opt.node_ranks > 0) return opt.node_ranks;
    return ranks ? ranks->node_ranks : kDryRunNodeRanks;
}

// Whether every rank of the mesh sits on one node (the collectives over all of them stay within it).
inline bool world_within_one_node(const Mesh& mesh) { return mesh.node_ranks <= 0 || mesh.size() <= mesh.node_ranks; }

// Sequence parallelism: -sp, on by default with -tp > 1.
inline bool sequence_parallel(const TrainOptions& opt) {
    return opt.tensor_parallel > 1 && opt.sequence_parallel != 0;
}

// The optimizer --optimizer names (checked by the flags before a model is made), and the tensors
// LAMB and LARS rescale (--layer-adaptation).
inline OptimizerKind optimizer_kind(const TrainOptions& opt) {
    OptimizerKind kind = OptimizerKind::ADAMW;
    parse_optimizer_kind(opt.optimizer.c_str(), &kind);
    return kind;
}
inline LayerAdaptation layer_adaptation(const TrainOptions& opt) {
    return opt.layer_adaptation == "matrices" ? LayerAdaptation::MATRICES : LayerAdaptation::ALL;
}

// fp32 master weights beside the working weights: with bf16 storage unless -w 0.
inline bool fp32_master_weights(const TrainOptions& opt) {
#ifdef ENABLE_FP32
    (void)opt;
    return false;  // the working weights are fp32 already
#else
    return opt.fp32_master != 0;
#endif
}

// The slice of the model a rank holds: its tensor rank's slice of its stage's layers.
inline ModelSlice model_slice(const Mesh& mesh, const PipelineStage& stage) {
    return {mesh.tensor_rank, mesh.tensor, stage.first_layer, stage.end_layer, stage.first, stage.last};
}
