// What a layer's parameters need around it, in one place. A family's layer maths (model_layers.h)
// declares, for each call of a micro-step (a unit: the embedding, a layer's forward, the classifier, the
// final norm's backward, a layer's backward, the embedding's backward), the buckets whose weights it
// reads and those whose gradients it adds into (BucketUse). From the micro-step's list of units the scope
// works out, once, what each unit must have done around it (plan_units), and does it (enter, weights,
// gradients, leave):
//   gather     before a unit, the weights it reads that are not there yet, and the first bucket the
//              next unit reads (the prefetch: it arrives while this unit computes)
//   wait       where the unit first asks for a bucket's weights (so that a read at the end of a unit,
//              the next layer's norm after a residual add, waits only there)
//   prepare    where the first unit of the micro-step that adds into a bucket first asks for its
//              gradients (a zeroed slot under ZeRO-2/3); at that unit's end if it never asked
//   release    after the last unit of its pass that reads the bucket
//   reduce     after the last unit of the micro-step that adds into the bucket (the core's
//              GPUModel::reduce_gradients, across the data ranks)
// A unit that asks for a bucket it did not declare stops the run with one line naming the unit and the
// bucket, in every build: a new fusion cannot silently break ZeRO-3's order.
#pragma once
#include <string>
#include <vector>

#include "kernels/common.h"
#include "parallel/comm/parameter_store.h"
#include "parallel/plan/param_buckets.h"

// The buckets (parallel/plan/param_buckets.h) one unit reads the weights of and adds the gradients into.
struct BucketUse {
    std::vector<int> reads, adds;
};

// One call of the family's layer maths in a micro-step, and what the scope does around it.
struct PassUnit {
    enum Kind { EMBED, FORWARD_LAYER, CLASSIFIER, FINAL_NORM_BACKWARD, BACKWARD_LAYER, EMBED_BACKWARD };
    Kind kind = EMBED;
    int layer = 0;   // FORWARD_LAYER, BACKWARD_LAYER: which
    BucketUse use;   // the family's declaration
    // Worked out by plan_units from the micro-step's list:
    int prefetch = -1;                  // the next unit's first read (-1: none)
    std::vector<int> prepares;          // gradients this unit adds into first in the micro-step
    std::vector<int> releases;          // weights this unit reads last in its pass (forward or backward)
    std::vector<int> reductions;        // gradients this unit adds into last in the micro-step
    bool forward() const { return kind <= CLASSIFIER; }
    std::string name() const;           // "layer 3's forward", for messages
};

// Fills in each unit's prefetch, prepares, releases and reductions (units: a micro-step's, in order).
void plan_units(std::vector<PassUnit>& units);

class ParameterScope {
public:
    ParameterScope(ParameterStore& params, const ParamBuckets& buckets) : params_(params), buckets_(buckets) {}

    // Before `unit`: its reads gathered where they are not yet, and its prefetch.
    void enter(const PassUnit& unit);
    // The bucket's weights (waited for at the unit's first ask) or gradients (prepared at the first
    // ask, in the unit that adds into them first), for the unit inside the scope; an undeclared bucket
    // stops the run.
    floatX* weights(int bucket);
    floatX* gradients(int bucket);
    // After the unit: gradients it had to prepare and never asked for prepared; the weights it read
    // last released. (Its reductions are the caller's: they need the tensor group too.)
    void leave();

private:
    std::string bucket_name(int bucket) const;
    void check_declared(const std::vector<int>& declared, int bucket, const char* what) const;
    static bool holds(const std::vector<int>& v, int x);

    ParameterStore& params_;
    const ParamBuckets& buckets_;
    const PassUnit* unit_ = nullptr;  // inside the scope: the unit being run
    std::vector<int> gathered_;       // weights gathered and not yet released
    std::vector<int> waited_;         // of those, the ones the compute stream has waited for
    std::vector<int> prepared_;       // the unit's prepares done so far
};
