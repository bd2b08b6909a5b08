// Where each parameter lives on the device, in buckets: the unit of communication across
// data-parallel ranks and of ZeRO sharding (parallel/zero.h).
//
// Files and the host keep the 16 tensors in ParamLayout order (wte, wpe, ln1w of every layer, ...).
// The device keeps them by bucket instead, so that everything one layer's backward pass finishes is
// one contiguous range that can be sent while the layers below are still being computed:
//   bucket 0        wte, wpe                      (final last: the encoder's backward ends the pass)
//   bucket 1 + l    layer l's 12 tensors           (final when layer l's backward is done)
//   bucket L + 1    lnfw, lnfb                     (final first)
// Each bucket is padded to a multiple of 128·R elements (R = ranks), so it splits into R equal
// chunks that are 256-byte aligned in bf16. Under ZeRO (-z 1, 2, 3), rank r owns chunk r of every
// bucket: it keeps the fp32 master weights and AdamW moments of those elements only (its "shard", the
// chunks one after another; under -z 2 also their gradients, under -z 3 also their weights), receives
// their averaged gradients by a reduce-scatter, and updates them. Any parameter count works: the
// padding is never updated.
#pragma once
#include <cstddef>
#include <vector>

#include "host/gpt_config.h"

// One tensor's slice for one layer (or the whole tensor, for wte, wpe, lnfw, lnfb).
struct ParamSegment {
    int tensor, layer;
    size_t layout_offset;  // first element in ParamLayout order
    size_t device_offset;  // first element in the bucketed device order
    size_t length;
};

struct ParamBucket {
    size_t offset, length;  // device order; length is padded to a multiple of 128·ranks
    int first_segment, segment_count;
};

struct ParamBuckets {
    int num_ranks = 1;
    std::vector<ParamSegment> segments;
    std::vector<ParamBucket> buckets;
    size_t total = 0;  // device elements, padding included

    size_t device_offset(int tensor, int layer = 0) const;
    int layer_bucket(int layer) const { return 1 + layer; }
    int embedding_bucket() const { return 0; }
    int final_norm_bucket() const { return (int)buckets.size() - 1; }
    int num_layers() const { return (int)buckets.size() - 2; }
    // The bucket holding tensor t of layer l (l ignored for wte, wpe, lnfw, lnfb), and where the
    // tensor starts inside it.
    int bucket_of(int tensor, int layer = 0) const;
    size_t offset_in_bucket(int tensor, int layer = 0) const {
        return device_offset(tensor, layer) - buckets[bucket_of(tensor, layer)].offset;
    }
    // What each rank owns of a bucket under ZeRO, and of all buckets (its shard).
    size_t chunk(int bucket) const { return buckets[bucket].length / num_ranks; }
    size_t shard_size() const;
};

ParamBuckets make_param_buckets(const GPTConfig& config, int num_ranks);

// A run of elements a rank updates: `length` parameters starting at `device_offset`, whose optimizer
// state is at `state_offset` of the rank's state arrays (shard order under ZeRO, device order
// otherwise), all inside one tensor (so one weight-decay setting) starting at `layout_offset`.
struct OwnedRun {
    int tensor;
    size_t device_offset, state_offset, layout_offset, length;
};
// The runs rank `rank` updates: its chunk of every bucket when sharded, everything otherwise.
std::vector<OwnedRun> owned_runs(const ParamBuckets& buckets, int rank, bool sharded);

// Host conversions between ParamLayout order (files) and device order (padding is zero).
std::vector<float> to_device_order(const ParamBuckets& buckets, const std::vector<float>& layout_order);
std::vector<float> to_layout_order(const ParamBuckets& buckets, const std::vector<float>& device_order);
// A rank's optimizer state from the whole model's (ParamLayout order), and back: state arrays are in
// the rank's state order (see OwnedRun); scatter_shard writes only the elements the rank owns.
std::vector<float> gather_shard(const ParamBuckets& buckets, int rank, bool sharded,
                                const std::vector<float>& layout_order);
void scatter_shard(const ParamBuckets& buckets, int rank, bool sharded,
                   const std::vector<float>& state, std::vector<float>* layout_order);
