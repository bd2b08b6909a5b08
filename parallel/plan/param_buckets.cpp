// Parameter buckets, tensor-parallel slices and ZeRO shards (see param_buckets.h).
#include "parallel/plan/param_buckets.h"

#include <algorithm>
#include <cstring>

#include "base/errors.h"
#include "base/host_arrays.h"

constexpr size_t BUCKET_ALIGN = 128;  // elements: 256 bytes of bf16

namespace {

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// Appends segments and buckets to a ParamBuckets in device order.
class BucketBuilder {
public:
    explicit BucketBuilder(ParamBuckets* b) : b_(b) {}

    void begin() { bucket_ = {b_->total, 0, (int)b_->segments.size(), 0, 0, 0}, at_ = b_->total, copies_ = true; }
    // A tensor piece that is `length / row_length` rows of row_length elements, row_stride apart, in
    // the file layout; merged into the previous segment where it continues it in both orders.
    void add(int tensor, int layer, size_t layout_offset, size_t length, size_t row_length, size_t row_stride,
             size_t key_offset, bool written) {
        if (row_stride == row_length) row_length = row_stride = length;  // contiguous after all
        std::vector<ParamSegment>& segments = b_->segments;
        const bool first = (int)segments.size() == bucket_.first_segment;
        ParamSegment* last = first ? nullptr : &segments.back();
        if (last && last->tensor == tensor && last->layer == layer && last->row_length == last->length &&
            row_length == length && last->layout_offset + last->length == layout_offset &&
            last->key_offset + last->length == key_offset && last->written == written) {
            last->length += length;
            last->row_length = last->row_stride = last->length;
        } else {
            segments.push_back({tensor, layer, at_, length, layout_offset, row_length, row_stride, key_offset,
                                written});
        }
        at_ += length;
        copies_ = copies_ && !written;  // copies come first in a bucket
        if (copies_) bucket_.unwritten += length;
    }
    void add_contiguous(int tensor, int layer, size_t layout_offset, size_t length, bool written) {
        add(tensor, layer, layout_offset, length, length, length, layout_offset, written);
    }
    // Device elements that belong to no tensor (zero, never updated).
    void add_gap(size_t length) { at_ += length; }
    void end(size_t sequence_summed) {
        bucket_.segment_count = (int)b_->segments.size() - bucket_.first_segment;
        bucket_.sequence_summed = sequence_summed;
        bucket_.length = round_up(at_ - b_->total, BUCKET_ALIGN * b_->num_ranks);
        b_->total += bucket_.length;
        b_->buckets.push_back(bucket_);
    }

private:
    ParamBuckets* b_;
    ParamBucket bucket_{};
    size_t at_ = 0;
    bool copies_ = true;  // every segment so far is a copy
};

// Adds tensor rank t's part of tensor s of layer l (0 outside the layers) to the bucket being built
// (the splits: param_table.h); a copy is neither written to checkpoints nor counted in the norm.
void add_rank_part(BucketBuilder* bucket, const ParamSpec& s, size_t l, const ModelSlice& slice, bool copy) {
    const size_t t = slice.tensor_rank, T = slice.tensor_ranks, rows = s.rows, cols = s.row_length;
    const size_t base = s.offset + l * s.layer_stride;  // where the tensor of layer l starts in the file layout
    switch (s.split) {
        case TensorSplit::REPLICATED:  // tensor rank 0 writes it
            bucket->add_contiguous(s.id, l, base, s.size(), t == 0 && !copy);
            break;
        case TensorSplit::HEADS:
        case TensorSplit::COLUMN: {  // this rank's rows of each block
            const size_t blocks = s.split == TensorSplit::HEADS ? s.blocks : 1, R = rows / blocks;
            for (size_t block = 0; block < blocks; block++)
                bucket->add_contiguous(s.id, l, base + (block * R + t * R / T) * cols, R / T * cols, !copy);
            break;
        }
        case TensorSplit::ROW:  // this rank's columns of every row; its key counter: the rank's block of the tensor
            bucket->add(s.id, l, base + t * cols / T, rows * cols / T, cols / T, cols, base + t * rows * cols / T,
                        !copy);
            break;
        case TensorSplit::VOCABULARY: {  // the last slices may reach past the rows the model has
            const size_t Vs = vocab_slice_rows(rows, T), first = std::min(rows, t * Vs);
            const size_t n = std::min(rows, first + Vs) - first;
            bucket->add_contiguous(s.id, l, base + first * cols, n * cols, !copy);
            bucket->add_gap((Vs - n) * cols);
            break;
        }
    }
}

// Whether tensor parallelism over T ranks can cut tensor s as its split says.
bool splits_evenly(const ParamSpec& s, size_t T) {
    switch (s.split) {
        case TensorSplit::HEADS: return s.rows % (s.blocks * s.head_rows * T) == 0;  // whole heads per rank
        case TensorSplit::COLUMN: return s.rows % T == 0;
        case TensorSplit::ROW: return s.row_length % T == 0;
        default: return true;
    }
}

}  // namespace

ParamBuckets make_param_buckets(const ParamTable& table, int num_ranks, ModelSlice slice) {
    if (slice.end_layer < 0) slice.end_layer = table.num_layers;
    ParamBuckets b;
    b.num_ranks = num_ranks, b.slice = slice, b.table = table;
    b.layout_total = table.layout_total, b.channels = table.channels;
    for (const ParamSpec& s : table.tensors) {
        if (splits_evenly(s, slice.tensor_ranks)) continue;
        const std::string heads = s.split == TensorSplit::HEADS ? strprintf(", heads of %zu rows", s.head_rows) : "";
        fail("%d tensor-parallel ranks cannot split %s (%zu x %zu%s) evenly", slice.tensor_ranks, s.name.c_str(),
             s.rows, s.row_length, heads.c_str());
    }
    BucketBuilder bucket(&b);
    // One bucket of the tensors of `group` (of layer l), where the table has any; returns its index.
    auto add_bucket = [&](ParamGroup group, size_t l, bool copy) {
        size_t sequence_summed = 0;
        bucket.begin();
        for (const ParamSpec& s : table.tensors) {
            if (s.group != group) continue;
            add_rank_part(&bucket, s, l, slice, copy);
            if (s.sequence_summed) sequence_summed += s.size();
        }
        bucket.end(sequence_summed);
        return (int)b.buckets.size() - 1;
    };
    auto has = [&](ParamGroup group) {
        for (const ParamSpec& s : table.tensors)
            if (s.group == group) return true;
        return false;
    };
    if (slice.first_stage && has(ParamGroup::POSITIONS))
        b.position_bucket_ = add_bucket(ParamGroup::POSITIONS, 0, false);
    // On a last stage that is not also the first, a tied classifier's copy of the vocabulary.
    if (slice.first_stage || (slice.last_stage && table.tied_classifier))
        b.vocabulary_bucket_ = add_bucket(ParamGroup::VOCABULARY, 0, !slice.first_stage);
    b.first_layer_bucket_ = (int)b.buckets.size();
    for (size_t l = slice.first_layer; l < (size_t)slice.end_layer; l++) add_bucket(ParamGroup::LAYER, l, false);
    if (slice.last_stage) b.final_norm_bucket_ = add_bucket(ParamGroup::FINAL_NORM, 0, false);
    return b;
}

ParamBuckets make_param_buckets(const GPTConfig& c, int num_ranks, ModelSlice slice) {
    return make_param_buckets(gpt2_param_table(c), num_ranks, slice);
}

size_t ParamBuckets::device_offset(int tensor, int layer) const {
    const ParamBucket& b = buckets[bucket_of(tensor, layer)];
    for (int i = 0; i < b.segment_count; i++)
        if (segments[b.first_segment + i].tensor == tensor) return segments[b.first_segment + i].device_offset;
    return b.offset;  // unreachable: every tensor has a segment in its bucket
}

int ParamBuckets::bucket_of(int tensor, int layer) const {
    switch (table.spec(tensor).group) {
        case ParamGroup::POSITIONS: return position_bucket();
        case ParamGroup::VOCABULARY: return vocabulary_bucket();
        case ParamGroup::FINAL_NORM: return final_norm_bucket();
        default: return layer_bucket(layer);
    }
}

size_t ParamBuckets::shard_size() const {
    size_t n = 0;
    for (const ParamBucket& bucket : buckets) n += bucket.length / num_ranks;
    return n;
}

std::vector<OwnedRun> owned_runs(const ParamBuckets& b, int rank, bool sharded) {
    std::vector<OwnedRun> runs;
    size_t state_at = 0;
    for (const ParamBucket& bucket : b.buckets) {
        const size_t chunk = sharded ? bucket.length / b.num_ranks : bucket.length;
        const size_t begin = bucket.offset + (sharded ? rank * chunk : 0), end = begin + chunk;
        for (int i = 0; i < bucket.segment_count; i++) {
            const int index = bucket.first_segment + i;
            const ParamSegment& s = b.segments[index];
            const size_t from = std::max(begin, s.device_offset);
            const size_t to = std::min(end, s.device_offset + s.length);
            if (from >= to) continue;
            const size_t in_segment = from - s.device_offset;
            runs.push_back({s.tensor, index, from, state_at + (from - begin), s.key_offset + in_segment, in_segment,
                            to - from});
        }
        state_at += chunk;
    }
    return runs;
}

Placement device_placement(const ParamBuckets& b) {
    Placement placement;
    placement.size = b.total;
    for (const ParamSegment& s : b.segments)
        for_each_layout_run(s, 0, s.length, [&](size_t layout_at, size_t index, size_t count) {
            placement.ranges.push_back({layout_at, count, s.device_offset + index});
        });
    return placement;
}

std::vector<float> to_device_order(const ParamBuckets& b, const std::vector<float>& layout_order) {
    return place(device_placement(b), layout_order);
}

// The values of `source` at the runs (from, count) in order, one after the other. A checkpoint's
// arrays are hundreds of MiB: where every run moves towards the front (each starts at or after where
// it lands, and after the run before it ends), they are packed in place, without a second array to
// allocate and fault in; otherwise they are copied into a reused one (base/host_arrays.h).
static std::vector<float> pick_runs(std::vector<float> source, const std::vector<std::pair<size_t, size_t>>& runs) {
    size_t to = 0, read_end = 0;
    bool in_place = true;
    for (const auto& [from, count] : runs) {
        in_place = in_place && from >= to && from >= read_end;
        to += count, read_end = from + count;
    }
    if (in_place) {
        size_t at = 0;
        for (const auto& [from, count] : runs) {
            if (from != at) std::memmove(source.data() + at, source.data() + from, count * sizeof(float));
            at += count;
        }
        source.resize(at);
        return source;
    }
    std::vector<float> picked = reusable_host_array(to);
    size_t at = 0;
    for (const auto& [from, count] : runs) {
        std::copy(source.begin() + from, source.begin() + from + count, picked.begin() + at);
        at += count;
    }
    reuse_host_array(std::move(source));
    return picked;
}

ModelPart device_part(const ParamBuckets& b, std::vector<float> device_order) {
    ModelPart part;
    std::vector<std::pair<size_t, size_t>> runs;
    for (const ParamSegment& s : b.segments) {
        if (!s.written) continue;
        for_each_layout_run(s, 0, s.length, [&](size_t layout_at, size_t index, size_t count) {
            append_range(&part.ranges, layout_at, count);
            runs.push_back({s.device_offset + index, count});
        });
    }
    part.values = pick_runs(std::move(device_order), runs);
    return part;
}

static size_t state_size(const ParamBuckets& b, bool sharded) {
    return sharded ? b.shard_size() : b.total;
}

Placement shard_placement(const ParamBuckets& b, int rank, bool sharded) {
    Placement placement;
    placement.size = state_size(b, sharded);
    for (const OwnedRun& r : owned_runs(b, rank, sharded))
        for_each_layout_run(b.segments[r.segment], r.in_segment, r.length,
                            [&](size_t layout_at, size_t index, size_t count) {
                                placement.ranges.push_back({layout_at, count, r.state_offset + index});
                            });
    return placement;
}

std::vector<float> gather_shard(const ParamBuckets& b, int rank, bool sharded,
                                const std::vector<float>& layout_order) {
    return place(shard_placement(b, rank, sharded), layout_order);
}

// The runs whose state this rank writes: without sharding, data rank 0 writes for every data rank;
// copies are left to their first holder.
template <typename F>
static void for_each_written_run(const ParamBuckets& b, int rank, bool sharded, F&& f) {
    if (!sharded && rank != 0) return;
    for (const OwnedRun& r : owned_runs(b, rank, sharded))
        if (b.segments[r.segment].written) f(r);
}

std::vector<LayoutRange> state_ranges(const ParamBuckets& b, int rank, bool sharded) {
    std::vector<LayoutRange> ranges;
    for_each_written_run(b, rank, sharded, [&](const OwnedRun& r) {
        for_each_layout_run(b.segments[r.segment], r.in_segment, r.length,
                            [&](size_t layout_at, size_t, size_t count) { append_range(&ranges, layout_at, count); });
    });
    return ranges;
}

std::vector<float> state_values(const ParamBuckets& b, int rank, bool sharded, std::vector<float> state) {
    std::vector<std::pair<size_t, size_t>> runs;
    for_each_written_run(b, rank, sharded, [&](const OwnedRun& r) {
        for_each_layout_run(b.segments[r.segment], r.in_segment, r.length,
                            [&](size_t, size_t index, size_t count) { runs.push_back({r.state_offset + index, count}); });
    });
    return pick_runs(std::move(state), runs);
}
