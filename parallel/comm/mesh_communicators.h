// The NCCL communicators of one rank's groups in the mesh (parallel/plan/mesh.h), split from the world's
// communicator with ncclCommSplit (a collective: every rank makes the same calls in the same order).
//   data      the ranks with this rank's (stage, tensor rank): gradients are reduced, ZeRO shards
//             gathered, over it (the loss averaged, under hybrid sharding)
//   shard     hybrid sharding (--shard-ranks) only: this rank's sharding group, over which ZeRO
//             reduce-scatters and gathers
//   weight_gathers  ZeRO-3 (sharded weights) over a sharding group of 2 ranks or more: a second
//             communicator over that group, for the weight gathers, which run on a stream of their
//             own beside the gradient reductions
//   replicas  hybrid sharding only: the data ranks holding this rank's shard, one per sharding group;
//             each shard's reduced gradients are averaged over it
//   tensor    the ranks with this rank's (stage, data rank): parallel/comm/tensor_parallel.h (two
//             communicators over them: the second, tensor_overlap, carries the gathers that overlap
//             compute)
//   pipeline  the ranks with this rank's (data rank, tensor rank): activations pass along it; its
//             first and last stage share the tied embedding (their own communicator with 3 stages or
//             more, the pipeline's otherwise)
// A group of one rank gets no communicator (null), except the data group and, under hybrid sharding,
// the shard and replica groups, which have one whenever the world does (ZeRO's code paths then run
// over one rank). Without a world communicator (one process,
// no MPI launcher) all are null. The two that only serve overlap (weight_gathers, tensor_overlap) are
// null where NCCL cannot run communicators at once safely (parallel/comm/launch_order.h): their
// collectives then run in line on the other communicator.
#pragma once
#include <vector>

#include <nccl.h>

#include "parallel/plan/mesh.h"

struct MeshCommunicators {
    ncclComm_t data = nullptr, shard = nullptr, replicas = nullptr, weight_gathers = nullptr;
    ncclComm_t tensor = nullptr, tensor_overlap = nullptr, pipeline = nullptr;
    ncclComm_t tied_embedding = nullptr;  // the first and last stage of the pipeline (3 stages or more)
    bool data_is_world = false;  // the world's own communicator, not split (and not ours to destroy)
};

// sharded_weights: ZeRO-3; overlap: communicators_may_overlap() (launch_order.h).
MeshCommunicators split_mesh_communicators(ncclComm_t world, const Mesh& mesh, bool sharded_weights, bool overlap);
void destroy_mesh_communicators(MeshCommunicators* communicators);
// The sizes (ranks) of the communicators split_mesh_communicators gives the rank at `mesh`'s
// coordinates, beside the world's (first, where `communicates`), for the planner (gpu/device_overhead.h).
std::vector<int> mesh_communicator_sizes(const Mesh& mesh, bool communicates, bool sharded_weights, bool overlap);
