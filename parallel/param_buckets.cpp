// Parameter buckets and ZeRO shards (see param_buckets.h).
#include "parallel/param_buckets.h"

#include <algorithm>

constexpr size_t BUCKET_ALIGN = 128;  // elements: 256 bytes of bf16

namespace {

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

ParamBuckets make_param_buckets(const GPTConfig& c, int num_ranks) {
    ParamBuckets b;
    b.num_ranks = num_ranks;
    const ParamLayout layout = param_layout(c);
    const int L = c.num_layers;
    auto add_bucket = [&](const std::vector<std::pair<int, int>>& tensors_and_layers) {
        ParamBucket bucket;
        bucket.offset = b.total;
        bucket.first_segment = (int)b.segments.size();
        size_t at = b.total;
        for (auto [t, l] : tensors_and_layers) {
            const bool per_layer = t >= LN1W && t <= FCPROJB;
            const size_t length = per_layer ? layout.size[t] / L : layout.size[t];
            b.segments.push_back({t, l, layout.offset[t] + (per_layer ? l * length : 0), at, length});
            at += length;
        }
        bucket.segment_count = (int)b.segments.size() - bucket.first_segment;
        bucket.length = round_up(at - b.total, BUCKET_ALIGN * num_ranks);
        b.total += bucket.length;
        b.buckets.push_back(bucket);
    };
    add_bucket({{WTE, 0}, {WPE, 0}});
    for (int l = 0; l < L; l++) {
        std::vector<std::pair<int, int>> layer;
        for (int t = LN1W; t <= FCPROJB; t++) layer.push_back({t, l});
        add_bucket(layer);
    }
    add_bucket({{LNFW, 0}, {LNFB, 0}});
    return b;
}

size_t ParamBuckets::device_offset(int tensor, int layer) const {
    if (tensor == WTE || tensor == WPE) return segments[tensor - WTE].device_offset;
    if (tensor == LNFW || tensor == LNFB)
        return segments[buckets.back().first_segment + (tensor - LNFW)].device_offset;
    return segments[buckets[layer_bucket(layer)].first_segment + (tensor - LN1W)].device_offset;
}

int ParamBuckets::bucket_of(int tensor, int layer) const {
    if (tensor == WTE || tensor == WPE) return embedding_bucket();
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
            const ParamSegment& s = b.segments[bucket.first_segment + i];
            const size_t from = std::max(begin, s.device_offset);
            const size_t to = std::min(end, s.device_offset + s.length);
            if (from >= to) continue;
            runs.push_back({s.tensor, from, state_at + (from - begin),
                            s.layout_offset + (from - s.device_offset), to - from});
        }
        state_at += chunk;
    }
    return runs;
}

std::vector<float> to_device_order(const ParamBuckets& b, const std::vector<float>& layout_order) {
    std::vector<float> device(b.total, 0.0f);
    for (const ParamSegment& s : b.segments)
        std::copy_n(layout_order.begin() + s.layout_offset, s.length, device.begin() + s.device_offset);
    return device;
}

std::vector<float> to_layout_order(const ParamBuckets& b, const std::vector<float>& device_order) {
    size_t total = 0;
    for (const ParamSegment& s : b.segments) total += s.length;
    std::vector<float> layout(total);
    for (const ParamSegment& s : b.segments)
        std::copy_n(device_order.begin() + s.device_offset, s.length, layout.begin() + s.layout_offset);
    return layout;
}

static size_t state_size(const ParamBuckets& b, bool sharded) {
    return sharded ? b.shard_size() : b.total;
}

std::vector<float> gather_shard(const ParamBuckets& b, int rank, bool sharded,
                                const std::vector<float>& layout_order) {
    std::vector<float> state(state_size(b, sharded), 0.0f);
    for (const OwnedRun& r : owned_runs(b, rank, sharded))
        std::copy_n(layout_order.begin() + r.layout_offset, r.length, state.begin() + r.state_offset);
    return state;
}

void scatter_shard(const ParamBuckets& b, int rank, bool sharded, const std::vector<float>& state,
                   std::vector<float>* layout_order) {
    for (const OwnedRun& r : owned_runs(b, rank, sharded))
        std::copy_n(state.begin() + r.state_offset, r.length, layout_order->begin() + r.layout_offset);
}
