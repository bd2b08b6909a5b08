// The slow rank among its peers (straggler_detector.h).
#include "train/straggler_detector.h"

#include <algorithm>

#include "base/errors.h"

StragglerDetector::StragglerDetector(double threshold, int window, int needed)
    : threshold_(threshold), window_(window), needed_(needed) {
    if (threshold <= 0 || window < 1 || needed < 1 || needed > window)
        fail("straggler detection: threshold %g must be positive and 1 <= needed %d <= window %d", threshold,
             needed, window);
}

// The median of `values` (the mean of the middle two for an even count).
static double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const size_t n = values.size();
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::vector<int> StragglerDetector::observe(const std::vector<PhaseTimes>& by_rank, const std::vector<int>& group) {
    const int ranks = (int)by_rank.size();
    slow_.resize(ranks), named_.resize(ranks, false), last_excess_.assign(ranks, 0.0);
    std::vector<int> named;
    for (int r = 0; r < ranks; r++) {
        std::vector<double> peers;  // the compute times of r's group, r included
        for (int q = 0; q < ranks; q++)
            if (group.empty() || group[q] == group[r]) peers.push_back(by_rank[q].compute());
        const double typical = median(peers);
        last_excess_[r] = typical > 0 ? by_rank[r].compute() / typical - 1.0 : 0.0;
        std::vector<bool>& history = slow_[r];
        history.push_back(peers.size() > 1 && last_excess_[r] > threshold_);
        if ((int)history.size() > window_) history.erase(history.begin());
        const int slow_steps = (int)std::count(history.begin(), history.end(), true);
        if (slow_steps >= needed_ && !named_[r]) {
            named_[r] = true;
            named.push_back(r);
        } else if (slow_steps == 0 && (int)history.size() == window_) {
            named_[r] = false;  // a whole window back to normal: it may be named again
        }
    }
    return named;
}
