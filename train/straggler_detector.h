// Naming the rank that holds the others back. In a synchronous step every rank waits for the slowest
// at the next collective, so one slow GPU (throttled, failing, sharing its node with another job)
// slows the whole job while its own timers look normal on every other rank: they show the time as
// communication wait. The detector compares each rank's compute time (base/step_phases.h: forward, loss,
// backward, optimizer) with the median of the ranks that do the same work (the same pipeline stage),
// on every logged step, and names a rank once it was slower than that median by more than the
// threshold in `needed` of the last `window` logged steps: once, not on every step, and again only
// after it has been back to normal for a whole window.
#pragma once
#include <vector>

#include "base/step_phases.h"

class StragglerDetector {
public:
    // threshold: 0.2 names a rank 20% slower than the median; needed of the last window steps.
    StragglerDetector(double threshold, int window = 8, int needed = 2);
    // One logged step's times of every rank (rank order); group[r] the work rank r does (its pipeline
    // stage; empty: all the same). Returns the ranks named by this step (lowest first).
    std::vector<int> observe(const std::vector<PhaseTimes>& by_rank, const std::vector<int>& group = {});
    // How much slower than its group's median rank r's compute was in the last observed step
    // (0.25: 25% slower), for the line that names it.
    double excess(int rank) const { return rank < (int)last_excess_.size() ? last_excess_[rank] : 0; }

private:
    double threshold_;
    int window_, needed_;
    std::vector<std::vector<bool>> slow_;  // per rank, the last `window` steps' verdicts, oldest first
    std::vector<bool> named_;              // per rank: named, and not yet back to normal for a window
    std::vector<double> last_excess_;
};
