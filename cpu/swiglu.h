// The SwiGLU MLP of Llama: for rows x (N, C) and weights W_gate, W_up (F, C), W_down (C, F),
//   gate = x · W_gateᵀ,  up = x · W_upᵀ            (N, F)
//   h    = silu(gate) ⊙ up,  silu(g) = g · σ(g)    (N, F)
//   out  = h · W_downᵀ                             (N, C)
// swiglu_forward/backward are the elementwise middle step; swiglu_mlp_forward/backward the whole
// MLP through matmul_forward/backward (cpu/matmul.h, no biases). Backward adds into its gradient
// outputs; the elementwise derivatives are
//   ∂h/∂up = silu(gate),  ∂h/∂gate = up · σ(gate) · (1 + gate · (1 − σ(gate))).
#pragma once
#include <cstddef>

#include "cpu/fast_math.h"
#include "cpu/matmul.h"
#include "cpu/parallel.h"

template <typename Real>
inline Real sigmoid_of(Real x) {
    return Real(1) / (Real(1) + exp_of(-x));
}

template <typename Real>
void swiglu_forward(Real* h, const Real* gate, const Real* up, size_t n) {
#pragma omp parallel for schedule(static) if (worth_parallel(n))
    for (size_t i = 0; i < n; i++) h[i] = gate[i] * sigmoid_of(gate[i]) * up[i];
}

template <typename Real>
void swiglu_backward(Real* dgate, Real* dup, const Real* dh, const Real* gate, const Real* up,
                     size_t n) {
#pragma omp parallel for schedule(static) if (worth_parallel(n))
    for (size_t i = 0; i < n; i++) {
        const Real g = gate[i], sig = sigmoid_of(g);
        dgate[i] += dh[i] * up[i] * sig * (Real(1) + g * (Real(1) - sig));
        dup[i] += dh[i] * g * sig;
    }
}

// The three weights of one MLP, and their gradients.
template <typename Real>
struct SwiGLUWeights {
    Real *gate, *up, *down;
};

// Writes out (N, C), and saves gate, up and h (N, F each) for backward.
template <typename Real>
void swiglu_mlp_forward(Real* out, Real* gate, Real* up, Real* h, const Real* inp,
                        SwiGLUWeights<const Real> w, int N, int C, int F) {
    matmul_forward(gate, inp, w.gate, (const Real*)nullptr, N, C, F);
    matmul_forward(up, inp, w.up, (const Real*)nullptr, N, C, F);
    swiglu_forward(h, gate, up, (size_t)N * F);
    matmul_forward(out, h, w.down, (const Real*)nullptr, N, F, C);
}

// Adds into dinp (N, C) and dw's three gradients. scratch holds 3·N·F elements (overwritten).
template <typename Real>
void swiglu_mlp_backward(Real* dinp, SwiGLUWeights<Real> dw, Real* scratch, const Real* dout,
                         const Real* inp, const Real* gate, const Real* up, const Real* h,
                         SwiGLUWeights<const Real> w, int N, int C, int F) {
    const size_t n = (size_t)N * F;
    Real *dh = scratch, *dgate = scratch + n, *dup = scratch + 2 * n;
#pragma omp parallel for schedule(static) if (worth_parallel(3 * n))
    for (size_t i = 0; i < 3 * n; i++) scratch[i] = 0;
    matmul_backward(dh, dw.down, (Real*)nullptr, dout, h, w.down, N, F, C);
    swiglu_backward(dgate, dup, dh, gate, up, n);
    matmul_backward(dinp, dw.gate, (Real*)nullptr, dgate, inp, w.gate, N, C, F);
    matmul_backward(dinp, dw.up, (Real*)nullptr, dup, inp, w.up, N, C, F);
}
