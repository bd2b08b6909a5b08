// Parts of the model (see model_part.h).
#include "base/model_part.h"

#include <algorithm>
#include <cstring>

#include "base/errors.h"
#include "base/host_arrays.h"

std::vector<LayoutRange> whole_model_ranges(size_t total) { return {{0, total}}; }

size_t ranges_size(const std::vector<LayoutRange>& ranges) {
    size_t n = 0;
    for (const LayoutRange& r : ranges) n += r.length;
    return n;
}

void append_range(std::vector<LayoutRange>* ranges, uint64_t offset, uint64_t length) {
    if (length == 0) return;
    if (!ranges->empty() && ranges->back().offset + ranges->back().length == offset)
        ranges->back().length += length;
    else
        ranges->push_back({offset, length});
}

void scatter_part(const std::vector<LayoutRange>& ranges, const float* values, std::vector<float>* whole) {
    for (const LayoutRange& r : ranges) {
        memcpy(whole->data() + r.offset, values, r.length * sizeof(float));
        values += r.length;
    }
}

Placement whole_model_placement(size_t total) { return {{{0, total, 0}}, total}; }

std::vector<float> place(const Placement& placement, const std::vector<float>& whole) {
    std::vector<float> placed(placement.size, 0.0f);
    for (const PlacedRange& r : placement.ranges)
        std::copy_n(whole.begin() + r.offset, r.length, placed.begin() + r.at);
    return placed;
}

void Coverage::add(const std::vector<LayoutRange>& ranges, const std::string& what) {
    size_t first_value = 0;
    for (const LayoutRange& r : ranges) {
        if (r.offset > total_ || r.length > total_ - r.offset)
            fail("%s: range [%llu, +%llu) lies outside the model's %zu parameters", what.c_str(),
                 (unsigned long long)r.offset, (unsigned long long)r.length, total_);
        if (r.length) ranges_.push_back({r.offset, r.length, parts_.size(), first_value});
        first_value += r.length;
    }
    parts_.push_back(what);
}

std::vector<CoveredRange> Coverage::tiles(const std::string& what) const {
    std::vector<CoveredRange> sorted = ranges_;
    std::sort(sorted.begin(), sorted.end(),
              [](const CoveredRange& a, const CoveredRange& b) { return a.offset < b.offset; });
    uint64_t covered = 0;  // every element below is held by exactly one part
    for (const CoveredRange& r : sorted) {
        if (r.offset < covered)
            fail("%s: parameter %llu is stored twice", parts_[r.part].c_str(), (unsigned long long)r.offset);
        if (r.offset > covered) break;
        covered = r.offset + r.length;
    }
    if (covered < total_)
        fail("%s: parameter %llu is missing (an incomplete set of parts)", what.c_str(),
             (unsigned long long)covered);
    return sorted;
}

// A part as bytes: the range count, the ranges, the values.
static std::vector<char> serialize(const ModelPart& part) {
    const uint64_t n = part.ranges.size();
    std::vector<char> bytes = reusable_host_bytes(8 + n * sizeof(LayoutRange) + part.values.size() * sizeof(float));
    memcpy(bytes.data(), &n, 8);
    // (An empty part, a rank that writes nothing, has null data(): memcpy must not be handed it.)
    if (n) memcpy(bytes.data() + 8, part.ranges.data(), n * sizeof(LayoutRange));
    if (!part.values.empty())
        memcpy(bytes.data() + 8 + n * sizeof(LayoutRange), part.values.data(), part.values.size() * sizeof(float));
    return bytes;
}

static ModelPart deserialize(const std::vector<char>& bytes) {
    ModelPart part;
    uint64_t n = 0;
    memcpy(&n, bytes.data(), 8);
    part.ranges.resize(n);
    if (n) memcpy(part.ranges.data(), bytes.data() + 8, n * sizeof(LayoutRange));
    part.values = reusable_host_array((bytes.size() - 8 - n * sizeof(LayoutRange)) / sizeof(float));
    if (!part.values.empty())
        memcpy(part.values.data(), bytes.data() + 8 + n * sizeof(LayoutRange), part.values.size() * sizeof(float));
    return part;
}

std::vector<float> assemble_on_rank0(const ModelPart& mine, size_t total, RankGroup& ranks) {
    if (ranges_size(mine.ranges) != mine.values.size())
        fail("internal error: a model part lists %zu elements but holds %zu", ranges_size(mine.ranges),
             mine.values.size());
    // Every array here as large as a part or the model comes from, and goes back to, the host memory
    // checkpoints reuse (base/host_arrays.h): rank 0 assembles the model file at every checkpoint.
    std::vector<char> bytes = serialize(mine);
    std::vector<std::vector<char>> parts = ranks.gather_on_rank0(bytes);
    reuse_host_bytes(std::move(bytes));
    if (ranks.rank != 0) return {};
    std::vector<float> whole = reusable_host_array(total);  // every element written: checked below
    Coverage coverage(total);
    for (size_t r = 0; r < parts.size(); r++) {
        ModelPart part = deserialize(parts[r]);
        reuse_host_bytes(std::move(parts[r]));
        coverage.add(part.ranges, strprintf("the weights of rank %zu", r));
        scatter_part(part.ranges, part.values.data(), &whole);
        reuse_host_array(std::move(part.values));
    }
    coverage.fail_if_incomplete("the weights gathered from the ranks");
    return whole;
}
