// Box-Muller normal draws for Rng (see rng.h).
#include "base/rng.h"

#include <algorithm>
#include <cmath>

double Rng::normal() {
    double u1 = 1.0 - uniform();  // in (0, 1], so log() is finite
    double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

void fill_normal(float* p, size_t n, double scale, Rng& rng) {
    const size_t block = 1 << 20;
    const long long blocks = (long long)((n + block - 1) / block);
#pragma omp parallel for schedule(dynamic, 1)
    for (long long b = 0; b < blocks; b++) {
        Rng local = rng;
        local.skip_normals((uint64_t)b * block);
        const size_t end = std::min(n, (size_t)(b + 1) * block);
        for (size_t i = (size_t)b * block; i < end; i++) p[i] = (float)(scale * local.normal());
    }
    rng.skip_normals(n);
}
