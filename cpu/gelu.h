// GELU, tanh form: y = x/2 · (1 + tanh(u)), u = sqrt(2/π) · (x + 0.044715 x³). Elementwise.
#pragma once
#include <cmath>
#include <cstddef>

#include "cpu/fast_math.h"
#include "cpu/parallel.h"

template <typename Real>
void gelu_forward(Real* out, const Real* inp, size_t n) {
    const Real k = std::sqrt(Real(2) / Real(M_PI));
#pragma omp parallel for schedule(static) if (worth_parallel(n))
    for (size_t i = 0; i < n; i++) {
        const Real x = inp[i];
        out[i] = Real(0.5) * x * (Real(1) + tanh_of(k * (x + Real(0.044715) * x * x * x)));
    }
}

// Adds dout · dy/dx into dinp, dy/dx = (1 + tanh u)/2 + x/2 · (1 − tanh² u) · du/dx.
template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, size_t n) {
    const Real k = std::sqrt(Real(2) / Real(M_PI));
#pragma omp parallel for schedule(static) if (worth_parallel(n))
    for (size_t i = 0; i < n; i++) {
        const Real x = inp[i];
        const Real th = tanh_of(k * (x + Real(0.044715) * x * x * x));
        const Real du_dx = k * (Real(1) + Real(3 * 0.044715) * x * x);
        const Real dy_dx = Real(0.5) * (Real(1) + th) + Real(0.5) * x * (Real(1) - th * th) * du_dx;
        dinp[i] += dout[i] * dy_dx;
    }
}
