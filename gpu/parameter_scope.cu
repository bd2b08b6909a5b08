// The parameters' scope around each unit of a micro-step (parameter_scope.h).
#include "gpu/parameter_scope.h"

#include <algorithm>

#include "base/errors.h"

std::string PassUnit::name() const {
    switch (kind) {
        case EMBED: return "the embedding";
        case FORWARD_LAYER: return strprintf("layer %d's forward", layer);
        case CLASSIFIER: return "the classifier";
        case FINAL_NORM_BACKWARD: return "the final norm's backward";
        case BACKWARD_LAYER: return strprintf("layer %d's backward", layer);
        case EMBED_BACKWARD: return "the embedding's backward";
    }
    return "?";
}

static bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }
bool ParameterScope::holds(const std::vector<int>& v, int x) { return contains(v, x); }

// Each unit's prefetch (the next unit's first read, within its pass), its releases (its reads that no
// later unit of its pass reads), its prepares (its adds that no earlier unit of the micro-step adds
// into) and its reductions (those no later unit adds into).
void plan_units(std::vector<PassUnit>& units) {
    const size_t n = units.size();
    for (size_t i = 0; i < n; i++) {
        PassUnit& unit = units[i];
        // Whether a unit in [from, to) (of this unit's pass only, with same_pass) reads (or adds into) bucket.
        auto used = [&](size_t from, size_t to, int bucket, bool reads, bool same_pass) {
            for (size_t j = from; j < to; j++)
                if ((!same_pass || units[j].forward() == unit.forward()) &&
                    contains(reads ? units[j].use.reads : units[j].use.adds, bucket))
                    return true;
            return false;
        };
        unit.prefetch = -1, unit.prepares.clear(), unit.releases.clear(), unit.reductions.clear();
        if (i + 1 < n && units[i + 1].forward() == unit.forward() && !units[i + 1].use.reads.empty())
            unit.prefetch = units[i + 1].use.reads.front();
        for (int b : unit.use.reads)
            if (!used(i + 1, n, b, true, true)) unit.releases.push_back(b);
        for (int b : unit.use.adds) {
            if (!used(0, i, b, false, false)) unit.prepares.push_back(b);
            if (!used(i + 1, n, b, false, false)) unit.reductions.push_back(b);
        }
    }
}

void ParameterScope::enter(const PassUnit& unit) {
    if (unit_) fail("internal error: %s starts inside %s's scope", unit.name().c_str(), unit_->name().c_str());
    unit_ = &unit;
    prepared_.clear();
    std::vector<int> gathers = unit.use.reads;
    if (unit.prefetch >= 0) gathers.push_back(unit.prefetch);
    for (int b : gathers)
        if (!holds(gathered_, b)) {
            params_.gather_weights(b);
            gathered_.push_back(b);
        }
}

floatX* ParameterScope::weights(int bucket) {
    check_declared(unit_ ? unit_->use.reads : std::vector<int>(), bucket, "reads the weights of");
    if (!holds(waited_, bucket)) {
        params_.wait_for_weights(bucket);
        waited_.push_back(bucket);
    }
    return params_.weights(bucket);
}

floatX* ParameterScope::gradients(int bucket) {
    check_declared(unit_ ? unit_->use.adds : std::vector<int>(), bucket, "adds into the gradients of");
    if (holds(unit_->prepares, bucket) && !holds(prepared_, bucket)) {
        params_.prepare_gradients(bucket);
        prepared_.push_back(bucket);
    }
    return params_.gradients(bucket);
}

void ParameterScope::leave() {
    for (int b : unit_->prepares)
        if (!holds(prepared_, b)) params_.prepare_gradients(b);
    for (int b : unit_->releases) {
        params_.release_weights(b);
        gathered_.erase(std::remove(gathered_.begin(), gathered_.end(), b), gathered_.end());
        waited_.erase(std::remove(waited_.begin(), waited_.end(), b), waited_.end());
    }
    unit_ = nullptr;
}

std::string ParameterScope::bucket_name(int bucket) const {
    if (bucket == buckets_.position_bucket()) return "the positions' bucket";
    if (bucket == buckets_.vocabulary_bucket()) return "the vocabulary's bucket";
    if (bucket == buckets_.final_norm_bucket()) return "the final norm's bucket";
    return strprintf("layer %d's bucket", bucket - buckets_.layer_bucket(buckets_.first_layer()) +
                                              buckets_.first_layer());
}

void ParameterScope::check_declared(const std::vector<int>& declared, int bucket, const char* what) const {
    if (!unit_)
        fail("internal error: a layer %s %s outside any unit's scope (gpu/parameter_scope.h)", what,
             bucket_name(bucket).c_str());
    if (!holds(declared, bucket))
        fail("internal error: %s %s %s, which it did not declare (its BucketUse, gpu/parameter_scope.h)",
             unit_->name().c_str(), what, bucket_name(bucket).c_str());
}
