// Parameter buckets, tensor-parallel slices and ZeRO shards (see param_buckets.h).
#include "parallel/plan/param_buckets.h"

constexpr size_t BUCKET_ALIGN = 128;  // elements: 256 bytes of bf16

namespace {

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// Appends segments and buckets to a ParamBuckets in device order.
class BucketBuilder {
public:
    explicit BucketBuilder(ParamBuckets* b) : b_(b) {}

    void begin() { bucket_ = {b_->total, 0, (int)b_->segments.size(), 0, 0, 0}, at_ = b_->total, copies_ = true; }
    // A tensor piece that is `length / row_length` rows of row_length elements, row_stride apart, in
    // ParamLayout order; merged into the previous segment where it continues it in both orders.
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

}  // namespace

ParamBuckets make_param_buckets(const GPTConfig& c, int num_ranks, ModelSlice slice) {
    if (slice.end_layer < 0) slice.end_layer = c.num_layers;
    ParamBuckets b;
    b.num_ranks = num_ranks, b.slice = slice;
    const ParamLayout layout = param_layout(c);
    b.layout_total = layout.total, b.channels = c.channels;
    const size_t L = c.num_layers, C = c.channels, Vp = c.padded_vocab_size, maxT = c.max_seq_len;
    const size_t t = slice.tensor_rank, T = slice.tensor_ranks;
    const bool replicas_written = t == 0;  // tensor rank 0 writes the replicated tensors
    // Where tensor `tensor` of layer l starts in ParamLayout order.
    auto base = [&](int tensor, size_t l) { return layout.offset[tensor] + l * (layout.size[tensor] / L); };
    BucketBuilder bucket(&b);

    if (slice.first_stage) {
        bucket.begin();
        bucket.add_contiguous(WPE, 0, layout.offset[WPE], maxT * C, replicas_written);
        bucket.end(0);
    }
    if (slice.first_stage || slice.last_stage) {
        // Vocabulary rows [t·Vs, (t+1)·Vs): the last slices may reach past Vp, rows the model does not
        // have. On a last stage that is not also the first, the classifier's copy.
        const size_t Vs = vocab_slice_rows(Vp, T), first = std::min(Vp, t * Vs);
        const size_t rows = std::min(Vp, first + Vs) - first;
        bucket.begin();
        bucket.add_contiguous(WTE, 0, layout.offset[WTE] + first * C, rows * C, slice.first_stage);
        bucket.add_gap((Vs - rows) * C);
        bucket.end(0);
    }
    b.first_layer_bucket_ = (int)b.buckets.size();
    for (size_t l = slice.first_layer; l < (size_t)slice.end_layer; l++) {
        bucket.begin();
        for (int tensor : {LN1W, LN1B, LN2W, LN2B}) bucket.add_contiguous(tensor, l, base(tensor, l), C, replicas_written);
        for (int tensor : {ATTPROJB, FCPROJB}) bucket.add_contiguous(tensor, l, base(tensor, l), C, replicas_written);
        // Column-parallel: this rank's rows of the query, key and value thirds; of fc.
        for (size_t third = 0; third < 3; third++)
            bucket.add_contiguous(QKVW, l, base(QKVW, l) + (third * C + t * C / T) * C, C / T * C, true);
        for (size_t third = 0; third < 3; third++)
            bucket.add_contiguous(QKVB, l, base(QKVB, l) + third * C + t * C / T, C / T, true);
        // Row-parallel: this rank's columns of every row (its key counter: the rank's block of the layer's tensor).
        bucket.add(ATTPROJW, l, base(ATTPROJW, l) + t * C / T, C * C / T, C / T, C, base(ATTPROJW, l) + t * C * C / T,
                   true);
        bucket.add_contiguous(FCW, l, base(FCW, l) + t * 4 * C / T * C, 4 * C / T * C, true);
        bucket.add_contiguous(FCB, l, base(FCB, l) + t * 4 * C / T, 4 * C / T, true);
        bucket.add(FCPROJW, l, base(FCPROJW, l) + t * 4 * C / T, C * 4 * C / T, 4 * C / T, 4 * C,
                   base(FCPROJW, l) + t * C * 4 * C / T, true);
        bucket.end(4 * C);  // the LayerNorms' weights and biases
    }
    if (slice.last_stage) {
        bucket.begin();
        bucket.add_contiguous(LNFW, 0, layout.offset[LNFW], C, replicas_written);
        bucket.add_contiguous(LNFB, 0, layout.offset[LNFB], C, replicas_written);
        bucket.end(2 * C);
    }
    return b;
}

size_t ParamBuckets::device_offset(int tensor, int layer) const {
    const ParamBucket& b = buckets[bucket_of(tensor, layer)];
    for (int i = 0; i < b.segment_count; i++)
        if (segments[b.first_segment + i].tensor == tensor) return segments[b.first_segment + i].device_offset;
    return b.offset;  // unreachable: every tensor has a segment in its bucket
}

int ParamBuckets::bucket_of(int tensor, int layer) const {
    if (tensor == WPE) return position_bucket();
    if (tensor == WTE) return vocabulary_bucket();
    if (tensor == LNFW || tensor == LNFB) return final_norm_bucket();
    return layer_bucket(layer);
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

ModelPart device_part(const ParamBuckets& b, const std::vector<float>& device_order) {
    ModelPart part;
    for (const ParamSegment& s : b.segments) {
        if (!s.written) continue;
        for_each_layout_run(s, 0, s.length, [&](size_t layout_at, size_t index, size_t count) {
            append_range(&part.ranges, layout_at, count);
            const auto from = device_order.begin() + s.device_offset + index;
            part.values.insert(part.values.end(), from, from + count);
        });
    }
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

std::vector<float> state_values(const ParamBuckets& b, int rank, bool sharded, const std::vector<float>& state) {
    std::vector<float> values;
    for_each_written_run(b, rank, sharded, [&](const OwnedRun& r) {
        for_each_layout_run(b.segments[r.segment], r.in_segment, r.length, [&](size_t, size_t index, size_t count) {
            const auto from = state.begin() + r.state_offset + index;
            values.insert(values.end(), from, from + count);
        });
    });
    return values;
}
