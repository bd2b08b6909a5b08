// AdamW (Loshchilov & Hutter) with bias correction and decoupled weight decay, elementwise over one
// tensor; the model passes weight_decay = 0 for tensors that are not weight matrices. The gradient
// is first multiplied by grad_scale (the global-norm clipping factor):
//   g = grad_scale · grad;  m = β1 m + (1 − β1) g;  v = β2 v + (1 − β2) g²
//   p −= lr · ( (m / (1 − β1^step)) / (sqrt(v / (1 − β2^step)) + eps) + weight_decay · p )
// and global_sum_of_squares gives the squared gradient norm, summed in double in fixed chunks so
// the result does not depend on the number of threads.
#pragma once
#include <cmath>
#include <cstddef>
#include <vector>

#include "cpu/parallel.h"

template <typename Real>
void adamw_update(Real* params, Real* m, Real* v, const Real* grads, size_t n, Real lr, Real beta1,
                  Real beta2, Real eps, Real weight_decay, Real grad_scale, int step) {
    const Real m_correction = Real(1) - std::pow(beta1, Real(step));
    const Real v_correction = Real(1) - std::pow(beta2, Real(step));
#pragma omp parallel for schedule(static) if (worth_parallel(n))
    for (size_t i = 0; i < n; i++) {
        const Real g = grad_scale * grads[i];
        m[i] = beta1 * m[i] + (Real(1) - beta1) * g;
        v[i] = beta2 * v[i] + (Real(1) - beta2) * g * g;
        const Real m_hat = m[i] / m_correction, v_hat = v[i] / v_correction;
        params[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + weight_decay * params[i]);
    }
}

template <typename Real>
double global_sum_of_squares(const Real* x, size_t n) {
    const size_t chunk = 1 << 16, chunks = (n + chunk - 1) / chunk;
    std::vector<double> partial(chunks);
#pragma omp parallel for schedule(static) if (worth_parallel(n))
    for (size_t c = 0; c < chunks; c++) {
        double sum = 0;
        const size_t end = (c + 1) * chunk < n ? (c + 1) * chunk : n;
#pragma omp simd reduction(+ : sum)
        for (size_t i = c * chunk; i < end; i++) sum += (double)x[i] * x[i];
        partial[c] = sum;
    }
    double total = 0;
    for (double p : partial) total += p;
    return total;
}
