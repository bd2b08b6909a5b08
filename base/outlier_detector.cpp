// Rolling z-score over the last 128 values (see outlier_detector.h). Mean and variance are summed
// afresh from the window each time: 128 additions, and no drift from running sums.
#include "base/outlier_detector.h"

#include <cmath>

double OutlierDetector::update(double x) {
    values[next] = x;
    next = (next + 1) % WINDOW;
    if (count < WINDOW) count++;
    if (count < WINDOW) return NAN;
    double mean = 0, variance = 0;
    for (double v : values) mean += v;
    mean /= WINDOW;
    for (double v : values) variance += (v - mean) * (v - mean);
    const double std = std::sqrt(variance / WINDOW);
    return std > 0 ? (x - mean) / std : 0.0;
}
