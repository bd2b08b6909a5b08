// The mesh of ranks: every rank of a run is one cell of a pipeline × data × tensor grid.
//
//   tensor    -tp N   ranks that split each layer's weights and compute (tensor parallelism); the
//                     innermost axis, so a group is N consecutive ranks: one node, fast links
//   data      the rest: replicas of the whole pipeline that read different batches (data
//                     parallelism, with the ZeRO stage of -z within each sharding group)
//   pipeline  -pp N   ranks that hold consecutive stages of the layers (pipeline parallelism); the
//                     outermost axis: a stage's ranks are consecutive, and only activations cross
//                     between stages
//
// world rank = (stage · data + data_rank) · tensor + tensor_rank (Megatron-LM's and torchtitan's
// order: tensor innermost, pipeline outermost). A data group is the ranks with the same (stage,
// tensor_rank); a tensor group the same (stage, data_rank); a pipeline the same (data_rank,
// tensor_rank). Each group gets its own NCCL communicator (split from the world's).
//
// Hybrid sharding (--shard-ranks N, FSDP2's HSDP, ZeRO++'s hpZ): ZeRO shards within sharding groups
// of N consecutive data ranks (shard_rank = data_rank mod N; with -tp 1 N consecutive world ranks,
// one node) and the data_rank / N groups are replicas of each other; the ranks holding the same shard
// (the same shard_rank in every group) form a replica group. By default N is the whole data group.
#pragma once
#include <string>
#include <vector>

struct Mesh {
    int data = 1, pipeline = 1, tensor = 1;          // group sizes: their product is the rank count
    int shard = 1;                                   // data ranks per sharding group (divides data)
    int node_ranks = 0;                              // ranks per node (0: all on one node)
    int data_rank = 0, stage = 0, tensor_rank = 0;  // this rank's coordinates

    int size() const { return data * pipeline * tensor; }
    int world_rank(int data_rank_, int stage_, int tensor_rank_) const {
        return (stage_ * data + data_rank_) * tensor + tensor_rank_;
    }
    int shard_rank() const { return data_rank % shard; }  // within its sharding group
    int replica() const { return data_rank / shard; }     // which sharding group
    int replicas() const { return data / shard; }         // sharding groups: copies of each shard
    bool hybrid() const { return shard < data; }
    bool first_stage() const { return stage == 0; }
    bool last_stage() const { return stage == pipeline - 1; }

    // The world ranks of this rank's groups, in the order of their communicators' ranks.
    std::vector<int> data_group() const;
    std::vector<int> shard_group() const;    // its sharding group's data ranks
    std::vector<int> replica_group() const;  // the data ranks with its shard_rank
    std::vector<int> tensor_group() const;
    std::vector<int> pipeline_group() const;
    std::vector<int> tied_embedding_group() const;  // the first and last stage of its pipeline

    // "2 pipeline x 2 data x 2 tensor" (outermost first)
    std::string shape() const;
    // "stage 0 of 2, data 1 of 2, tensor 1 of 2"
    std::string coordinates() const;
};

// The mesh of `num_ranks` ranks for tensor groups of `tensor` and pipelines of `pipeline` ranks, as
// seen by world rank `rank`, sharding within groups of `shard` data ranks (0: the whole data group),
// on nodes of `node_ranks` ranks (0: one node). Throws InputError (naming -tp and -pp, or
// --shard-ranks) when they do not divide the ranks.
Mesh make_mesh(int num_ranks, int rank, int tensor, int pipeline, int shard = 0, int node_ranks = 0);
