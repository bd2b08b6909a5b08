// FP8 products simulated on the CPU: each operand of a product is quantised and dequantised,
//   x̃_i = decode(fp8(x_i · s)) · s⁻¹
// with the per-tensor scale s of a recipe, so that an fp32 (or double) product of x̃ and ỹ is what an
// FP8 GEMM computes (up to the order of its fp32 sum: FP8 × FP8 products are exact in fp32, and s⁻¹ is
// a power of two). Formats, rounding, saturation and the scale rule are base/fp8.h's, the same code
// the CUDA casts (kernels/fp8_cast.h) run:
//   current   s from this tensor's amax now
//   delayed   s from the largest of the last N amaxes (a ring; the amax of this tensor is pushed after
//             the cast, as fp8_delayed_update does on the device); scale 1 before any history
// A non-finite amax sets `nonfinite` (the step guard's flag) and gives s = 1 (current) or is not
// pushed (delayed). The cast rounds x_i · s computed in float, as the device does.
#pragma once
#include <cstddef>
#include <vector>

#include "base/fp8.h"

// One tensor's recipe state.
struct Fp8SimTensor {
    Fp8Format format = Fp8Format::e4m3;
    int history_length = 0;      // 0: current recipe; N > 0: delayed, over the last N amaxes
    std::vector<float> history;  // the ring (delayed), oldest overwritten first
    int history_next = 0;
    float scale = 1.0f, scale_inv = 1.0f;  // delayed: the scale of the next cast
    bool nonfinite = false;                // raised by a non-finite amax, never lowered here
};

inline Fp8SimTensor fp8_sim_current(Fp8Format f) {
    Fp8SimTensor t;
    t.format = f;
    return t;
}
inline Fp8SimTensor fp8_sim_delayed(Fp8Format f, int history_length) {
    Fp8SimTensor t;
    t.format = f;
    t.history_length = history_length;
    t.history.assign(history_length, 0.0f);
    return t;
}

// max_i |x_i| as float, NaN winning (base/fp8.h's order, the kernels').
template <typename Real>
float fp8_sim_amax(const Real* x, size_t n) {
    float amax = 0.0f;
    for (size_t i = 0; i < n; i++) amax = fp8_amax_merge(amax, (float)x[i]);
    return amax;
}

// out_i = decode(fp8(x_i · scale)) · scale_inv (out may be x).
template <typename Real>
void fp8_sim_quantize_dequantize(Real* out, const Real* x, size_t n, Fp8Format f, float scale, float scale_inv) {
    for (size_t i = 0; i < n; i++) out[i] = (Real)(fp8_round((float)x[i] * scale, f) * scale_inv);
}

// The scale this cast uses, by t's recipe, then the cast (out may be x). Delayed: the amax of x is
// pushed afterwards and the scale of the next cast set from the ring.
template <typename Real>
void fp8_sim_cast(Fp8SimTensor& t, Real* out, const Real* x, size_t n) {
    const float amax = fp8_sim_amax(x, n);
    if (t.history_length == 0) {
        const Fp8Scale s = fp8_scale_from_amax(amax, t.format);
        t.scale = s.scale, t.scale_inv = s.scale_inv;
        t.nonfinite |= !s.finite;
        fp8_sim_quantize_dequantize(out, x, n, t.format, t.scale, t.scale_inv);
        return;
    }
    fp8_sim_quantize_dequantize(out, x, n, t.format, t.scale, t.scale_inv);
    if (fp8_scale_from_amax(amax, t.format).finite) {
        t.history[t.history_next] = amax;
        t.history_next = (t.history_next + 1) % t.history_length;
    } else {
        t.nonfinite = true;
    }
    float largest = 0.0f;
    for (float a : t.history) largest = fp8_amax_merge(largest, a);
    const Fp8Scale s = fp8_scale_from_amax(largest, t.format);
    t.scale = s.scale, t.scale_inv = s.scale_inv;
}
