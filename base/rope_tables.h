// RoPE's angles, tabulated (the rotation itself: cpu/rope.h on the host, kernels/rope.h on the device).
// Pair i of a head of hs channels turns at position t by t · f_i, f_i = θ^(−2i/hs) (θ = 500000 for
// Llama 3); with Llama 3.1's scaling (base/llama_config.h) the long wavelengths λ = 2π/f get lower
// frequencies:
//   λ < L0/high_freq_factor:  f unchanged
//   λ > L0/low_freq_factor:   f / factor
//   between:                  (1 − s) · f / factor + s · f,
//                             s = (L0/λ − low_freq_factor) / (high_freq_factor − low_freq_factor)
// with L0 = original_max_position. The cosines and sines are computed in double, once per (t, i), by
// the CPU reference and the GPU model alike.
#pragma once
#include <cmath>
#include <cstddef>
#include <vector>

#include "base/llama_config.h"

// f_i for i in [0, hs/2), scaled when scaling.enabled.
inline std::vector<double> rope_frequencies(int head_size, double theta, const RopeScaling& scaling) {
    std::vector<double> f(head_size / 2);
    for (int i = 0; i < head_size / 2; i++) f[i] = std::pow(theta, -2.0 * i / head_size);
    if (!scaling.enabled) return f;
    const double short_wavelength = scaling.original_max_position / scaling.high_freq_factor;
    const double long_wavelength = scaling.original_max_position / scaling.low_freq_factor;
    for (double& freq : f) {
        const double wavelength = 2 * M_PI / freq;
        if (wavelength < short_wavelength) continue;
        if (wavelength > long_wavelength) {
            freq /= scaling.factor;
            continue;
        }
        const double s = (scaling.original_max_position / wavelength - scaling.low_freq_factor) /
                         (scaling.high_freq_factor - scaling.low_freq_factor);
        freq = (1 - s) * freq / scaling.factor + s * freq;
    }
    return f;
}

// cos_table and sin_table (T, hs/2): the rotation of pair i at position t.
template <typename Real>
void rope_tables(Real* cos_table, Real* sin_table, int T, int head_size, double theta,
                 const RopeScaling& scaling) {
    const std::vector<double> f = rope_frequencies(head_size, theta, scaling);
    const int half = head_size / 2;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            cos_table[(size_t)t * half + i] = (Real)std::cos(t * f[i]);
            sin_table[(size_t)t * half + i] = (Real)std::sin(t * f[i]);
        }
}
