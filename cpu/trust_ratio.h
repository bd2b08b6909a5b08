// What LAMB and LARS (cpu/lamb.h, cpu/lars.h) share: sums over one tensor in double, in fixed chunks
// added in order so that they do not depend on the number of threads, and the trust ratio they
// scale a tensor's update by:
//   ratio = coefficient · ‖p‖ / ‖d‖   (d: the tensor's update direction)
//         = 1                          where ‖p‖ or ‖d‖ is 0 (a tensor of zeros, or no gradient)
#pragma once
#include <array>
#include <cmath>
#include <cstddef>
#include <vector>

#include "cpu/parallel.h"

// visit(i, sums) for every i in [0, n) once, each adding its terms into sums[0..K); returns the K
// totals. visit may write element i of its arrays.
template <int K, typename Visit>
std::array<double, K> chunked_sums(size_t n, Visit visit) {
    const size_t chunk = 1 << 16, chunks = (n + chunk - 1) / chunk;
    std::vector<std::array<double, K>> partial(chunks);
#pragma omp parallel for schedule(static) if (worth_parallel(n))
    for (size_t c = 0; c < chunks; c++) {
        std::array<double, K> sums{};
        const size_t end = (c + 1) * chunk < n ? (c + 1) * chunk : n;
        for (size_t i = c * chunk; i < end; i++) visit(i, sums.data());
        partial[c] = sums;
    }
    std::array<double, K> total{};
    for (const auto& p : partial)
        for (int k = 0; k < K; k++) total[k] += p[k];
    return total;
}

// From the squared norms of the weights and of the direction.
inline double trust_ratio(double weights_squared, double direction_squared, double coefficient) {
    if (weights_squared == 0 || direction_squared == 0) return 1.0;
    return coefficient * std::sqrt(weights_squared) / std::sqrt(direction_squared);
}
