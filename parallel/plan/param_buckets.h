// Where each parameter lives on a rank's device, in buckets: the unit of communication across
// data-parallel ranks and of ZeRO sharding (parallel/comm/parameter_store.h).
//
// Files and the host keep a model's tensors in its family's file layout (GPT-2: the 16 tensors in
// ParamLayout order, wte, wpe, ln1w of every layer, ...; Llama 3: layer-major, base/llama_config.h).
// The family's table (parallel/plan/param_table.h) says where each tensor is there, how tensor
// parallelism cuts it and which bucket holds it. A rank's device keeps its slice of the tensors by
// bucket instead, so that everything one layer's backward pass finishes is one contiguous range that
// can be sent while the layers below are still being computed:
//   positions      GPT-2's wpe                                  (final last: the encoder's backward)
//   vocabulary     the token embedding (GPT-2: also the classifier, tied)
//   layer l        the layer's tensors
//   final norm     the final norm (Llama 3: also the untied lm_head)      (final first)
// in that order, each bucket's tensors in the table's order. A pipeline stage (-pp) holds the buckets
// of its layers only, the first stage also the positions and vocabulary, the last also the final norm
// and, for GPT-2, the vocabulary (the classifier's tied copy).
// Each bucket is padded to a multiple of 128·R elements (R = data ranks), so it splits into R equal
// chunks that are 256-byte aligned in bf16. Under ZeRO (-z 1, 2, 3), data rank r owns chunk r of every
// bucket: it keeps the fp32 master weights and AdamW moments of those elements only (its "shard", the
// chunks one after another; under -z 2 also their gradients, under -z 3 also their weights), receives
// their averaged gradients by a reduce-scatter, and updates them. The padding is never updated.
//
// Tensor parallelism (-tp T, Megatron-LM's layout, param_table.h's TensorSplit): for GPT-2, tensor
// rank t holds
//   qkvw, qkvb   rows [t·C/T, (t+1)·C/T) of each of the query, key and value thirds (its heads), in
//                that order: column-parallel, its output is (N, 3C/T) for NH/T heads
//   attprojw     columns [t·C/T, (t+1)·C/T) of every row: row-parallel, (C, C/T)
//   fcw, fcb     rows [t·4C/T, (t+1)·4C/T): column-parallel
//   fcprojw      columns [t·4C/T, (t+1)·4C/T) of every row: row-parallel, (C, 4C/T)
//   wte          vocabulary rows [t·Vs, (t+1)·Vs), Vs = vocab_slice_rows(Vp, T): the embedding and the
//                classifier vocab-parallel (rows past Vp, in the last slices, are zero padding)
//   the rest     whole on every tensor rank ("replicated": wpe, the LayerNorms, attprojb, fcprojb)
// and for Llama 3 its heads' rows of q_proj, k_proj and v_proj (so T divides H and KV), the columns
// of o_proj and down_proj, the rows of gate_proj and up_proj, the vocabulary rows of embed_tokens and
// lm_head, the norms replicated.
// The replicated tensors come first in their bucket, the norms' first of all (under sequence
// parallelism each tensor rank computes their gradients from its own positions, and the group sums
// them). With T = 1 every tensor is whole and this is the plain layout.
//
// Copies: a replicated tensor on tensor ranks other than 0, and the classifier's copy of wte on the
// last stage of a pipeline, are "unwritten": checkpoints take them from their first holder, and the
// gradient norm counts them there only.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "base/gpt_config.h"
#include "base/model_part.h"
#include "parallel/plan/param_table.h"

// A piece of one tensor (`tensor`: its id in the family's table) of one layer (0 outside the layers)
// that is contiguous on the device. In the file layout it is `length / row_length` rows of
// row_length elements, row_stride apart (one row when contiguous there too).
struct ParamSegment {
    int tensor, layer;
    size_t device_offset, length;
    size_t layout_offset, row_length, row_stride;
    // Stochastic rounding's counter for the first element (kernels/adamw.h): unique per element of
    // the model across the tensor group, the same on every tensor rank for replicated tensors.
    size_t key_offset;
    bool written;  // this rank writes it to checkpoints and counts it in the gradient norm (not a copy)
};

struct ParamBucket {
    size_t offset, length;  // device order; length is padded to a multiple of 128·ranks
    int first_segment, segment_count;
    size_t unwritten;        // elements at its start that are copies (see above)
    size_t sequence_summed;  // elements at its start whose gradients sequence parallelism sums
};

// What of the model a rank's device holds: its tensor-parallel slice of the layers of its pipeline
// stage.
struct ModelSlice {
    int tensor_rank = 0, tensor_ranks = 1;
    int first_layer = 0, end_layer = -1;  // layers [first_layer, end_layer); -1: to the last
    bool first_stage = true, last_stage = true;
};

struct ParamBuckets {
    int num_ranks = 1;  // data ranks: the chunks of each bucket
    ModelSlice slice;
    std::vector<ParamSegment> segments;
    std::vector<ParamBucket> buckets;
    ParamTable table;         // the family's tensors
    size_t total = 0;         // device elements, padding included
    size_t layout_total = 0;  // the whole model's parameters (the file layout)
    size_t channels = 0;      // the model's C (the weight matrices' row lengths derive from it)

    // Each bucket's index, -1 where this rank's stage has none.
    int position_bucket() const { return position_bucket_; }
    int vocabulary_bucket() const { return vocabulary_bucket_; }
    int layer_bucket(int layer) const { return first_layer_bucket_ + (layer - slice.first_layer); }
    int final_norm_bucket() const { return final_norm_bucket_; }
    int first_layer() const { return slice.first_layer; }
    int end_layer() const { return slice.end_layer; }
    size_t device_offset(int tensor, int layer = 0) const;
    // The bucket holding tensor t of layer l (l ignored outside the layers), and where the tensor
    // starts inside it.
    int bucket_of(int tensor, int layer = 0) const;
    size_t offset_in_bucket(int tensor, int layer = 0) const {
        return device_offset(tensor, layer) - buckets[bucket_of(tensor, layer)].offset;
    }
    // What each rank owns of a bucket under ZeRO, and of all buckets (its shard).
    size_t chunk(int bucket) const { return buckets[bucket].length / num_ranks; }
    size_t shard_size() const;

    int first_layer_bucket_ = 0;
    int position_bucket_ = -1, vocabulary_bucket_ = -1, final_norm_bucket_ = -1;
};

// Rows of the padded vocabulary Vp per tensor rank: Vp / T rounded up to a multiple of 8 (16-byte
// rows of bf16 logits for cuBLASLt).
inline size_t vocab_slice_rows(size_t Vp, size_t T) { return ((Vp + T - 1) / T + 7) / 8 * 8; }

// The buckets of `slice` (the whole model by default), for `num_ranks` data ranks, of the family whose
// table is given (a tensor that the slice's tensor ranks cannot split evenly is an error); of GPT-2.
ParamBuckets make_param_buckets(const ParamTable& table, int num_ranks, ModelSlice slice = ModelSlice());
ParamBuckets make_param_buckets(const GPTConfig& config, int num_ranks, ModelSlice slice = ModelSlice());

// Calls f(layout_offset, index, count) for each run of `count` elements of segment s, starting at
// element `from` of the segment and `n` long, that is contiguous in the file layout; `index` counts
// from `from`.
template <typename F>
void for_each_layout_run(const ParamSegment& s, size_t from, size_t n, F&& f) {
    for (size_t done = 0; done < n;) {
        const size_t at = from + done, row = at / s.row_length, column = at % s.row_length;
        const size_t count = std::min(n - done, s.row_length - column);
        f(s.layout_offset + row * s.row_stride + column, done, count);
        done += count;
    }
}

// A run of elements a rank updates: `length` parameters starting at `device_offset`, whose optimizer
// state is at `state_offset` of the rank's state arrays (shard order under ZeRO, device order
// otherwise), all inside segment `segment` starting at its element `in_segment` (so inside one tensor:
// one weight-decay setting); `key_offset` is the first one's stochastic-rounding counter.
struct OwnedRun {
    int tensor, segment;
    size_t device_offset, state_offset, key_offset, in_segment, length;
};
// The runs data rank `rank` updates: its chunk of every bucket when sharded, everything otherwise.
std::vector<OwnedRun> owned_runs(const ParamBuckets& buckets, int rank, bool sharded);

// Host conversions between the whole model in the file layout and this rank's device order
// (its slice; padding zero): where each element of the model goes, and the conversion.
Placement device_placement(const ParamBuckets& buckets);
std::vector<float> to_device_order(const ParamBuckets& buckets, const std::vector<float>& layout_order);
// The part of device-order values that this rank writes to a checkpoint (its segments but the copies).
ModelPart device_part(const ParamBuckets& buckets, std::vector<float> device_order);
// A rank's optimizer state (state order, see OwnedRun) from the whole model's (where each element
// goes, and the conversion), and the part of it the rank writes (its runs but the copies') with their
// file-layout ranges.
Placement shard_placement(const ParamBuckets& buckets, int rank, bool sharded);
std::vector<float> gather_shard(const ParamBuckets& buckets, int rank, bool sharded,
                                const std::vector<float>& layout_order);
std::vector<LayoutRange> state_ranges(const ParamBuckets& buckets, int rank, bool sharded);
std::vector<float> state_values(const ParamBuckets& buckets, int rank, bool sharded, std::vector<float> state);
