// Each rank reads only the slices of a checkpoint it keeps (see resharding.h).
#include "train/resharding.h"

#include <algorithm>
#include <cstring>

#include "base/errors.h"
#include "base/model_descriptor.h"
#include "base/model_files.h"
#include "train/checkpoint.h"

CheckpointState::CheckpointState(const std::string& dir, long long step, TrainingStateFile first) {
    const int saved_ranks = first.state().shape.num_ranks;
    Coverage coverage(parameter_count(first.state().shape.config));
    files_.push_back(std::move(first));
    for (int r = 1; r < saved_ranks; r++) files_.push_back(open_training_state(checkpoint_state_path(dir, step, r)));
    for (int r = 0; r < saved_ranks; r++) {
        const TrainingState& part = files_[r].state();
        if (part.rank != r || part.shape.num_ranks != saved_ranks)
            fail("%s: not rank %d of %d of this checkpoint", files_[r].path().c_str(), r, saved_ranks);
        coverage.add(part.ranges, files_[r].path());
    }
    tiles_ = coverage.tiles(strprintf("the state files of step %lld in %s", step, dir.c_str()));
}

// The placement's ranges checked to fit its arrays.
static void check_fits(const Placement& placement) {
    for (const PlacedRange& r : placement.ranges)
        if (r.at > placement.size || r.length > placement.size - r.at)
            fail("internal error: a placed range [%llu, +%llu) past the %zu elements of its array",
                 (unsigned long long)r.at, (unsigned long long)r.length, placement.size);
}

void CheckpointState::read_placed(const Placement& placement, std::vector<float>* master, std::vector<float>* m,
                                  std::vector<float>* v, ReshardingCounts* counts) {
    check_fits(placement);
    std::vector<float>* arrays[3] = {master, m, v};
    for (std::vector<float>* array : arrays) array->assign(placement.size, 0.0f);
    uint64_t tables = tiles_.size() * sizeof(CoveredRange);
    for (const TrainingStateFile& file : files_) tables += file.state().ranges.size() * sizeof(LayoutRange);
    counts->bytes_held = std::max<uint64_t>(counts->bytes_held, 3 * placement.size * sizeof(float) + tables);
    for (const PlacedRange& want : placement.ranges) {
        if (want.length == 0) continue;
        const uint64_t end = want.offset + want.length;
        // The tiles start at 0 and leave no gap, so the last one starting at or before want.offset
        // holds it; the ones after it follow until the range ends.
        auto tile = std::upper_bound(tiles_.begin(), tiles_.end(), want.offset,
                                     [](uint64_t offset, const CoveredRange& t) { return offset < t.offset; }) - 1;
        for (; tile != tiles_.end() && tile->offset < end; ++tile) {
            const uint64_t from = std::max(want.offset, tile->offset);
            const uint64_t count = std::min(end, tile->offset + tile->length) - from;
            for (int a = 0; a < 3; a++)
                files_[tile->part].read_values(a, tile->first_value + (from - tile->offset), count,
                                               arrays[a]->data() + want.at + (from - want.offset));
            counts->bytes_read += 3 * count * sizeof(float);
        }
    }
}

std::vector<float> read_placed_weights(ModelWeightsReader& file, const ModelConfig& config,
                                       const Placement& placement, ReshardingCounts* counts) {
    const ModelConfig& c = file.config();
    if (!same_model(c, config))
        fail("%s: holds a model %s, the run's is %s", file.path().c_str(), describe_model(c).c_str(),
             describe_model(config).c_str());
    check_fits(placement);
    std::vector<float> placed(placement.size, 0.0f);
    counts->bytes_held = std::max<uint64_t>(counts->bytes_held, placement.size * sizeof(float));
    for (const PlacedRange& r : placement.ranges) {
        file.read_values(r.offset, r.length, placed.data() + r.at);
        counts->bytes_read += r.length * (file.type() == WeightType::FP32 ? 4 : 2);
    }
    return placed;
}

std::vector<ReshardingCounts> gather_counts(const ReshardingCounts& mine, RankGroup& ranks) {
    std::vector<char> bytes(sizeof mine);
    memcpy(bytes.data(), &mine, sizeof mine);
    std::vector<ReshardingCounts> all;
    for (const std::vector<char>& part : ranks.gather_on_rank0(bytes)) {
        ReshardingCounts c;
        memcpy(&c, part.data(), std::min(part.size(), sizeof c));
        all.push_back(c);
    }
    return all;
}

static std::string mib(uint64_t bytes) { return strprintf("%.2f MiB", bytes / 1048576.0); }

std::string resharding_report(const std::vector<ReshardingCounts>& ranks, size_t total) {
    ReshardingCounts most;
    bool growth_known = !ranks.empty();
    for (const ReshardingCounts& c : ranks) {
        most.bytes_read = std::max(most.bytes_read, c.bytes_read);
        most.bytes_held = std::max(most.bytes_held, c.bytes_held);
        most.resident_growth = std::max(most.resident_growth, c.resident_growth);
        growth_known = growth_known && c.resident_growth_known;
    }
    return strprintf("checkpoint read: each rank read at most %s and held at most %s at once, of the whole "
                     "model's %s of weights and optimizer state; resident memory grew by at most %s",
                     mib(most.bytes_read).c_str(), mib(most.bytes_held).c_str(), mib((uint64_t)total * 16).c_str(),
                     growth_known ? mib(most.resident_growth).c_str() : "(unknown here)");
}
