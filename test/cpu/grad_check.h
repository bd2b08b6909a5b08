// Helpers shared by the CPU tests: seeded random tensors (never zeros) and central finite
// differences in double precision.
#pragma once
#include <cmath>
#include <random>
#include <vector>

#include "test/test.h"

// Uniform in ±[0.1, 1]·scale: random signs and magnitudes, never zero.
inline std::vector<double> random_tensor(size_t n, std::mt19937& rng, double scale = 1.0) {
    std::uniform_real_distribution<double> magnitude(0.1, 1.0);
    std::vector<double> v(n);
    for (double& x : v) x = (rng() & 1 ? 1 : -1) * magnitude(rng) * scale;
    return v;
}

inline std::vector<float> to_float(const std::vector<double>& v) {
    return std::vector<float>(v.begin(), v.end());
}

// d f / d x[i] by central differences for every i (or only those listed), x restored afterwards.
template <typename F>
std::vector<double> numeric_gradient(std::vector<double>& x, F f, double h = 1e-6) {
    std::vector<double> g(x.size());
    for (size_t i = 0; i < x.size(); i++) {
        const double saved = x[i];
        x[i] = saved + h;
        const double up = f();
        x[i] = saved - h;
        const double down = f();
        x[i] = saved;
        g[i] = (up - down) / (2 * h);
    }
    return g;
}

// Every element: |analytic − numeric| ≤ tol · max(1, |numeric|).
inline void check_gradient(const char* what, const std::vector<double>& analytic,
                           const std::vector<double>& numeric, double tol = 1e-6) {
    CHECK_MSG(analytic.size() == numeric.size(), "%s: sizes differ", what);
    for (size_t i = 0; i < analytic.size(); i++) {
        const double err = std::fabs(analytic[i] - numeric[i]);
        CHECK_MSG(err <= tol * std::fmax(1.0, std::fabs(numeric[i])),
                  "%s[%zu]: analytic %.12g vs finite difference %.12g", what, i, analytic[i],
                  numeric[i]);
    }
}

// Σ out ⊙ weights: a scalar whose gradient with respect to out is `weights`.
inline double weighted_sum(const std::vector<double>& out, const std::vector<double>& weights) {
    double s = 0;
    for (size_t i = 0; i < out.size(); i++) s += out[i] * weights[i];
    return s;
}

// after − before: what a backward op added into a gradient buffer.
inline std::vector<double> added(const std::vector<double>& after,
                                 const std::vector<double>& before) {
    std::vector<double> d(after.size());
    for (size_t i = 0; i < d.size(); i++) d[i] = after[i] - before[i];
    return d;
}
