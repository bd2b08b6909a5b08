// LAMB (You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes") over
// one tensor: Adam's bias-corrected step plus weight decay, rescaled so that its norm is the
// weights' norm times the learning rate. The gradient is first multiplied by grad_scale (the global-norm
// clipping factor):
//   g = grad_scale · grad;  m = β1 m + (1 − β1) g;  v = β2 v + (1 − β2) g²
//   u = (m / (1 − β1^step)) / (sqrt(v / (1 − β2^step)) + eps) + weight_decay · p
//   p −= lr · r · u,   r = ‖p‖ / ‖u‖ (cpu/trust_ratio.h: 1 where either norm is 0; 1 without adapt)
// The norms are those of the tensor before the update. The model passes weight_decay = 0 for tensors
// that are not weight matrices, and adapt = false for them under --layer-adaptation matrices.
#pragma once
#include <cmath>
#include <cstddef>

#include "cpu/parallel.h"
#include "cpu/trust_ratio.h"

template <typename Real>
void lamb_update(Real* params, Real* m, Real* v, const Real* grads, size_t n, Real lr, Real beta1, Real beta2,
                 Real eps, Real weight_decay, Real grad_scale, int step, bool adapt) {
    const Real m_correction = Real(1) - std::pow(beta1, Real(step));
    const Real v_correction = Real(1) - std::pow(beta2, Real(step));
    // The direction u of element i, from its moments and its weight before the update.
    auto direction = [&](size_t i) {
        return (m[i] / m_correction) / (std::sqrt(v[i] / v_correction) + eps) + weight_decay * params[i];
    };
    const auto norms = chunked_sums<2>(n, [&](size_t i, double* sums) {
        const Real g = grad_scale * grads[i];
        m[i] = beta1 * m[i] + (Real(1) - beta1) * g;
        v[i] = beta2 * v[i] + (Real(1) - beta2) * g * g;
        const Real u = direction(i);
        sums[0] += (double)params[i] * params[i];
        sums[1] += (double)u * u;
    });
    const Real step_size = lr * (adapt ? (Real)trust_ratio(norms[0], norms[1], 1.0) : Real(1));
#pragma omp parallel for schedule(static) if (worth_parallel(n))
    for (size_t i = 0; i < n; i++) params[i] -= step_size * direction(i);
}
