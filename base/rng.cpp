// Box-Muller normal draws for Rng (see rng.h).
#include "base/rng.h"

#include <cmath>

double Rng::normal() {
    double u1 = 1.0 - uniform();  // in (0, 1], so log() is finite
    double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}
