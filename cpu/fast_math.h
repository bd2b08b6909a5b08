// exp and tanh for the ops' inner loops. For float they are written out (range reduction and a
// polynomial) so that the compiler can vectorise the loops calling them: glibc's expf and tanhf
// are opaque library calls that keep cross-entropy, softmax and GELU scalar. For double (the
// finite-difference tests' precision) they are the standard library's.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

// e^x, within about 2 ulp of expf over [−87, 88]; inputs outside are clamped to it (so e^x of a
// very negative x is ~1e-38 rather than 0, and never overflows).
inline float exp_of(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    // x = n·ln2 + r with |r| ≤ ln2/2; ln2 is split in two so that n·ln2 is exact enough.
    const float n = std::nearbyint(x * 1.44269504088896341f);
    float r = std::fma(n, -0.693145751953125f, x);
    r = std::fma(n, -1.428606765330187e-6f, r);
    // e^r by its Taylor series to r⁷ (truncation error < 1e-8 relative on |r| ≤ 0.35).
    float p = 1.0f / 5040;
    p = std::fma(p, r, 1.0f / 720);
    p = std::fma(p, r, 1.0f / 120);
    p = std::fma(p, r, 1.0f / 24);
    p = std::fma(p, r, 1.0f / 6);
    p = std::fma(p, r, 0.5f);
    p = std::fma(p, r, 1.0f);
    p = std::fma(p, r, 1.0f);
    // 2^n built from its exponent bits (n is in [−126, 127] after the clamp).
    const int32_t bits = ((int32_t)n + 127) << 23;
    float two_n;
    std::memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}
inline double exp_of(double x) { return std::exp(x); }

// tanh(u) = 1 − 2 / (e^{2u} + 1): absolute error about 1e-7 (relative error grows near u = 0,
// where GELU adds the result to 1 anyway).
inline float tanh_of(float u) { return 1.0f - 2.0f / (exp_of(2.0f * u) + 1.0f); }
inline double tanh_of(double u) { return std::tanh(u); }
