// ZeRO (-z 0..3) as what each data-parallel rank shards of what it would otherwise keep whole. Three
// properties, each stage adding one to those of the stage before:
//   optimizer_state  -z 1 and up: the fp32 master weights and AdamW moments (12 bytes a parameter);
//                    data rank r keeps chunk r of every bucket (parallel/plan/param_buckets.h),
//                    receives those parameters' averaged gradients by a reduce-scatter and updates
//                    them, then every rank gathers every chunk's updated weights
//   gradients        -z 2 and up: the gradients too: each micro-step's are computed whole into a
//                    transient slot and reduce-scattered into the rank's chunk at once
//   weights          -z 3: the weights too: each bucket's are all-gathered from the chunks into a
//                    transient slot just before the forward or backward pass needs them, and the
//                    slot is released after
// Under hybrid sharding (--shard-ranks N) all three are sharded within each sharding group of N data
// ranks only, and kept whole across the groups: each shard's reduced gradients are then averaged over
// the groups (ShardGroups below, parallel/plan/mesh.h).
// The collectives, their order and their buffers are parallel/comm/parameter_store.h's.
#pragma once
#include "parallel/plan/mesh.h"
#include "parallel/plan/traffic.h"

struct ZeroSharding {
    bool optimizer_state = false;
    bool gradients = false;
    bool weights = false;

    // What -z asks for (0 with no communicator: nothing to shard across).
    static ZeroSharding of_stage(int stage) { return {stage >= 1, stage >= 2, stage >= 3}; }
    // The -z that asks for this.
    int stage() const { return weights ? 3 : gradients ? 2 : optimizer_state ? 1 : 0; }
};

// The groups a data rank's ZeRO collectives run over, and where their bytes travel (traffic.h).
struct ShardGroups {
    int data = 1;      // data ranks: the loss is averaged over them
    int replicas = 1;  // sharding groups, each with a copy of every shard (1: the data group shards)
    int replica = 0;   // this rank's sharding group
    bool data_within_node = true, shard_within_node = true, replicas_within_node = true;
};
inline ShardGroups shard_groups(const Mesh& m) {
    return {m.data, m.replicas(), m.replica(), within_one_node(m.data_group(), m.node_ranks),
            within_one_node(m.shard_group(), m.node_ranks), within_one_node(m.replica_group(), m.node_ranks)};
}
