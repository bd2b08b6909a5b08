// The mesh of ranks: every rank of a run is one cell of a data × pipeline × tensor grid.
//
//   tensor    -tp N   ranks that split each layer's weights and compute (tensor parallelism); the
//                     innermost axis, so a group is N consecutive ranks: one node, fast links
//   pipeline  -pp N   ranks that hold consecutive stages of the layers (pipeline parallelism)
//   data      the rest: replicas of the whole pipeline that read different batches (data
//                     parallelism, with the ZeRO stage of -z within each data group)
//
// world rank = (data_rank · pipeline + stage) · tensor + tensor_rank. A data group is the ranks with
// the same (stage, tensor_rank); a tensor group the same (data_rank, stage); a pipeline the same
// (data_rank, tensor_rank). Each group gets its own NCCL communicator (split from the world's).
#pragma once
#include <string>

struct Mesh {
    int data = 1, pipeline = 1, tensor = 1;          // group sizes: their product is the rank count
    int data_rank = 0, stage = 0, tensor_rank = 0;  // this rank's coordinates

    int size() const { return data * pipeline * tensor; }
    int world_rank(int data_rank_, int stage_, int tensor_rank_) const {
        return (data_rank_ * pipeline + stage_) * tensor + tensor_rank_;
    }
    bool first_stage() const { return stage == 0; }
    bool last_stage() const { return stage == pipeline - 1; }
    // "2 data x 2 pipeline x 2 tensor"
    std::string shape() const;
    // "data 1 of 2, stage 0 of 2, tensor 1 of 2"
    std::string coordinates() const;
};

// The mesh of `num_ranks` ranks for tensor groups of `tensor` and pipelines of `pipeline` ranks, as
// seen by world rank `rank`. Throws InputError (naming -tp and -pp) when they do not divide the ranks.
Mesh make_mesh(int num_ranks, int rank, int tensor, int pipeline);
