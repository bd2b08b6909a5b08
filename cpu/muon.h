// Muon (momentum orthogonalized by Newton–Schulz) over one weight matrix W, (out, in) row-major.
// The gradient is first multiplied by grad_scale (the global-norm clipping factor), μ is the momentum:
//   g = grad_scale · grad
//   b = μ b + (1 − μ) g;   u = (1 − μ) g + μ b  (Nesterov), or u = b without it
//   O = NS(u)   (newton_schulz below: u with its singular values pushed towards 1)
//   W = W · (1 − lr · weight_decay) − lr · √max(1, out / in) · O
// NS: X = u / (‖u‖_F + 1e-7), transposed when out > in so that X is wide (rows ≤ cols); then `steps`
// times A = X Xᵀ, B = b A + c A A, X = a X + B X with (a, b, c) = (3.4445, −4.7750, 2.0315); X is
// transposed back. The products go through gemm() (cpu/gemm.h), in the matrix's precision.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "cpu/gemm.h"
#include "cpu/parallel.h"
#include "cpu/trust_ratio.h"

// The quintic's coefficients: a steep slope at 0 (a) so that small singular values grow fast, at the
// price of leaving the large ones spread around 1 rather than at 1.
constexpr double kNewtonSchulzA = 3.4445, kNewtonSchulzB = -4.7750, kNewtonSchulzC = 2.0315;
constexpr double kNewtonSchulzEps = 1e-7;

// Scratch arrays reused from call to call: the direction u (then O), and Newton–Schulz's X, its next
// value, A and B.
template <typename Real>
struct MuonScratch {
    std::vector<Real> direction, x, next, gram, poly;
};

// out (rows, cols) = NS(u (rows, cols)) with `steps` iterations; out may be u.
template <typename Real>
void newton_schulz(const Real* u, Real* out, int rows, int cols, int steps, MuonScratch<Real>& s) {
    const bool tall = rows > cols;
    const int m = tall ? cols : rows, n = tall ? rows : cols;  // X is (m, n), m ≤ n
    const size_t size = (size_t)m * n;
    const auto sums = chunked_sums<1>(size, [&](size_t i, double* sum) { sum[0] += (double)u[i] * u[i]; });
    const Real scale = Real(1) / (Real)(std::sqrt(sums[0]) + kNewtonSchulzEps);
    s.x.resize(size), s.next.resize(size), s.gram.resize((size_t)m * m), s.poly.resize((size_t)m * m);
    Real* x = s.x.data();
    Real* next = s.next.data();
#pragma omp parallel for schedule(static) if (worth_parallel(size))
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            x[tall ? (size_t)j * n + i : (size_t)i * n + j] = scale * u[(size_t)i * cols + j];
    const Real a = Real(kNewtonSchulzA), b = Real(kNewtonSchulzB), c = Real(kNewtonSchulzC);
    for (int step = 0; step < steps; step++) {
        gemm(false, true, m, m, n, Real(1), x, n, x, n, Real(0), s.gram.data(), m);  // A = X Xᵀ
        std::copy(s.gram.begin(), s.gram.end(), s.poly.begin());
        gemm(false, false, m, m, m, c, s.gram.data(), m, s.gram.data(), m, b, s.poly.data(), m);  // B = b A + c A A
        std::copy(x, x + size, next);
        gemm(false, false, m, n, m, Real(1), s.poly.data(), m, x, n, a, next, n);  // X = a X + B X
        std::swap(x, next);
    }
#pragma omp parallel for schedule(static) if (worth_parallel(size))
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) out[(size_t)i * cols + j] = x[tall ? (size_t)j * n + i : (size_t)i * n + j];
}

// One Muon step of one matrix; buffer is its momentum b.
template <typename Real>
void muon_update(Real* params, Real* buffer, const Real* grads, int rows, int cols, Real lr, Real momentum,
                 bool nesterov, int ns_steps, Real weight_decay, Real grad_scale, MuonScratch<Real>& scratch) {
    const size_t size = (size_t)rows * cols;
    scratch.direction.resize(size);
    Real* d = scratch.direction.data();
#pragma omp parallel for schedule(static) if (worth_parallel(size))
    for (size_t i = 0; i < size; i++) {
        const Real g = grad_scale * grads[i];
        buffer[i] = momentum * buffer[i] + (Real(1) - momentum) * g;
        d[i] = nesterov ? (Real(1) - momentum) * g + momentum * buffer[i] : buffer[i];
    }
    newton_schulz(d, d, rows, cols, ns_steps, scratch);
    const Real shape_scale = (Real)std::sqrt(std::max(1.0, (double)rows / cols));
    const Real decay = Real(1) - lr * weight_decay, step = lr * shape_scale;
#pragma omp parallel for schedule(static) if (worth_parallel(size))
    for (size_t i = 0; i < size; i++) params[i] = params[i] * decay - step * d[i];
}
