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
// The collectives, their order and their buffers are parallel/comm/parameter_store.h's.
#pragma once

struct ZeroSharding {
    bool optimizer_state = false;
    bool gradients = false;
    bool weights = false;

    // What -z asks for (0 with no communicator: nothing to shard across).
    static ZeroSharding of_stage(int stage) { return {stage >= 1, stage >= 2, stage >= 3}; }
    // The -z that asks for this.
    int stage() const { return weights ? 3 : gradients ? 2 : optimizer_state ? 1 : 0; }
};
